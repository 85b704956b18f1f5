package redistest

import (
	"strings"
	"syscall"
	"testing"

	"github.com/floodgate/floodgate/internal/leaktest"
)

func alive(pid int) bool {
	return pid > 0 && syscall.Kill(pid, 0) == nil
}

// TestServerLifecycle is not parallel: it restarts the server on the port
// it killed, which another test's server must not take meanwhile.
func TestServerLifecycle(t *testing.T) {
	s := Start(t)
	pid := s.PID()
	if !alive(pid) {
		t.Fatalf("server pid %d not running", pid)
	}
	if _, err := s.Do("SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Do("GET", "k"); err != nil || v != "v" {
		t.Fatalf("GET k = %q, %v", v, err)
	}
	s.Kill()
	if _, err := s.Do("PING"); err == nil {
		t.Fatal("PING answered after Kill")
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Do("GET", "k"); err != nil || v != "" {
		t.Fatalf("after restart GET k = %q, %v; want empty (no persistence)", v, err)
	}
	s.Stop()
	if alive(s.PID()) {
		t.Fatalf("server still running after Stop")
	}
}

func TestCluster(t *testing.T) {
	t.Parallel()
	c, err := Shared()
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Nodes) != 3 {
		t.Fatalf("nodes = %d", len(c.Nodes))
	}
	for _, n := range c.Nodes {
		info, err := n.Do("CLUSTER", "INFO")
		if err != nil || !strings.Contains(info, "cluster_state:ok") {
			t.Fatalf("node %s: %v %q", n.Addr, err, info)
		}
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	StopShared()
	leaktest.Exit(code)
}

func TestSentinel(t *testing.T) {
	t.Parallel()
	primary := Start(t)
	s := StartSentinel(t, primary, "mymaster")
	addr, err := s.Do("SENTINEL", "GET-MASTER-ADDR-BY-NAME", "mymaster")
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Replace(primary.Addr, ":", "\n", 1); addr != want {
		t.Fatalf("sentinel says %q, want %q", addr, want)
	}
}

func TestClusterWithReplicas(t *testing.T) {
	t.Parallel()
	c := StartClusterWith(t, ClusterConfig{Replicas: 1})
	if len(c.Nodes) != 6 {
		t.Fatalf("nodes = %d, want 6", len(c.Nodes))
	}
	ps, err := c.Primaries()
	if err != nil || len(ps) != 3 {
		t.Fatalf("primaries = %d, %v; want 3", len(ps), err)
	}
	for _, p := range ps {
		r, err := c.ReplicaOf(p)
		if err != nil || r == nil || r == p {
			t.Fatalf("replica of %s: %v, %v", p.Addr, r, err)
		}
		if role, err := Role(r); err != nil || role != "slave" {
			t.Fatalf("replica %s has role %q, %v", r.Addr, role, err)
		}
	}
}
