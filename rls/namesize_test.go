package rls

import (
	"fmt"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"

	"github.com/floodgate/floodgate/fields"
	"github.com/floodgate/floodgate/internal/sfv"
)

// TestHugeDescriptorValueHeadersBounded: a limit named by a request's
// descriptor value of 100 KB and of 800 KB (a limit override, named by
// its path as envoyproxy/ratelimit names it) is told in RateLimit-Policy
// and RateLimit by a short stable form, so that the headers to add stay
// far under Envoy's 60 KiB for response headers; the fields still parse
// as structured field lists and name the same limit alike in both, and
// a short name is told as it is.
func TestHugeDescriptorValueHeadersBounded(t *testing.T) {
	c, _ := startService(t, mustParse(t, basic), newClock(), Options{})
	override := func(value string) *rlv3.RateLimitDescriptor {
		d := desc("tenant", value)
		d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_MINUTE}
		return d
	}
	headersSize := func(r *rlsv3.RateLimitResponse) int {
		n := 0
		for _, h := range r.GetResponseHeadersToAdd() {
			n += len(h.GetKey()) + len(h.GetValue())
		}
		return n
	}
	var names []string
	for _, size := range []int{100 << 10, 800 << 10} {
		for _, d := range []*rlv3.RateLimitDescriptor{desc("user", strings.Repeat("u", size)), override(strings.Repeat("v", size))} {
			r := ask(t, c, "d", d)
			if got := headersSize(r); got > 2048 {
				t.Errorf("a descriptor value of %d bytes: headers to add of %d bytes, want at most 2048", size, got)
			}
			pol, rl := header(r, "RateLimit-Policy"), header(r, "RateLimit")
			pl, err := sfv.ParseList(pol)
			if err != nil || len(pl) != 1 {
				t.Fatalf("RateLimit-Policy %.200q: %v", pol, err)
			}
			ll, err := sfv.ParseList(rl)
			if err != nil || len(ll) != 1 {
				t.Fatalf("RateLimit %.200q: %v", rl, err)
			}
			if pl[0].Value != ll[0].Value {
				t.Errorf("RateLimit-Policy names %v, RateLimit %v", pl[0].Value, ll[0].Value)
			}
			names = append(names, pol)
		}
	}
	// The same request names its limit alike; another value another way.
	if r := ask(t, c, "d", override(strings.Repeat("v", 800<<10))); header(r, "RateLimit-Policy") != names[3] {
		t.Errorf("the same limit told as %q, then as %q", names[3], header(r, "RateLimit-Policy"))
	}
	if names[1] == names[3] {
		t.Errorf("limits of values of 100 KB and 800 KB told alike: %q", names[1])
	}
	// A short name is told in full.
	r := ask(t, c, "d", override("acme"))
	if got, want := header(r, "RateLimit-Policy"), `"d.tenant_acme";q=5;w=60`; got != want {
		t.Errorf("RateLimit-Policy of a short name: %q, want %q", got, want)
	}
}

// TestCurrentLimitNameBounded: the current_limit of a limit named by a
// request's descriptor values (an override of 800 KB, and 64 of 15 KB in
// one request) names it by the short stable form RateLimit-Policy tells it
// by, so that the answer stays small: Envoy writes the name into
// X-RateLimit-Limit (`;name="..."`) when it adds those headers, and
// envoyproxy/ratelimit names such a limit "" in every answer. A short
// name is told whole. Before, the name was carried whole: an answer of
// 820 KB to the one, of 1 MB to the other.
func TestCurrentLimitNameBounded(t *testing.T) {
	c, _ := startService(t, mustParse(t, basic), newClock(), Options{})
	override := func(value string) *rlv3.RateLimitDescriptor {
		d := desc("tenant", value)
		d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_MINUTE}
		return d
	}
	name := func(r *rlsv3.RateLimitResponse, i int) string { return r.GetStatuses()[i].GetCurrentLimit().GetName() }
	huge := override(strings.Repeat("v", 800<<10))
	r := ask(t, c, "d", huge)
	got := name(r, 0)
	if len(got) > fields.MaxNameLen || proto.Size(r) > 8<<10 {
		t.Fatalf("an override of 800 KB: current_limit.name of %d bytes, an answer of %d bytes", len(got), proto.Size(r))
	}
	pl, err := sfv.ParseList(header(r, "RateLimit-Policy"))
	if err != nil || len(pl) != 1 || pl[0].Value != got {
		t.Errorf("current_limit.name %.80q; RateLimit-Policy names %.80v (%v)", got, pl, err)
	}
	if again := name(ask(t, c, "d", huge), 0); again != got {
		t.Errorf("the same limit named %.80q, then %.80q", got, again)
	}
	if other := name(ask(t, c, "d", override(strings.Repeat("v", 800<<10)+"w")), 0); other == got {
		t.Errorf("limits of two values named alike: %.80q", got)
	}
	var many []*rlv3.RateLimitDescriptor
	for i := range 64 {
		many = append(many, override(fmt.Sprintf("%d-%s", i, strings.Repeat("m", 15<<10))))
	}
	if r := ask(t, c, "d", many...); proto.Size(r) > 64<<10 {
		t.Errorf("64 overrides of 15 KB: an answer of %d bytes", proto.Size(r))
	}
	if got := name(ask(t, c, "d", override("acme")), 0); got != "d.tenant_acme" {
		t.Errorf("a short name told as %.80q, want d.tenant_acme", got)
	}
}

// TestEscapedNamesHeadersBounded: the fields write a name as a quoted
// String, a quote or backslash in it escaped with a backslash, so a name
// of quotes takes twice its bytes in each field. 64 limit overrides (a
// request's most descriptors) named by values of quotes and backslashes,
// names of 256 and of 309 bytes, make headers to add as small as names of
// letters do (34 KB): far under Envoy's 60 KiB for response headers, and
// the fields still parse and name every limit. Names measured unescaped
// made 66 KB and 64 KB.
func TestEscapedNamesHeadersBounded(t *testing.T) {
	c, _ := startService(t, mustParse(t, basic), newClock(), Options{})
	for _, size := range []int{256 - len("d.tenant_"), 300} {
		var ds []*rlv3.RateLimitDescriptor
		for i := range 64 {
			// Distinct values: i quotes, then backslashes.
			d := desc("tenant", strings.Repeat(`"`, i)+strings.Repeat(`\`, size-i))
			d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_MINUTE}
			ds = append(ds, d)
		}
		r := ask(t, c, "d", ds...)
		n := 0
		for _, h := range r.GetResponseHeadersToAdd() {
			n += len(h.GetKey()) + len(h.GetValue())
		}
		// Names of letters make about 35 KB (fields.MaxNameLen).
		if n > 40<<10 {
			t.Errorf("64 names of %d bytes of quotes and backslashes: headers to add of %d bytes, want at most 40 KiB", len("d.tenant_")+size, n)
		}
		for _, f := range []string{"RateLimit-Policy", "RateLimit"} {
			l, err := sfv.ParseList(header(r, f))
			if err != nil || len(l) != 64 {
				t.Errorf("%s of 64 escaped names: %d items, %v", f, len(l), err)
			}
		}
	}
}
