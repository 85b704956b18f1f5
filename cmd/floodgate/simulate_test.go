package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// simJSON is the --json output.
type simJSON struct {
	Allowed   int `json:"allowed"`
	Denied    int `json:"denied"`
	Decisions []struct {
		At         float64  `json:"at"`
		Cost       int64    `json:"cost"`
		Allowed    bool     `json:"allowed"`
		Remaining  int64    `json:"remaining"`
		RetryAfter float64  `json:"retry_after"`
		ResetAfter float64  `json:"reset_after"`
		Delay      *float64 `json:"delay"`
		NeverFits  bool     `json:"never_fits"`
	} `json:"decisions"`
}

// simulateJSON runs floodgate simulate --json with args and decodes it.
func simulateJSON(t *testing.T, args ...string) simJSON {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(context.Background(), append(append([]string{"simulate"}, args...), "--json"), &out, &errb)
	if err != nil {
		t.Fatalf("simulate %v: %v (stderr %q)", args, err, errb.String())
	}
	var res simJSON
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("simulate %v: bad JSON: %v\n%s", args, err, out.String())
	}
	if res.Allowed+res.Denied != len(res.Decisions) {
		t.Fatalf("simulate %v: allowed %d + denied %d != %d decisions", args, res.Allowed, res.Denied, len(res.Decisions))
	}
	return res
}

func simulateTable(t *testing.T, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if err := run(context.Background(), append([]string{"simulate"}, args...), &out, &errb); err != nil {
		t.Fatalf("simulate %v: %v", args, err)
	}
	return out.String()
}

func TestSimulateSeedLesson12(t *testing.T) {
	t.Parallel()
	burst := "0s*12,0.5s*5"
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"--algorithm", "token_bucket", "--rate", "5", "--burst", "10", "--arrivals", burst}, 12},
		{[]string{"--algorithm", "sliding_log", "--limit", "10", "--window", "1s", "--arrivals", burst}, 10},
		{[]string{"--algorithm", "token_bucket", "--rate", "5", "--burst", "20", "--arrivals", burst}, 17},
		{[]string{"--algorithm", "token_bucket", "--rate", "10", "--burst", "10", "--arrivals", burst}, 15},
		{[]string{"--algorithm", "token_bucket", "--rate", "1", "--burst", "5", "--arrivals", burst}, 5},
		{[]string{"--algorithm", "gcra", "--rate", "5", "--burst", "10", "--arrivals", burst}, 12},
	} {
		res := simulateJSON(t, c.args...)
		if res.Allowed != c.want || len(res.Decisions) != 17 {
			t.Errorf("%v: allowed %d of %d, want %d of 17", c.args, res.Allowed, len(res.Decisions), c.want)
		}
		if table := simulateTable(t, c.args...); !strings.Contains(table, fmt.Sprintf("allowed %d of 17\n", c.want)) {
			t.Errorf("%v: table without 'allowed %d of 17':\n%s", c.args, c.want, table)
		}
	}
}

func TestSimulateSeedSteadyAndEdge(t *testing.T) {
	t.Parallel()
	var steady []string
	for i := range 30 {
		steady = append(steady, fmt.Sprintf("%dms", 100*i))
	}
	arr := strings.Join(steady, ",")
	if res := simulateJSON(t, "--algorithm", "token_bucket", "--rate", "5", "--burst", "10", "--arrivals", arr); res.Allowed != 24 {
		t.Errorf("steady, bucket: %d of 30, want 24", res.Allowed)
	}
	if res := simulateJSON(t, "--algorithm", "sliding_log", "--limit", "10", "--window", "1s", "--arrivals", arr); res.Allowed != 30 {
		t.Errorf("steady, window: %d of 30, want 30", res.Allowed)
	}
	edge := "0.9s*10,1.1s*10"
	if res := simulateJSON(t, "--algorithm", "fixed_window", "--limit", "10", "--window", "1s", "--arrivals", edge); res.Allowed != 20 {
		t.Errorf("edge, fixed window: %d, want 20", res.Allowed)
	}
	if res := simulateJSON(t, "--algorithm", "sliding_log", "--limit", "10", "--window", "1s", "--arrivals", edge); res.Allowed != 10 {
		t.Errorf("edge, sliding window: %d, want 10", res.Allowed)
	}
}

