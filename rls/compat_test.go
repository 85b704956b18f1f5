package rls

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// exchange is one request of a recorded sequence and the answer
// envoyproxy/ratelimit gave.
type exchange struct {
	line int
	req  *rlsv3.RateLimitRequest
	want *rlsv3.RateLimitResponse
}

// readExchanges reads a file of requests, each followed by "=> answer",
// in the protobuf JSON mapping.
func readExchanges(t *testing.T, path string) []exchange {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []exchange
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "=> "):
			want := &rlsv3.RateLimitResponse{}
			if err := protojson.Unmarshal([]byte(line[3:]), want); err != nil {
				t.Fatalf("%s:%d: %v", path, n, err)
			}
			out[len(out)-1].want = want
		default:
			req := &rlsv3.RateLimitRequest{}
			if err := protojson.Unmarshal([]byte(line), req); err != nil {
				t.Fatalf("%s:%d: %v", path, n, err)
			}
			out = append(out, exchange{line: n, req: req})
		}
	}
	return out
}

// withoutDurations checks that every duration_until_reset of resp is in
// (0, its unit] and clears it, for comparing answers made at different
// instants.
func withoutDurations(resp *rlsv3.RateLimitResponse, whole bool) (*rlsv3.RateLimitResponse, error) {
	resp = proto.Clone(resp).(*rlsv3.RateLimitResponse)
	for _, st := range resp.Statuses {
		if d := st.DurationUntilReset; d != nil {
			unit := time.Duration(Unit(st.GetCurrentLimit().GetUnit()).seconds()) * time.Second
			if got := d.AsDuration(); got <= 0 || got > unit || (whole && got%time.Second != 0) {
				return nil, fmt.Errorf("duration_until_reset %v is not in (0, %v] (or not whole seconds)", got, unit)
			}
			st.DurationUntilReset = nil
		}
	}
	return resp, nil
}

// TestCompatAnswersAsEnvoyproxyRatelimit replays a sequence of requests
// with several descriptors, costs (the request's hits_addend, a
// descriptor's own, 0 to look without counting), requests over the limit,
// wildcards (first in file order, middle and trailing), a shared
// threshold, shadow and quota mode, unlimited and blocked limits,
// replaces and limits given in requests, and expects the answers
// envoyproxy/ratelimit gave.
func TestCompatAnswersAsEnvoyproxyRatelimit(t *testing.T) {
	src, err := os.ReadFile("testdata/compat/shop.yaml")
	if err != nil {
		t.Fatal(err)
	}
	seq := readExchanges(t, "testdata/compat/shop.txt")
	everywhere(t, Minute, func(r *run) error {
		if !r.compat {
			return nil // Floodgate's answers differ: see TestFloodgateAnswers.
		}
		c := r.start(string(src), Options{})
		for _, x := range seq {
			got, err := withoutDurations(r.ask(c, x.req), true)
			if err != nil {
				return fmt.Errorf("shop.txt:%d: %v", x.line, err)
			}
			if !proto.Equal(got, x.want) {
				return fmt.Errorf("shop.txt:%d:\n got %v\nwant %v", x.line, got, x.want)
			}
		}
		return nil
	})
}

