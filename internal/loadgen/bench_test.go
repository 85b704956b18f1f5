package loadgen

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/cli"
)

func TestBenchHistogram(t *testing.T) {
	t.Parallel()
	var h histogram
	for i := 1; i <= 1000; i++ {
		h.add(time.Duration(i) * time.Microsecond)
	}
	for _, c := range []struct {
		q    float64
		want float64
	}{{0.5, 500e3}, {0.99, 990e3}} {
		got := h.quantile(c.q)
		if got < c.want*0.95 || got > c.want*1.05 {
			t.Fatalf("quantile %v = %v ns, want %v within 5%%", c.q, got, c.want)
		}
	}
	var empty histogram
	if empty.quantile(0.5) != 0 {
		t.Fatal("empty histogram has a median")
	}
}

// TestBenchRefusesFlagsThatDoNotApply: a limit flag of another algorithm,
// or a Redis flag on the memory store, is an error rather than ignored.
func TestBenchRefusesFlagsThatDoNotApply(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--algorithm", "token_bucket", "--window", "1m"}, "--window does not apply to token_bucket"},
		{[]string{"--algorithm", "fixed_window", "--burst", "5"}, "--burst does not apply to fixed_window"},
		{[]string{"--algorithm", "quota", "--rate", "5"}, "--rate does not apply to quota"},
		{[]string{"--batch", "4"}, "--batch applies to a Redis store only"},
		{[]string{"--duration", "1ns"}, "--duration must be at least 10ms"},
		{[]string{"--keys", "100000000"}, "--keys must be between 1 and 10000000"},
	} {
		_, err := parseBenchFlags(c.args, io.Discard)
		var ue *cli.UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("bench %v: %v, want a usage error saying %q", c.args, err, c.want)
		}
	}
	if _, err := parseBenchFlags([]string{"--algorithm", "fixed_window", "--window", "1m", "--limit", "5"}, io.Discard); err != nil {
		t.Errorf("flags that apply: %v", err)
	}
}