func TestSimulateSeedLesson07(t *testing.T) {
	t.Parallel()
	res := simulateJSON(t, "--algorithm", "token_bucket", "--rate", "5", "--burst", "5", "--arrivals", "0*6,0.2*2,10")
	want := []bool{true, true, true, true, true, false, true, false, true}
	for i, d := range res.Decisions {
		if d.Allowed != want[i] {
			t.Errorf("decision %d at %v: allowed %v, want %v", i, d.At, d.Allowed, want[i])
		}
	}
	if last := res.Decisions[len(res.Decisions)-1]; last.At != 10 || last.Remaining != 4 {
		t.Errorf("t=10: %+v, want 4 tokens left", last)
	}
	// The trial usage plan: a quota of 3 a day, then 429 Limit Exceeded.
	q := simulateJSON(t, "--algorithm", "quota", "--limit", "3", "--period", "day", "--time-zone", "Europe/Berlin",
		"--start", "2026-03-29T10:00:00+02:00", "--arrivals", "0,1,2,3,4")
	if q.Allowed != 3 || q.Denied != 2 || q.Decisions[3].RetryAfter != 14*3600-3 {
		t.Errorf("quota: %+v, want 3 allowed and a retry at local midnight", q)
	}
}

func TestSimulateSeed002(t *testing.T) {
	t.Parallel()
	res := simulateJSON(t, "--algorithm", "token_bucket", "--rate", "2", "--burst", "10", "--arrivals", "0:8,2:7,2:6")
	want := []struct {
		allowed   bool
		remaining int64
	}{{true, 2}, {false, 6}, {true, 0}}
	for i, d := range res.Decisions {
		if d.Allowed != want[i].allowed || d.Remaining != want[i].remaining {
			t.Errorf("step %d: %+v, want %+v", i, d, want[i])
		}
	}
	fw := simulateJSON(t, "--algorithm", "fixed_window", "--limit", "100", "--window", "1m", "--arrivals", "59s*100,60s*100")
	if fw.Allowed != 200 {
		t.Errorf("fixed window: %d of 200, want 200", fw.Allowed)
	}
	sw := simulateJSON(t, "--algorithm", "sliding_log", "--limit", "100", "--window", "1m", "--arrivals", "59s*100,60s*100")
	if sw.Allowed != 100 {
		t.Errorf("sliding log: %d of 200, want 100", sw.Allowed)
	}
}

// TestSimulateSeed002Instances replays seed 002's distributed arithmetic:
// a global limit enforced as split_limit(global, n) on each of n instances
// wrongly denies requests that one shared count would have allowed.
func TestSimulateSeed002Instances(t *testing.T) {
	t.Parallel()
	type instJSON struct {
		Allowed       int   `json:"allowed"`
		SplitLimit    int64 `json:"split_limit"`
		GlobalAllowed int   `json:"global_allowed"`
		WronglyDenied int64 `json:"wrongly_denied"`
		Decisions     []struct {
			Instance int `json:"instance"`
		} `json:"decisions"`
	}
	for _, c := range []struct {
		arrivals                        string
		instances                       string
		allowed, split, global, wrongly int
	}{
		// 90 requests within a global 100, skewed 60/20/10 over 3 instances
		// of 33 each: the busy one denies 27 that the global count allows.
		{"0*60@1,0*20@2,0*10@3", "3", 63, 33, 90, 27},
		// Spread evenly (round robin), nothing is wrongly denied.
		{"0*90", "3", 90, 33, 90, 0},
		// Over the global limit, wrongly_denied is 0 by definition.
		{"0*150@1,1*50@2", "2", 100, 50, 100, 0},
	} {
		var out, errb bytes.Buffer
		args := []string{"simulate", "--algorithm", "fixed_window", "--limit", "100", "--window", "1m",
			"--instances", c.instances, "--arrivals", c.arrivals, "--json"}
		if err := run(context.Background(), args, &out, &errb); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		var res instJSON
		if err := json.Unmarshal(out.Bytes(), &res); err != nil {
			t.Fatalf("bad JSON: %v\n%s", err, out.String())
		}
		if res.Allowed != c.allowed || res.SplitLimit != int64(c.split) || res.GlobalAllowed != c.global || res.WronglyDenied != int64(c.wrongly) {
			t.Errorf("%s on %s instances: allowed %d split %d global %d wrongly %d, want %d %d %d %d", c.arrivals, c.instances,
				res.Allowed, res.SplitLimit, res.GlobalAllowed, res.WronglyDenied, c.allowed, c.split, c.global, c.wrongly)
		}
		if res.Decisions[0].Instance != 1 {
			t.Errorf("first decision on instance %d, want 1", res.Decisions[0].Instance)
		}
	}
	table := simulateTable(t, "--algorithm", "fixed_window", "--limit", "100", "--window", "1m", "--instances", "3", "--arrivals", "0*60@1,0*20@2,0*10@3")
	if !strings.Contains(table, "3 instances at split_limit(100, 3) = 33 each; one shared limit allows 90 of 90; wrongly_denied = 27") {
		t.Errorf("table summary missing:\n%s", table)
	}
}

