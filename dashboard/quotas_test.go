package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestQuotasOutliveTheClientThatAsked: a client that leaves while the
// quota panel is being read does not turn the panel into an error for
// the clients that ask after it: the read goes on for them.
func TestQuotasOutliveTheClientThatAsked(t *testing.T) {
	t.Parallel()
	started, returned, release := make(chan struct{}, 1), make(chan error, 1), make(chan struct{})
	h := NewHandler(Options{Recorder: NewRecorder(1000), Info: func() Instance { return Instance{} },
		Quotas: func(ctx context.Context) ([]Quota, error) {
			started <- struct{}{}
			select {
			case <-ctx.Done():
				returned <- ctx.Err()
				return nil, ctx.Err()
			case <-release:
				return []Quota{{Key: "acme", Capacity: 10, Used: 5, Percent: 50}}, nil
			}
		}})
	srv := httptest.NewServer(h)
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/ui/api/quotas", nil)
		resp, err := srv.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		first <- err
	}()
	<-started
	cancel()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Fatalf("the first client's request ended with %v, want it canceled", err)
	}
	type answer struct {
		status int
		body   map[string]any
		err    error
	}
	second := make(chan answer, 1)
	go func() {
		resp, err := http.Get(srv.URL + "/ui/api/quotas")
		if err != nil {
			second <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		a := answer{status: resp.StatusCode}
		a.err = json.NewDecoder(resp.Body).Decode(&a.body)
		second <- a
	}()
	// Give the server the time to see the first client leave, then let
	// the read finish.
	select {
	case <-returned:
	case <-time.After(2 * time.Second):
	}
	close(release)
	select {
	case <-started: // a second read, after a failed first one
	default:
	}
	a := <-second
	if a.err != nil || a.status != http.StatusOK {
		t.Fatalf("the next client got %d %v (%v), want the quotas", a.status, a.body, a.err)
	}
	if keys, _ := a.body["keys"].([]any); len(keys) != 1 {
		t.Fatalf("the next client got %v, want the key acme", a.body)
	}
}

// TestOverviewRefusesABadSince: a since that is not a Unix second is
// refused with 400 naming it, rather than read as the whole hour.
func TestOverviewRefusesABadSince(t *testing.T) {
	t.Parallel()
	now := time.Now().Unix()
	rec := NewRecorder(now)
	rec.Tick(now + 1)
	srv := httptest.NewServer(NewHandler(Options{Recorder: rec, Info: func() Instance { return Instance{} }}))
	defer srv.Close()
	for _, since := range []string{"abc", "1e3", "99999999999999999999", "1000.5", ""} {
		resp, err := http.Get(srv.URL + "/ui/api/overview?since=" + since)
		if err != nil {
			t.Fatal(err)
		}
		var body map[string]any
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("since=%q: %v", since, err)
		}
		msg, _ := body["error"].(string)
		switch {
		case since == "" && resp.StatusCode != http.StatusOK:
			t.Errorf("no since: %d %q, want 200", resp.StatusCode, msg)
		case since != "" && (resp.StatusCode != http.StatusBadRequest || !strings.Contains(msg, "since")):
			t.Errorf("since=%q: %d (error %q), want 400 naming since", since, resp.StatusCode, msg)
		}
	}
}
