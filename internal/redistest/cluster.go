package redistest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Cluster is a Redis Cluster of three primaries without replicas.
type Cluster struct {
	// Nodes are the three primaries.
	Nodes []*Server
	dir   string
}

// Addrs returns the host:port of every node.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Addr
	}
	return out
}

// StartCluster starts a three-primary Redis Cluster and registers its stop
// with t.Cleanup. Starting one takes a second or two; share it between the
// tests of a package with Shared.
func StartCluster(t TB) *Cluster {
	t.Helper()
	c, err := NewCluster("")
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(c.Stop)
	return c
}

// NewCluster starts a three-primary Redis Cluster with its files under dir
// (a fresh temporary directory when empty). The caller stops it.
func NewCluster(dir string) (*Cluster, error) {
	cli, err := Binary("redis-cli")
	if err != nil {
		return nil, err
	}
	own := dir == ""
	if own {
		if dir, err = os.MkdirTemp("", "redistest-cluster-"); err != nil {
			return nil, fmt.Errorf("redistest: %w", err)
		}
	}
	c := &Cluster{dir: dir}
	if own {
		defer func() {
			if err != nil {
				os.RemoveAll(dir)
			}
		}()
	}
	for i := 0; i < 3; i++ {
		nd := filepath.Join(dir, fmt.Sprintf("node%d", i))
		if err = os.MkdirAll(nd, 0o755); err != nil {
			c.Stop()
			return nil, fmt.Errorf("redistest: %w", err)
		}
		var s *Server
		s, err = StartServer(Config{Dir: nd, Args: []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(nd, "nodes.conf"),
			"--cluster-node-timeout", "2000",
		}})
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.Nodes = append(c.Nodes, s)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.Command(cli, args...).CombinedOutput()
	if err != nil {
		c.Stop()
		return nil, fmt.Errorf("redistest: redis-cli --cluster create: %w: %s", err, out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, n := range c.Nodes {
		for {
			info, ierr := n.Do("CLUSTER", "INFO")
			if ierr == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				c.Stop()
				err = fmt.Errorf("redistest: cluster node %s not ok after 20s: %v %s", n.Addr, ierr, info)
				return nil, err
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return c, nil
}

// Stop stops every node and removes the cluster's files if it made them.
func (c *Cluster) Stop() {
	var wg sync.WaitGroup
	for _, n := range c.Nodes {
		wg.Add(1)
		go func() { defer wg.Done(); n.Stop() }()
	}
	wg.Wait()
	if strings.Contains(filepath.Base(c.dir), "redistest-cluster-") {
		os.RemoveAll(c.dir)
	}
}

// FlushAll empties every node.
func (c *Cluster) FlushAll() error {
	for _, n := range c.Nodes {
		if _, err := n.Do("FLUSHALL"); err != nil {
			return fmt.Errorf("redistest: flushall %s: %w", n.Addr, err)
		}
	}
	return nil
}

// Shared starts one cluster per test binary on first use and returns it to
// every later caller. Call StopShared from TestMain after m.Run so that no
// process outlives the tests.
func Shared() (*Cluster, error) {
	sharedOnce.Do(func() { shared, sharedErr = NewCluster("") })
	return shared, sharedErr
}

// StopShared stops the cluster that Shared started, if any.
func StopShared() {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared != nil {
		shared.Stop()
	}
}

var (
	sharedOnce sync.Once
	sharedMu   sync.Mutex
	shared     *Cluster
	sharedErr  error
)
