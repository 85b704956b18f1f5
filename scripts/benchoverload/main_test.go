package main

import (
	"io"
	"testing"
	"time"
)

func TestOptionsAndCases(t *testing.T) {
	o, err := parseOptions([]string{"-floodgate", "fg", "-cases", "load,step,tenant", "-loads", "0.5,3"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.overload.limit != o.workers {
		t.Errorf("the fixed limit %d, want the workers %d", o.overload.limit, o.workers)
	}
	cases := o.buildCases(320)
	var names []string
	for _, c := range cases {
		names = append(names, c.name)
	}
	if len(cases) != 5 || names[0] != "0.5x" || names[1] != "3x" || names[2] != "step" || names[3] != "tenant-alone" || names[4] != "tenant-heavy" {
		t.Fatalf("cases %v", names)
	}
	if r := cases[1].offered(); r != 960 {
		t.Errorf("3x offers %v/s, want 960", r)
	}
	step := cases[2]
	if step.duration != 50*time.Second || step.workersAt(20*time.Second, 16) != 8 || step.workersAt(40*time.Second, 16) != 16 {
		t.Errorf("step: %v long, %d workers at 20 s, %d at 40 s", step.duration, step.workersAt(20*time.Second, 16), step.workersAt(40*time.Second, 16))
	}
	heavy := cases[4]
	if heavy.offered() != 3*80+20*80 || heavy.tenants[heavy.heavy] != "heavy" {
		t.Errorf("tenant-heavy offers %v/s, heavy tenant %q", heavy.offered(), heavy.tenants[heavy.heavy])
	}
	for _, bad := range [][]string{{}, {"-floodgate", "fg", "-configs", "wild"}, {"-floodgate", "fg", "-mix", "1,2"}, {"-floodgate", "fg", "-step", "1s,2s"}} {
		if _, err := parseOptions(bad, io.Discard); err == nil {
			t.Errorf("parseOptions(%q) accepted", bad)
		}
	}
}
