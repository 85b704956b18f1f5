package simulate

import (
	"fmt"
	"io"
	"strings"
	"testing"
)

func TestParseArrivals(t *testing.T) {
	t.Parallel()
	got, err := expandArrivals(" 0s*2 , 0.5:3, 1.25s*2:4,2@2 ")
	if err != nil {
		t.Fatal(err)
	}
	want := []arrival{{0, 1, 0}, {0, 1, 0}, {500_000_000, 3, 0}, {1_250_000_000, 4, 0}, {1_250_000_000, 4, 0}, {2_000_000_000, 1, 2}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %v, want %v", got, want)
	}
	for _, s := range []string{"0.1", "100ms", "1m", "0.000000001", "1h30m"} {
		if _, err := parseArrivals(s); err != nil {
			t.Errorf("%q: %v", s, err)
		}
	}
	for _, s := range []string{"", ",", "0,,1", "x", "0.0000000001", "1*0", "1:-2", "2,1", "1e3", "1*99999999999", "1@0", "1@x", "1:2@"} {
		if _, err := parseArrivals(s); err == nil {
			t.Errorf("%q: no error", s)
		}
	}
	if got := formatSeconds(1_000_000_001); got != "1.000000001" {
		t.Errorf("formatSeconds = %q", got)
	}
	if got := formatSeconds(2_500_000_000); got != "2.5" {
		t.Errorf("formatSeconds = %q", got)
	}
}

// expandArrivals is parseArrivals with each burst written out.
func expandArrivals(spec string) ([]arrival, error) {
	bursts, err := parseArrivals(spec)
	if err != nil {
		return nil, err
	}
	var out []arrival
	for _, b := range bursts {
		for range b.count {
			out = append(out, b.arrival)
		}
	}
	return out, nil
}

// readArrivals is scanArrivals collecting the arrivals.
func readArrivals(r io.Reader) ([]arrival, error) {
	var out []arrival
	err := scanArrivals(r, func(a arrival) error {
		out = append(out, a)
		return nil
	})
	return out, err
}

func FuzzParseArrivals(f *testing.F) {
	for _, s := range []string{"0s*12,0.5s*5", "0:8,2:7,2:6", "0.9s*10,1.1s*10", "1h*2:3", "", "x*", "1.5:", "9999999999*1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		arr, err := expandArrivals(spec)
		if err != nil {
			return
		}
		if len(arr) == 0 || len(arr) > maxArrivals {
			t.Fatalf("%q: %d arrivals", spec, len(arr))
		}
		for i, a := range arr {
			if a.at < 0 || a.cost < 1 || (i > 0 && a.at < arr[i-1].at) {
				t.Fatalf("%q: bad arrival %d: %+v", spec, i, a)
			}
		}
	})
}

func FuzzReadArrivals(f *testing.F) {
	for _, s := range []string{"0\n0.5 2\n", "# c\n\n1 1\n1\t3\n", "2\n1\n", "1 -1\n", "x\n", "1.0000000001\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		arr, err := readArrivals(strings.NewReader(text))
		if err != nil {
			return
		}
		for i, a := range arr {
			if a.at < 0 || a.cost < 1 || (i > 0 && a.at < arr[i-1].at) {
				t.Fatalf("%q: bad arrival %d: %+v", text, i, a)
			}
			// Every accepted time prints back to a value that parses the same.
			if back, err := parseSeconds([]byte(formatSeconds(a.at))); err != nil || back != a.at {
				t.Fatalf("%q: %d → %q → %d, %v", text, a.at, formatSeconds(a.at), back, err)
			}
		}
	})
}