func TestSimulateLeakyQueue(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		extra                    []string
		passNow, delayed, reject int
	}{
		{[]string{"--burst", "5"}, 1, 5, 2},
		{[]string{"--burst", "5", "--nodelay"}, 6, 0, 2},
		{[]string{"--burst", "12", "--delay", "8"}, 9, 4, 0},
	} {
		args := append([]string{"--algorithm", "leaky_queue", "--rate", "1"}, c.extra...)
		args = append(args, "--arrivals", fmt.Sprintf("0*%d", c.passNow+c.delayed+c.reject))
		res := simulateJSON(t, args...)
		now, delayed := 0, 0
		for i, d := range res.Decisions {
			if d.Delay == nil {
				t.Fatalf("%v: no delay field", c.extra)
			}
			switch {
			case d.Allowed && *d.Delay == 0:
				now++
			case d.Allowed:
				delayed++
				if want := float64(i); *d.Delay != want && len(c.extra) == 2 {
					t.Errorf("%v request %d: delay %v, want %v", c.extra, i+1, *d.Delay, want)
				}
			}
		}
		if now != c.passNow || delayed != c.delayed || res.Denied != c.reject {
			t.Errorf("%v: %d now, %d delayed, %d rejected; want %d, %d, %d",
				c.extra, now, delayed, res.Denied, c.passNow, c.delayed, c.reject)
		}
	}
	table := simulateTable(t, "--algorithm", "leaky_queue", "--rate", "1", "--burst", "5", "--arrivals", "0*7")
	if !strings.Contains(table, "delay") || !strings.Contains(table, "allowed 6 of 7 (5 delayed)") {
		t.Errorf("table:\n%s", table)
	}
}

func TestSimulateConcurrencyHold(t *testing.T) {
	t.Parallel()
	// 2 in flight, each held 1 s; arrivals every 0.4 s: the third (0.8 s)
	// finds both slots taken, the fourth (1.2 s) gets the first's slot back.
	res := simulateJSON(t, "--algorithm", "concurrency", "--limit", "2", "--hold", "1s", "--arrivals", "0,0.4,0.8,1.2,1.6,2.0")
	want := []bool{true, true, false, true, true, false}
	for i, d := range res.Decisions {
		if d.Allowed != want[i] {
			t.Errorf("arrival %d at %v: %v, want %v", i+1, d.At, d.Allowed, want[i])
		}
	}
	// Released exactly at the arrival instant: the slot is free again.
	res = simulateJSON(t, "--algorithm", "concurrency", "--limit", "1", "--hold", "1s", "--arrivals", "0,1,2")
	if res.Allowed != 3 {
		t.Errorf("hold equal to the gap: %d of 3", res.Allowed)
	}
	// Without --hold nothing is released before the lease expires.
	res = simulateJSON(t, "--algorithm", "concurrency", "--limit", "1", "--lease-ttl", "5s", "--arrivals", "0,1,4.9,5")
	if got := []bool{res.Decisions[0].Allowed, res.Decisions[1].Allowed, res.Decisions[2].Allowed, res.Decisions[3].Allowed}; fmt.Sprint(got) != "[true false false true]" {
		t.Errorf("no hold: %v", got)
	}
}

