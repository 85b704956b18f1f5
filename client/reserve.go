package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// ErrUnknownReservation reports a settle the service refused: the
// reservation was settled already, expired (it kept its estimate), or was
// made while the service's store failed.
var ErrUnknownReservation = errors.New("client: reservation unknown: settled already, expired or never made")

// ErrSettled reports a second Settle of a Reservation.
var ErrSettled = errors.New("client: reservation already settled")

// Reservation is the service's answer to Reserve: the decision and, when
// allowed, the estimates held for the caller until it settles them with
// the actual costs (or cancels them), or until the reservation's TTL
// passes and they are kept as they are. It is safe for concurrent use.
type Reservation struct {
	// Decision is the answer to the reservation, as Check gives it.
	Decision

	c     *HTTP
	token string

	mu    sync.Mutex // guards state, unsent and busy
	state reservationState
	// busy, while a Settle or Cancel is on its way, is closed when it
	// ends: another one waits for it, and goes on only if it failed.
	busy chan struct{}
	// unsent is the actual cost a Cancel sends after a Settle that failed
	// (nil: none, a Cancel gives everything back): that Settle's cost when
	// the service may not have heard it, or the estimates (an empty map)
	// when it read it and refused it. The call went either way, and a
	// Cancel must not give back what it used.
	unsent any
}

// reservationState is where a Reservation stands.
type reservationState uint8

const (
	held reservationState = iota // to be settled
	done                         // settled, cancelled, or denied
)

// Settlement is the service's answer to a Settle.
type Settlement struct {
	// Overrun adds up the units of the actual costs above the estimates
	// that the limits could not take: they had run out.
	Overrun int64
	// Limits holds each reserved limit's state afterwards.
	Limits []SettledLimit
}

// SettledLimit is one limit's state after a settle.
type SettledLimit struct {
	Limit     string `json:"limit"`
	Key       string `json:"key"`
	Capacity  int64  `json:"capacity"`
	Remaining int64  `json:"remaining"`
	Overrun   int64  `json:"overrun"`
}

