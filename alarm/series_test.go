package alarm

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestWebhookSeriesFromTheStart: every result of floodgate_alarm_webhooks_total
// is a series from the start, at 0: made only by its first event, at 1, a
// series shows no increase for that event, and an alert on failed webhooks
// missed each instance's first.
func TestWebhookSeriesFromTheStart(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := New(Options{Dedup: NewLocalDedup(), Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, mf := range mfs {
		if mf.GetName() != "floodgate_alarm_webhooks_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && m.GetCounter().GetValue() == 0 {
					got[l.GetValue()] = true
				}
			}
		}
	}
	for _, r := range []string{"delivered", "failed", "dropped", "abandoned"} {
		if !got[r] {
			t.Errorf("no series for result %q at the start (have %v)", r, got)
		}
	}
}
