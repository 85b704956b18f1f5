package rls

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// foldConfig has a 3-level descriptor with detailed_metric, a descriptor
// with value_to_metric whose name is longer than three parts, and a plain
// one.
const foldConfig = `
domain: d
descriptors:
  - key: a
    descriptors:
      - key: b
        descriptors:
          - key: c
            detailed_metric: true
            rate_limit: {unit: minute, requests_per_unit: 4}
  - key: v
    value_to_metric: true
    descriptors:
      - key: w
        descriptors:
          - key: z
            rate_limit: {unit: minute, requests_per_unit: 3}
  - key: p
    rate_limit: {unit: minute, requests_per_unit: 5}
`

// scrapeServer serves reg's /metrics with the promhttp handler, as
// floodgate serves it, on a loopback port.
func scrapeServer(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	return srv.URL + "/metrics"
}

// series is one sample of a scrape: its family, labels and value.
type series struct {
	name   string
	labels map[string]string
	value  float64
}

// seriesID names a series by its family and sorted labels.
func seriesID(name string, labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	b.WriteString(name)
	for _, k := range keys {
		fmt.Fprintf(&b, ",%s=%q", k, labels[k])
	}
	return b.String()
}

// scrape GETs url and parses the text exposition; it fails the test on
// any status but 200.
func scrape(t *testing.T, url string) map[string]series {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %s: %.500s", resp.Status, body)
	}
	out := map[string]series{}
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			t.Fatalf("scrape: %v", err)
		}
		id := seriesID(s.name, s.labels)
		if _, dup := out[id]; dup {
			t.Fatalf("scrape: series %s twice", id)
		}
		out[id] = s
	}
	return out
}

// parseSample parses one sample line of the text format:
// name{label="value",...} value.
func parseSample(line string) (series, error) {
	s := series{labels: map[string]string{}}
	i := strings.IndexAny(line, "{ ")
	if i < 0 {
		return s, fmt.Errorf("line %q", line)
	}
	s.name = line[:i]
	rest := line[i:]
	if rest[0] == '{' {
		rest = rest[1:]
		for rest[0] != '}' {
			eq := strings.Index(rest, `="`)
			if eq < 0 {
				return s, fmt.Errorf("line %q", line)
			}
			name := rest[:eq]
			rest = rest[eq+2:]
			var v strings.Builder
			for rest[0] != '"' {
				if rest[0] == '\\' && len(rest) > 1 {
					switch rest[1] {
					case 'n':
						v.WriteByte('\n')
					default:
						v.WriteByte(rest[1])
					}
					rest = rest[2:]
					continue
				}
				v.WriteByte(rest[0])
				rest = rest[1:]
			}
			s.labels[name] = v.String()
			rest = strings.TrimPrefix(rest[1:], ",")
		}
		rest = rest[1:]
	}
	f, err := strconv.ParseFloat(strings.Fields(rest)[0], 64)
	if err != nil {
		return s, fmt.Errorf("line %q: %w", line, err)
	}
	s.value = f
	return s, nil
}

// override gives d a limit in the request.
func override(d *rlv3.RateLimitDescriptor, perUnit uint32) *rlv3.RateLimitDescriptor {
	d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: perUnit, Unit: typev3.RateLimitUnit_MINUTE}
	return d
}

