// Package ruletest turns limits into rules for tests: one place that
// compiles a floodgate.Limit into a *limiter.Rule and fails the test when
// the limit is not valid.
//
// The tests of package algo compile limits themselves (their own
// mustCompile): they are inside package algo, which limiter imports, and Go
// allows no import of a package that imports the package under test into
// its internal tests.
package ruletest

import (
	"testing"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/limiter"
)

// Rule compiles l into an enforced rule that fails open, or fails the
// test. A limit without a name is named after its algorithm.
func Rule(t testing.TB, l floodgate.Limit) *limiter.Rule {
	t.Helper()
	return With(t, l, limiter.RuleOptions{OnFailure: floodgate.FailOpen})
}

// Shadow is Rule for a shadow rule: evaluated and counted, never blocking.
func Shadow(t testing.TB, l floodgate.Limit) *limiter.Rule {
	t.Helper()
	return With(t, l, limiter.RuleOptions{OnFailure: floodgate.FailOpen, Shadow: true})
}

// With compiles l with the settings o, or fails the test. A limit without
// a name is named after its algorithm.
func With(t testing.TB, l floodgate.Limit, o limiter.RuleOptions) *limiter.Rule {
	t.Helper()
	if l.Name == "" {
		l.Name = l.Algorithm.String()
	}
	r, err := limiter.NewRuleWith(l, o)
	if err != nil {
		t.Fatalf("rule %+v: %v", l, err)
	}
	return r
}
