package alarm

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestReplayedWebhookRefused: a delivery recorded off the wire and sent
// again an hour later, or with its timestamp made to hold the start of
// the body, is refused by the check the receiver is told to make; the
// delivery itself passes it when it arrives, and a wrong secret does not.
func TestReplayedWebhookRefused(t *testing.T) {
	t.Parallel()
	secret := []byte("s3cret")
	type capture struct {
		ts, sig string
		body    []byte
	}
	got := make(chan capture, 1)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- capture{r.Header.Get("X-Floodgate-Timestamp"), r.Header.Get("X-Floodgate-Signature"), body}
	}))
	defer hook.Close()
	sent := time.Date(2026, 12, 1, 15, 42, 7, 0, time.UTC)
	p := testPolicy(t)
	a, err := New(Options{Dedup: NewLocalDedup(), Now: func() time.Time { return sent }})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.SetPolicy(p, map[string]Plan{"small": {Thresholds: []int{100}, Webhook: hook.URL, Secret: secret}}); err != nil {
		t.Fatal(err)
	}
	runAlarms(t, a)
	use(a, p, "key:acme", 10)
	var c capture
	select {
	case c = <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("no delivery")
	}

	// The body's bytes up to its first "." moved into the timestamp sign
	// alike: the signed bytes are timestamp "." body.
	dot := bytes.IndexByte(c.body, '.')
	if dot < 0 {
		t.Fatalf("body %s has no dot", c.body)
	}
	movedTS, movedBody := c.ts+"."+string(c.body[:dot]), c.body[dot+1:]
	if Verify(secret, movedTS, movedBody, c.sig) {
		t.Errorf("Verify took timestamp %q with body %q, made from the delivery's", movedTS, movedBody)
	}

	if err := VerifyAt(secret, c.ts, c.body, c.sig, sent.Add(2*time.Second), 0); err != nil {
		t.Errorf("the delivery, 2 s after it was signed: %v", err)
	}
	for _, tc := range []struct {
		what string
		ts   string
		body []byte
		key  []byte
		at   time.Time
		want error
	}{
		{"replayed an hour later", c.ts, c.body, secret, sent.Add(time.Hour), ErrStaleTimestamp},
		{"replayed 6 minutes later", c.ts, c.body, secret, sent.Add(6 * time.Minute), ErrStaleTimestamp},
		{"signed an hour ahead of the receiver", c.ts, c.body, secret, sent.Add(-time.Hour), ErrStaleTimestamp},
		{"timestamp holding the body's start", movedTS, movedBody, secret, sent, ErrBadTimestamp},
		{"timestamp with a sign", "+" + c.ts, c.body, secret, sent, ErrBadTimestamp},
		{"timestamp with a leading zero", "0" + c.ts, c.body, secret, sent, ErrBadTimestamp},
		{"no timestamp", "", c.body, secret, sent, ErrBadTimestamp},
		{"another secret", c.ts, c.body, []byte("other"), sent, ErrBadSignature},
		{"another body", c.ts, append([]byte(" "), c.body...), secret, sent, ErrBadSignature},
	} {
		if err := VerifyAt(tc.key, tc.ts, tc.body, c.sig, tc.at, 0); !errors.Is(err, tc.want) {
			t.Errorf("%s: VerifyAt = %v, want %v", tc.what, err, tc.want)
		}
	}
	if err := VerifyAt(secret, c.ts, c.body, c.sig, sent.Add(time.Hour), 2*time.Hour); err != nil {
		t.Errorf("an hour late with a tolerance of 2 h: %v", err)
	}
}