// TestStatsFoldOntoSharedLabels: statistics names that differ only past
// their third part (a 3-level descriptor with detailed_metric; two limits
// given in requests that share their first two entries) are one series,
// whose counts are their sum, and /metrics keeps answering 200, with
// Floodgate's own series alongside.
func TestStatsFoldOntoSharedLabels(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	st, err := NewStats(reg, StatsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	own := prometheus.NewCounter(prometheus.CounterOpts{Name: "floodgate_test_total", Help: "A series of ours."})
	own.Add(7)
	reg.MustRegister(own)
	c, _ := startService(t, mustParse(t, foldConfig), newClock(), Options{Stats: st})
	url := scrapeServer(t, reg)

	askN(t, c, "d", 2, desc("a", "1", "b", "2", "c", "3"))
	askN(t, c, "d", 1, desc("a", "1", "b", "2", "c", "4"))
	// The same first two entries, a third that differs: d.x_1.y_2.z_3 and
	// d.x_1.y_2.z_4.
	askN(t, c, "d", 1, override(desc("x", "1", "y", "2", "z", "3"), 10))
	askN(t, c, "d", 3, override(desc("x", "1", "y", "2", "z", "4"), 10))

	got := scrape(t, url)
	for _, want := range []struct {
		labels map[string]string
		total  float64
	}{
		{map[string]string{"domain": "d", "key1": "a_1", "key2": "b_2"}, 3},
		{map[string]string{"domain": "d", "key1": "x_1", "key2": "y_2"}, 4},
	} {
		for stat, n := range map[string]float64{"total_hits": want.total, "within_limit": want.total} {
			id := seriesID("ratelimit_service_rate_limit_"+stat, want.labels)
			if s, ok := got[id]; !ok || s.value != n {
				t.Errorf("%s = %v (present %v), want %v", id, s.value, ok, n)
			}
		}
	}
	if s := got[seriesID("floodgate_test_total", nil)]; s.value != 7 {
		t.Errorf("floodgate_test_total = %v, want 7", s.value)
	}
	// Unknown domains whose names the exporter escapes alike are one
	// series too.
	ask(t, c, "no-such", desc("p", "1"))
	ask(t, c, "no_such", desc("p", "1"), desc("p", "2"))
	got = scrape(t, url)
	if s := got[seriesID("ratelimit_service_rate_limit_no_such_domain_not_found", nil)]; s.value != 3 {
		t.Errorf("no_such domain_not_found = %v, want 3", s.value)
	}
}

// foldModel is what the statistics must show: the counts of each series,
// computed from the documented mapping of a name to its labels.
type foldModel struct {
	total, within, over map[string]float64
	notFound            map[string]float64
}

// modelLabels maps a statistics name to its labels as docs/envoy.md says:
// ':' and '|' become '_', then the first three parts split at dots are
// domain, key1 and key2; an empty key2 is no key2.
func modelLabels(name string) map[string]string {
	name = strings.NewReplacer(":", "_", "|", "_").Replace(name)
	parts := strings.SplitN(name, ".", 4)
	l := map[string]string{"domain": parts[0], "key1": ""}
	if len(parts) > 1 {
		l["key1"] = parts[1]
	}
	if len(parts) > 2 && parts[2] != "" {
		l["key2"] = parts[2]
	}
	return l
}

// modelPath is envoyproxy/ratelimit's name of a descriptor given with its
// limit: domain.key_value..., a key alone for an empty value.
func modelPath(domain string, d *rlv3.RateLimitDescriptor) string {
	name := domain
	for _, e := range d.Entries {
		name += "." + e.Key
		if e.Value != "" {
			name += "_" + e.Value
		}
	}
	return name
}

// TestStatsRandomTrafficNeverBreaksMetrics: random traffic (descriptors
// of three levels with detailed_metric, value_to_metric, limits given in
// requests, unknown domains whose names escape alike), scraped through
// promhttp after each batch: every scrape answers 200, and every series
// is the sum of the names folded onto it.
func TestStatsRandomTrafficNeverBreaksMetrics(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, 0x5eed))
	reg := prometheus.NewRegistry()
	st, err := NewStats(reg, StatsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := startService(t, mustParse(t, foldConfig), newClock(), Options{Stats: st})
	url := scrapeServer(t, reg)
	m := foldModel{total: map[string]float64{}, within: map[string]float64{}, over: map[string]float64{}, notFound: map[string]float64{}}
	// Values that fold: "u:1" and "u_1" are one name; "x.y" moves the
	// split; "" is a key alone.
	values := []string{"1", "2", "u:1", "u_1", "x.y"}
	pick := func() string { return values[rnd.IntN(len(values))] }
	const batches, perBatch = 12, 25
	for range batches {
		for range perBatch {
			domain := "d"
			if rnd.IntN(8) == 0 {
				domain = []string{"no-such", "no_such", "no--such", "no.such"}[rnd.IntN(4)]
			}
			var ds []*rlv3.RateLimitDescriptor
			var names []string
			for range 1 + rnd.IntN(3) {
				var d *rlv3.RateLimitDescriptor
				var name string
				switch rnd.IntN(4) {
				case 0:
					va, vb, vc := pick(), pick(), pick()
					d, name = desc("a", va, "b", vb, "c", vc), "d.a_"+va+".b_"+vb+".c_"+vc
				case 1:
					vv := pick()
					d, name = desc("v", vv, "w", pick(), "z", pick()), "d.v_"+vv+".w.z"
				case 2:
					d, name = desc("p", pick()), "d.p"
				default:
					d = &rlv3.RateLimitDescriptor{}
					for range 1 + rnd.IntN(4) {
						v := pick()
						if rnd.IntN(4) == 0 {
							v = ""
						}
						// An empty key and value make an empty part of
						// the name ("d.q_1."): an empty key2 is no key2.
						d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: []string{"a", "q", "r", ""}[rnd.IntN(4)], Value: v})
					}
					override(d, uint32(1+rnd.IntN(5)))
					name = modelPath(domain, d)
				}
				ds = append(ds, d)
				names = append(names, name)
			}
			resp := ask(t, c, domain, ds...)
			if domain != "d" {
				id := seriesID("ratelimit_service_rate_limit_no_such_domain_not_found", nil)
				m.notFound[id] += float64(len(ds))
				continue
			}
			for i, s := range resp.Statuses {
				if s.CurrentLimit == nil {
					continue
				}
				l := modelLabels(names[i])
				m.total[seriesID("ratelimit_service_rate_limit_total_hits", l)]++
				if s.Code == ok {
					m.within[seriesID("ratelimit_service_rate_limit_within_limit", l)]++
				} else {
					m.over[seriesID("ratelimit_service_rate_limit_over_limit", l)]++
				}
			}
		}
		got := scrape(t, url)
		for _, want := range []map[string]float64{m.total, m.within, m.over, m.notFound} {
			for id, n := range want {
				if got[id].value != n {
					t.Fatalf("seed %d: %s = %v, want %v", seed, id, got[id].value, n)
				}
			}
		}
		for id, s := range got {
			fam := s.name
			var want map[string]float64
			switch {
			case fam == "ratelimit_service_rate_limit_total_hits":
				want = m.total
			case fam == "ratelimit_service_rate_limit_within_limit":
				want = m.within
			case fam == "ratelimit_service_rate_limit_over_limit":
				want = m.over
			case strings.HasSuffix(fam, "_domain_not_found"):
				want = m.notFound
			default:
				continue
			}
			if _, ok := want[id]; !ok {
				t.Fatalf("seed %d: unexpected series %s = %v", seed, id, s.value)
			}
		}
	}
	// Sanity: the traffic did fold names onto shared series.
	if len(m.total) == 0 || len(m.notFound) != 1 {
		t.Fatalf("model: %d total_hits series, %d domain_not_found", len(m.total), len(m.notFound))
	}
}