// TestFloodgateAnswersDifferWhereDocumented replays the same sequence in
// Floodgate's mode and checks the answers that differ from
// envoyproxy/ratelimit's, as docs/envoy.md describes them.
func TestFloodgateAnswersDifferWhereDocumented(t *testing.T) {
	src, err := os.ReadFile("testdata/compat/shop.yaml")
	if err != nil {
		t.Fatal(err)
	}
	seq := readExchanges(t, "testdata/compat/shop.txt")
	everywhere(t, Minute, func(r *run) error {
		if r.compat {
			return nil
		}
		c := r.start(string(src), Options{NoFields: true})
		got := make([]*rlsv3.RateLimitResponse, len(seq))
		for i, x := range seq {
			if x.req.Descriptors[0].IsNegativeHits {
				continue // refused: Floodgate never refunds
			}
			got[i] = r.ask(c, x.req)
		}
		check := func(i int, want string) error {
			w := &rlsv3.RateLimitResponse{}
			if err := protojson.Unmarshal([]byte(want), w); err != nil {
				return err
			}
			g, err := withoutDurations(got[i], false)
			if err != nil {
				return err
			}
			if !proto.Equal(g, w) {
				return fmt.Errorf("shop.txt:%d:\n got %v\nwant %v", seq[i].line, g, w)
			}
			return nil
		}
		for i, want := range map[int]string{
			// Over the limit: what is left is still said; the names are
			// the descriptors' paths.
			3: `{"overallCode":"OVER_LIMIT","statuses":[{"code":"OVER_LIMIT","currentLimit":{"name":"shop.client","requestsPerUnit":3,"unit":"MINUTE"}}]}`,
			// All or nothing: the request over the limit for c1 takes
			// nothing from c2.
			5: `{"overallCode":"OVER_LIMIT","statuses":[{"code":"OVER_LIMIT","currentLimit":{"name":"shop.client","requestsPerUnit":3,"unit":"MINUTE"}},{"code":"OK","currentLimit":{"name":"shop.client","requestsPerUnit":3,"unit":"MINUTE"},"limitRemaining":3}]}`,
			6: `{"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"name":"shop.client","requestsPerUnit":3,"unit":"MINUTE"},"limitRemaining":2}]}`,
			// hits_addend 0 looks: would one more pass? With 1 left, yes.
			8: `{"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"name":"shop.client","requestsPerUnit":3,"unit":"MINUTE"},"limitRemaining":1}]}`,
			// Cost 2 with 1 left is refused and takes nothing; the look
			// after it still finds 1 left.
			9:  `{"overallCode":"OVER_LIMIT","statuses":[{"code":"OVER_LIMIT","currentLimit":{"name":"shop.client","requestsPerUnit":3,"unit":"MINUTE"},"limitRemaining":1}]}`,
			10: `{"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"name":"shop.client","requestsPerUnit":3,"unit":"MINUTE"},"limitRemaining":1}]}`,
			// The most literal wildcard wins: /api/*/orders before /api/*.
			14: `{"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"name":"shop.path_/api/*/orders","requestsPerUnit":2,"unit":"HOUR"},"limitRemaining":1}]}`,
		} {
			if err := check(i, want); err != nil {
				return err
			}
		}
		return nil
	})
}

// TestCompatLooksAndIgnoresNegativeHits: in compatibility mode a
// descriptor's hits_addend of 0 reads the counter without adding to it
// and is over the limit only once the counter is past the limit, and
// is_negative_hits is ignored (the hits are added), as
// envoyproxy/ratelimit does.
func TestCompatLooksAndIgnoresNegativeHits(t *testing.T) {
	everywhere(t, Minute, func(r *run) error {
		if !r.compat {
			return nil
		}
		c := r.start("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 2}\n", Options{})
		look := desc("k", "v")
		look.HitsAddend = wrapperspb.UInt64(0)
		neg := desc("k", "v")
		neg.IsNegativeHits = true
		for i, want := range []struct {
			d    *rlsv3.RateLimitRequest
			code rlsv3.RateLimitResponse_Code
			left uint32
		}{
			{req("d", look), ok, 2}, {req("d", neg), ok, 1}, {req("d", desc("k", "v")), ok, 0},
			{req("d", look), ok, 0}, {req("d", desc("k", "v")), over, 0}, {req("d", look), over, 0},
		} {
			if resp := r.ask(c, want.d); statusIs(resp.Statuses[0], want.code, 2, minute, want.left) != nil {
				return fmt.Errorf("request %d: %v, want %v with %d left", i+1, resp, want.code, want.left)
			}
		}
		return nil
	})
}
