package policy_test

import (
	"testing"
	"time"

	"github.com/floodgate/floodgate/policy"
)

// TestLesson12PerParent replays the lesson's burst through the example's
// per-parent limit (5/s, burst 10): 12 requests at 0 s and 5 at 0.5 s,
// 12 of 17 allowed.
func TestLesson12PerParent(t *testing.T) {
	t.Parallel()
	r := newRig(t, example(t), t0)
	req := &policy.Request{Method: "GET", Path: "/notices/42", ClientIP: ip("198.51.100.7"), User: "parent-42"}
	allowed := 0
	for range 12 {
		if r.do(req).status == 200 {
			allowed++
		}
	}
	r.clk.add(500 * time.Millisecond)
	var last answer
	for range 5 {
		if last = r.do(req); last.status == 200 {
			allowed++
		}
	}
	if allowed != 12 {
		t.Errorf("%d of 17 allowed, want 12", allowed)
	}
	if last.binding != "per-parent" {
		t.Errorf("binding %q, want per-parent", last.binding)
	}
	// Another parent is not affected.
	other := &policy.Request{Method: "GET", Path: "/notices/42", ClientIP: ip("198.51.100.7"), User: "parent-7"}
	if a := r.do(other); a.status != 200 {
		t.Errorf("another parent: %+v", a)
	}
}

// TestLesson12Login drives the example's login limit (count_on 401, 403)
// through the gateway: only the attempts the upstream answers 401 or 403
// count.
func TestLesson12Login(t *testing.T) {
	t.Parallel()
	p := example(t)
	r := newRig(t, p, t0)
	req := &policy.Request{Method: "POST", Path: "/login", ClientIP: ip("203.0.113.66")}
	var m policy.Match
	p.Match(req, &m)
	deferred := 0
	for _, l := range m.Limits {
		if l.Deferred() {
			if l.Name != "login" {
				t.Errorf("limit %s is deferred", l.Name)
			}
			deferred++
		}
	}
	if deferred != 1 {
		t.Fatalf("%d deferred limits, want login only", deferred)
	}
	attempt := func(status int) bool {
		a := r.doStatus(req, status)
		return a.status == status
	}
	for i := range 10 {
		if !attempt(200) {
			t.Fatalf("successful login %d refused", i)
		}
	}
	for i := range 5 {
		if !attempt(401) {
			t.Fatalf("failed login %d refused", i)
		}
	}
	if attempt(401) {
		t.Error("sixth failed login within a minute allowed")
	}
	r.clk.add(time.Minute)
	if !attempt(403) {
		t.Error("a minute later the address is still locked out")
	}
}

// TestLesson12UrgentNotices checks a few urgent notices per teacher per day.
func TestLesson12UrgentNotices(t *testing.T) {
	t.Parallel()
	p := example(t)
	r := newRig(t, p, t0)
	teacher := &policy.Request{Method: "POST", Path: "/notices/urgent", ClientIP: ip("198.51.100.7"), User: "teacher-7"}
	if got := r.statuses(4, teacher); got != "200 200 200 429" {
		t.Errorf("urgent notices: %s", got)
	}
	if a := r.do(teacher); a.binding != "urgent-notices" || a.message != "Limit Exceeded" {
		t.Errorf("denial %+v", a)
	}
	// Without a user, the per-user limits do not apply (the route's other
	// limits still do).
	var m policy.Match
	p.Match(&policy.Request{Method: "POST", Path: "/notices/urgent", ClientIP: ip("198.51.100.7")}, &m)
	for _, l := range m.Limits {
		if l.Name == "urgent-notices" || l.Name == "per-parent" {
			t.Errorf("anonymous request counted by %s", l.Name)
		}
	}
}