// Reserve asks the HTTP API (POST /v1/reserve) to reserve the hits, whose
// costs are estimates, all or nothing: for a call whose real cost is known
// only afterwards (the tokens of a completion). When the answer is
// allowed, settle the reservation with Settle once the cost is known, or
// give it back with Cancel; Cancel after Settle does nothing, so
// "defer r.Cancel(ctx)" gives the estimate back on every early return.
// When denied, RetryAfter says when to ask again and there is nothing to
// settle. ttl bounds how long the service holds the reservation (0: its
// default, the limits' reserve_ttl, 5 minutes when they have none).
//
// When ctx ends before the answer, Reserve returns ctx's error at once;
// the exchange goes on without the caller, within the client's timeout,
// and a reservation it brings is cancelled (sent twice should the first
// cancel fail): the service may have made it already, and no one else can
// settle it.
func (c *HTTP) Reserve(ctx context.Context, ttl time.Duration, hits ...Hit) (*Reservation, error) {
	if len(hits) == 0 {
		return nil, fmt.Errorf("client: reserve: no hits")
	}
	if err := validHits(hits); err != nil {
		return nil, fmt.Errorf("client: reserve: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("client: reserve: %w", err)
	}
	in := struct {
		Hits []Hit   `json:"hits"`
		TTL  float64 `json:"ttl,omitempty"`
	}{Hits: hits, TTL: ttl.Seconds()}
	// The exchange does not end with ctx (the client's timeout bounds
	// it), so that a reservation made for a caller that left is seen.
	answered := make(chan reserved, 1)
	go func() {
		var a reserved
		a.status, a.raw, a.err = c.post(context.WithoutCancel(ctx), "/v1/reserve", in, false)
		answered <- a
	}()
	select {
	case a := <-answered:
		return c.reservation(a)
	case <-ctx.Done():
	}
	go func() {
		r, err := c.reservation(<-answered)
		if err != nil || !r.Allowed {
			return
		}
		// Sent though ctx has ended, as every settle is, and once more
		// when it fails, as a deferred Cancel sends a failed Settle
		// again: no one else can give the reservation back.
		if r.Cancel(ctx) != nil {
			_ = r.Cancel(ctx)
		}
	}()
	return nil, fmt.Errorf("client: reserve: %w", ctx.Err())
}

// reserved is what a POST /v1/reserve brought back.
type reserved struct {
	status int
	raw    []byte
	err    error
}

// reservation reads the answer to a reserve.
func (c *HTTP) reservation(in reserved) (*Reservation, error) {
	if in.err != nil {
		return nil, fmt.Errorf("client: reserve: %w", in.err)
	}
	var a struct {
		answer
		Reservation string `json:"reservation"`
	}
	jerr := json.Unmarshal(in.raw, &a)
	switch {
	case (in.status == http.StatusOK || in.status == http.StatusTooManyRequests) && jerr == nil && a.Allowed != nil:
		r := &Reservation{c: c, token: a.Reservation, Decision: Decision{
			Allowed: *a.Allowed, Limit: a.Limit, Remaining: a.Remaining,
			RetryAfter: seconds(a.RetryAfter), ResetAfter: seconds(a.Reset), Delay: seconds(a.Delay),
			Binding: a.Binding,
		}}
		if r.Allowed && r.token == "" {
			return nil, fmt.Errorf("client: reserve: %w: allowed without a reservation", ErrStatus)
		}
		if !r.Allowed {
			r.state = done
		}
		return r, nil
	case a.Code == "never_fits":
		return nil, errNeverFits(a.Error)
	}
	return nil, &StatusError{Code: in.status, Message: a.Error}
}

// Settle ends the reservation with actual as the real cost of every
// reserved hit: below the estimate the difference is given back; above
// it the excess is charged as far as each limit allows, and what did not
// fit is the Settlement's Overrun. A second Settle is ErrSettled; a
// reservation the service no longer holds is ErrUnknownReservation. A
// Settle or Cancel that comes while another is on its way waits for it,
// and is sent only if that one failed.
// Settle is sent even when ctx has ended (the caller's own client went
// away after the call), within the client's timeout: the reservation is
// settled by what the call cost, not held at its estimate until its TTL.
// For the same reason a Settle that gets no answer (the service cannot be
// reached, or the connection breaks: it is restarting) is sent again
// until it gets one, within the client's timeout.
func (r *Reservation) Settle(ctx context.Context, actual int64) (Settlement, error) {
	return r.settle(ctx, actual, false)
}

// SettleLimits is Settle with a cost per limit name: the limits not named
// keep their estimates (all of them when actual is empty or nil).
func (r *Reservation) SettleLimits(ctx context.Context, actual map[string]int64) (Settlement, error) {
	if actual == nil {
		actual = map[string]int64{} // sent as {}: a nil map would be null, which the service refuses
	}
	return r.settle(ctx, actual, false)
}

// Cancel gives the whole reservation back (an actual cost of 0). It does
// nothing for a reservation that was denied or is settled already. Like
// Settle it is sent even when ctx has ended, so a deferred Cancel gives
// the estimate back when the caller returns early because its own client
// left. After a Settle that failed (the service may not have heard it),
// Cancel sends that Settle again instead: the call it settles went, and
// a deferred Cancel must not give back what it used. After a Settle the
// service read and refused (a *StatusError of code 400: a cost below 0, a
// limit the reservation does not hold), which it would refuse again,
// Cancel settles the reservation at its estimates: they stay charged, as
// they would once its TTL passed, and its concurrency slots come back now.
// A Cancel that comes while a Settle is on its way waits for it and does
// this once it has failed.
func (r *Reservation) Cancel(ctx context.Context) error {
	_, err := r.settle(ctx, nil, true)
	if errors.Is(err, ErrSettled) {
		return nil
	}
	return err
}

// settle posts /v1/settle with actual (nil: cancel), or for a Cancel
// (cancel set) with what a failed Settle left unsent. It is sent even
// when ctx has ended (the caller's own client went away), within the
// client's timeout: a settle or cancel that the caller's leaving kept
// from the service would leave the estimate held until the TTL, or have a
// deferred Cancel give back a cost the caller meant to settle. It first
// waits for a settle on its way, which the client's timeout bounds too.
func (r *Reservation) settle(ctx context.Context, actual any, cancel bool) (Settlement, error) {
	ctx = context.WithoutCancel(ctx)
	r.mu.Lock()
	for r.busy != nil {
		busy := r.busy
		r.mu.Unlock()
		<-busy
		r.mu.Lock()
	}
	if r.state != held {
		r.mu.Unlock()
		return Settlement{}, ErrSettled
	}
	if cancel {
		actual = r.unsent
	}
	busy := make(chan struct{})
	r.busy = busy
	r.mu.Unlock()
	st, err := r.post(ctx, actual)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.busy = nil
	close(busy)
	r.state = done
	if err != nil && !errors.Is(err, ErrUnknownReservation) {
		r.state = held // the service may not have heard, or refused: settle again
		var se *StatusError
		switch {
		case actual == nil:
		case errors.As(err, &se) && se.Code == http.StatusBadRequest:
			// Read and refused: sent again it is refused again. The
			// estimates are what the TTL would keep.
			r.unsent = map[string]int64{}
		default:
			r.unsent = actual
		}
	}
	return st, err
}

// post sends the settle to the service.
func (r *Reservation) post(ctx context.Context, actual any) (Settlement, error) {
	in := struct {
		Reservation string `json:"reservation"`
		Actual      any    `json:"actual,omitempty"`
		Cancel      bool   `json:"cancel,omitempty"`
	}{Reservation: r.token, Actual: actual, Cancel: actual == nil}
	status, raw, err := r.c.post(ctx, "/v1/settle", in, true)
	if err != nil {
		return Settlement{}, fmt.Errorf("client: settle: %w", err)
	}
	var a struct {
		Settled   bool           `json:"settled"`
		Overrun   int64          `json:"overrun"`
		Decisions []SettledLimit `json:"decisions"`
		Error     string         `json:"error"`
		Code      string         `json:"code"`
	}
	jerr := json.Unmarshal(raw, &a)
	switch {
	case status == http.StatusOK && jerr == nil && a.Settled:
		return Settlement{Overrun: a.Overrun, Limits: a.Decisions}, nil
	case a.Code == "unknown_reservation":
		return Settlement{}, fmt.Errorf("client: settle: %w", ErrUnknownReservation)
	}
	return Settlement{}, &StatusError{Code: status, Message: a.Error}
}

// post sends in as JSON to the service's path and returns the status and
// the body of the answer (at most 1 MiB), within the client's timeout.
// With again set, a request that got no answer (the connection could not
// be made, or broke before the answer: the service restarting) is sent
// again until one comes or the timeout passes, pausing 50ms, then twice
// as long each time up to a second. That is safe for a settle: the
// service applies one settle of a reservation, and a copy that comes
// after it changes nothing and is answered as the settle was (within a
// minute), so a settle whose answer was lost returns its Settlement.
func (c *HTTP) post(ctx context.Context, path string, in any, again bool) (int, []byte, error) {
	body, err := json.Marshal(in)
	if err != nil {
		return 0, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var resp *http.Response
	for pause := 50 * time.Millisecond; ; pause = min(2*pause, time.Second) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(body))
		if err != nil {
			return 0, nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		if resp, err = c.client.Do(req); err == nil {
			break
		}
		if !again || !sleep(ctx, pause) {
			return 0, nil, err
		}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, nil, fmt.Errorf("read answer: %w", err)
	}
	return resp.StatusCode, raw, nil
}

// sleep pauses for d, and reports false when ctx ends first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
