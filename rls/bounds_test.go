package rls

import (
	"bytes"
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate/floodgate/limiter"
	"github.com/floodgate/floodgate/store/memstore"
)

// TestServerBoundsEachConnection: the service tells every client, in its
// first SETTINGS, how many calls a connection may have in flight and how
// much metadata a call may carry; gRPC's own defaults bound neither, and a
// client once held 20,000 calls that never sent their message (and 200 MB)
// on one connection.
func TestServerBoundsEachConnection(t *testing.T) {
	_, addr, cancel, _ := basicServer(t, ServerOptions{})
	defer cancel()
	_, fr := rawH2(t, addr, 10*time.Second)
	got := map[http2.SettingID]uint32{}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading the server's SETTINGS: %v", err)
		}
		if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
			_ = sf.ForeachSetting(func(s http2.Setting) error { got[s.ID] = s.Val; return nil })
			break
		}
	}
	if got[http2.SettingMaxConcurrentStreams] != DefaultMaxConcurrentStreams {
		t.Errorf("max concurrent streams %d (set: %v), want %d", got[http2.SettingMaxConcurrentStreams], got, DefaultMaxConcurrentStreams)
	}
	if got[http2.SettingMaxHeaderListSize] != DefaultMaxHeaderListSize {
		t.Errorf("max header list size %d (set: %v), want %d", got[http2.SettingMaxHeaderListSize], got, DefaultMaxHeaderListSize)
	}
}

// TestJSONSaysWhy: /json refuses what is not a request with 400 and the
// reason after the status's text (envoyproxy/ratelimit writes the text
// alone), a body over 1 MiB with 413, and a request of many descriptors
// (a body past the part read at once) is still read whole and answered.
func TestJSONSaysWhy(t *testing.T) {
	st, err := memstore.New(memstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	h := JSONHandler(New(limiter.New(st, limiter.Options{}), mustParse(t, basic), Options{}))
	post := func(body string) (int, string) {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/json", strings.NewReader(body)))
		return w.Code, w.Body.String()
	}
	if code, body := post(`{"domain":`); code != 400 || !strings.HasPrefix(body, "Bad Request: not a RateLimitRequest in JSON: ") {
		t.Errorf("broken JSON: %d %q", code, body)
	}
	if code, body := post(`{"domain":"d"}`); code != 400 || !strings.HasPrefix(body, "Bad Request: ") || len(body) < len("Bad Request: x\n") {
		t.Errorf("no descriptors: %d %q", code, body)
	}
	if code, body := post(`{"domain":"d","descriptors":[` + strings.Repeat(`{"entries":[{"key":"x","value":"y"}]},`, 40000) + `]}`); code != 413 {
		t.Errorf("a body over 1 MiB: %d %.80q", code, body)
	}
	var many bytes.Buffer
	many.WriteString(`{"domain":"d","descriptors":[{"entries":[{"key":"user","value":"g"}]}],"hits_addend":1,"xx":"`)
	many.WriteString(strings.Repeat("a", 100<<10))
	many.WriteString(`"}`)
	if code, body := post(many.String()); code != 400 || !strings.Contains(body, "xx") {
		t.Errorf("a body of 100 KiB with an unknown field: %d %.120q; want it read whole and the field named", code, body)
	}
}

// TestHitsAddendBoundAlike: a hits_addend past what any limit holds is
// over the limit whether the request or a descriptor gives it, as
// envoyproxy/ratelimit answers it (both were refused with InvalidArgument,
// which Envoy passes by default), and nothing is charged.
func TestHitsAddendBoundAlike(t *testing.T) {
	c, _ := startService(t, mustParse(t, basic), nil, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	big := desc("user", "h")
	big.HitsAddend = wrapperspb.UInt64(math.MaxUint64)
	for name, req := range map[string]*rlsv3.RateLimitRequest{
		"the request's":  {Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{desc("user", "h")}, HitsAddend: math.MaxUint32},
		"a descriptor's": {Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{big}},
	} {
		r, err := c.ShouldRateLimit(ctx, req)
		if err != nil || r.OverallCode != over || r.Statuses[0].LimitRemaining != 0 {
			t.Errorf("%s hits_addend past 2^32-1: %v %v, want OVER_LIMIT", name, r, err)
		}
	}
	if r := ask(t, c, "d", desc("user", "h")); r.Statuses[0].LimitRemaining != 9 {
		t.Errorf("a refused request charged: %v", r)
	}
}