func TestSimulateNeverFits(t *testing.T) {
	t.Parallel()
	res := simulateJSON(t, "--algorithm", "token_bucket", "--rate", "1", "--burst", "3", "--arrivals", "0:4,0:3")
	if d := res.Decisions[0]; d.Allowed || !d.NeverFits || d.RetryAfter != 0 || d.Remaining != 3 {
		t.Errorf("cost 4 on burst 3: %+v", d)
	}
	if d := res.Decisions[1]; !d.Allowed || d.NeverFits {
		t.Errorf("cost 3: %+v", d)
	}
	table := simulateTable(t, "--algorithm", "token_bucket", "--rate", "1", "--burst", "3", "--arrivals", "0:4")
	if !strings.Contains(table, "never") {
		t.Errorf("table does not say never:\n%s", table)
	}
}

func TestSimulateArrivalsFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// 10 arrivals a second, costs 1, 2, 1, 2, …
	write := func(name string, n int) string {
		var b strings.Builder
		b.WriteString("# seconds cost\n\n")
		for i := range n {
			fmt.Fprintf(&b, "%d.%d %d\n", i/10, i%10, 1+i%2)
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	// 100,000 lines: 7 units a second against costs 1, 2, 1, 2, …: five
	// arrivals (7 units) pass each second and every later one is refused.
	const n = 100_000
	big := write("big.txt", n)
	out := simulateTable(t, "--algorithm", "fixed_window", "--limit", "7", "--window", "1s", "--arrivals-file", big)
	if !strings.HasSuffix(out, fmt.Sprintf("allowed %d of %d\n", 5*(n/10), n)) {
		t.Errorf("fixed window over the file: %q", out[strings.LastIndexByte(out[:len(out)-1], '\n')+1:])
	}
	// The token bucket at 15 units a second admits exactly its rate over a
	// long run: the burst plus 15 a second, less what the last arrivals
	// could not use.
	const m = 10_000
	res := simulateJSON(t, "--algorithm", "token_bucket", "--rate", "15", "--burst", "10", "--arrivals-file", write("small.txt", m))
	if len(res.Decisions) != m {
		t.Fatalf("%d decisions, want %d", len(res.Decisions), m)
	}
	units := int64(0)
	for _, d := range res.Decisions {
		if d.Allowed {
			units += d.Cost
		}
	}
	if most := int64(10 + 15*(m/10)); units > most || units < most-20 {
		t.Errorf("%d units admitted over %d s, want at most %d and close to it", units, m/10, most)
	}
}

func TestSimulateBadFlags(t *testing.T) {
	t.Parallel()
	trace := filepath.Join(t.TempDir(), "bad.txt")
	os.WriteFile(trace, []byte("1\n0.5\n"), 0o644)
	for _, args := range [][]string{
		{},
		{"--algorithm", "nope", "--arrivals", "0"},
		{"--algorithm", "token_bucket", "--rate", "5", "--arrivals", "0"},
		{"--algorithm", "token_bucket", "--rate", "x", "--burst", "1", "--arrivals", "0"},
		{"--algorithm", "token_bucket", "--rate", "1", "--burst", "1"},
		{"--algorithm", "token_bucket", "--rate", "1", "--burst", "1", "--arrivals", "0", "--arrivals-file", trace},
		{"--algorithm", "token_bucket", "--rate", "1", "--burst", "1", "--arrivals", "1,0"},
		{"--algorithm", "token_bucket", "--rate", "1", "--burst", "1", "--arrivals", "0:0"},
		{"--algorithm", "token_bucket", "--rate", "1", "--burst", "1", "--arrivals", "0*x"},
		{"--algorithm", "token_bucket", "--rate", "1", "--burst", "1", "--arrivals", "-1s"},
		{"--algorithm", "token_bucket", "--rate", "1", "--burst", "1", "--arrivals-file", trace},
		{"--algorithm", "token_bucket", "--rate", "1", "--burst", "1", "--arrivals-file", trace + ".missing"},
		{"--algorithm", "token_bucket", "--rate", "1", "--burst", "1", "--per", "soon", "--arrivals", "0"},
		{"--algorithm", "token_bucket", "--rate", "1", "--burst", "1", "--hold", "1s", "--arrivals", "0"},
		{"--algorithm", "leaky_queue", "--rate", "1", "--delay", "2", "--nodelay", "--arrivals", "0"},
		{"--algorithm", "fixed_window", "--limit", "1", "--arrivals", "0"},
		{"--algorithm", "quota", "--limit", "1", "--period", "day", "--arrivals", "0"},
		{"--algorithm", "quota", "--limit", "1", "--period", "year", "--start", "2026-01-01T00:00:00Z", "--arrivals", "0"},
		{"--algorithm", "quota", "--limit", "1", "--period", "day", "--time-zone", "Mars/Olympus", "--start", "2026-01-01T00:00:00Z", "--arrivals", "0"},
		{"--algorithm", "quota", "--limit", "1", "--period", "day", "--start", "yesterday", "--arrivals", "0"},
		{"--algorithm", "token_bucket", "--rate", "1", "--burst", "1", "--arrivals", "0", "extra"},
		{"--algorithm", "token_bucket", "--rate", "1", "--burst", "1", "--limit", "3", "--arrivals", "0"},
		{"--algorithm", "sliding_log", "--limit", "1", "--window", "1s", "--nodelay", "--arrivals", "0"},
		{"--algorithm", "fixed_window", "--limit", "1", "--window", "1s", "--period", "day", "--arrivals", "0"},
		{"--algorithm", "token_bucket", "--rate", "1", "--burst", "1", "--instances", "2", "--arrivals", "0"},
		{"--algorithm", "fixed_window", "--limit", "10", "--window", "1s", "--instances", "0", "--arrivals", "0"},
		{"--algorithm", "fixed_window", "--limit", "2", "--window", "1s", "--instances", "3", "--arrivals", "0"},
		{"--algorithm", "fixed_window", "--limit", "10", "--window", "1s", "--instances", "2", "--arrivals", "0@3"},
		{"--algorithm", "fixed_window", "--limit", "10", "--window", "1s", "--arrivals", "0@1"},
	} {
		var out, errb bytes.Buffer
		err := run(context.Background(), append([]string{"simulate"}, args...), &out, &errb)
		if err == nil {
			t.Errorf("%v: no error", args)
			continue
		}
		if code := exitCode(err); code != 2 {
			t.Errorf("%v: exit status %d, want 2 (%v)", args, code, err)
		}
		if msg := err.Error(); strings.Contains(msg, "\n") || !strings.HasPrefix(msg, "simulate: ") {
			t.Errorf("%v: message %q is not one line starting with 'simulate: '", args, msg)
		}
	}
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"simulate", "-h"}, &out, &errb); err != nil || !strings.Contains(out.String(), "--arrivals") {
		t.Errorf("-h: %v\n%s", err, out.String())
	}
}

func BenchmarkSimulateArrivalsFile(b *testing.B) {
	path := filepath.Join(b.TempDir(), "trace.txt")
	var sb strings.Builder
	for i := range 100_000 {
		fmt.Fprintf(&sb, "%d.%03d %d\n", i/100, i%100*10, 1+i%3)
	}
	os.WriteFile(path, []byte(sb.String()), 0o644)
	args := []string{"simulate", "--algorithm", "token_bucket", "--rate", "100", "--burst", "50", "--arrivals-file", path}
	b.ReportAllocs()
	for b.Loop() {
		var out, errb bytes.Buffer
		if err := run(context.Background(), args, &out, &errb); err != nil {
			b.Fatal(err)
		}
	}
}
