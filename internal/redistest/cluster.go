package redistest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Cluster is a Redis Cluster of three primaries, with or without
// replicas.
type Cluster struct {
	// Nodes are the nodes: the three primaries, or with replicas every
	// node (see Primaries and ReplicaOf for their roles).
	Nodes []*Server
	dir   string
}

// ClusterConfig tunes a cluster.
type ClusterConfig struct {
	// Dir holds the nodes' files; a fresh temporary directory when empty.
	Dir string
	// Replicas is the number of replicas of each primary (0: none).
	Replicas int
	// Args are extra redis-server arguments for every node
	// ("--cluster-require-full-coverage", "no").
	Args []string
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

// StartClusterWith starts a cluster as cfg says and registers its stop
// with t.Cleanup.
func StartClusterWith(t TB, cfg ClusterConfig) *Cluster {
	t.Helper()
	c, err := NewClusterWith(cfg)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(c.Stop)
	return c
}

// NewCluster starts a three-primary Redis Cluster with its files under dir
// (a fresh temporary directory when empty). The caller stops it.
func NewCluster(dir string) (*Cluster, error) {
	return NewClusterWith(ClusterConfig{Dir: dir})
}

// NewClusterWith starts a three-primary Redis Cluster as cfg says, and
// returns once every replica is in sync with its primary. Its nodes fail a
// silent primary over to its replica after 2 s (cluster-node-timeout).
// The caller stops it.
func NewClusterWith(cfg ClusterConfig) (*Cluster, error) {
	dir := cfg.Dir
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
	for i := 0; i < 3*(1+max(cfg.Replicas, 0)); i++ {
		nd := filepath.Join(dir, fmt.Sprintf("node%d", i))
		if err = os.MkdirAll(nd, 0o755); err != nil {
			c.Stop()
			return nil, fmt.Errorf("redistest: %w", err)
		}
		var s *Server
		s, err = StartServer(Config{Dir: nd, Args: append([]string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(nd, "nodes.conf"),
			"--cluster-node-timeout", "2000",
		}, cfg.Args...)})
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.Nodes = append(c.Nodes, s)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(max(cfg.Replicas, 0)), "--cluster-yes")
	out, err := exec.Command(cli, args...).CombinedOutput()
	if err != nil {
		c.Stop()
		return nil, fmt.Errorf("redistest: redis-cli --cluster create: %w: %s", err, out)
	}
	deadline := time.Now().Add(20 * time.Second)
	if err = c.waitOK(deadline); err != nil {
		c.Stop()
		return nil, err
	}
	// A replica that has not synced with its primary does not take over
	// from it.
	for _, n := range c.Nodes {
		for {
			info, ierr := n.Do("INFO", "replication")
			if ierr == nil && (strings.Contains(info, "role:master") || strings.Contains(info, "master_link_status:up")) {
				break
			}
			if time.Now().After(deadline) {
				c.Stop()
				err = fmt.Errorf("redistest: cluster replica %s not in sync after 20s: %v %s", n.Addr, ierr, info)
				return nil, err
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return c, nil
}

// Role returns a node's role as ROLE names it: "master" or "slave".
func Role(n *Server) (string, error) {
	out, err := n.Do("ROLE")
	if err != nil {
		return "", err
	}
	role, _, _ := strings.Cut(out, "\n")
	return role, nil
}

// Primaries returns the nodes that are primaries now.
func (c *Cluster) Primaries() ([]*Server, error) {
	var out []*Server
	for _, n := range c.Nodes {
		role, err := Role(n)
		if err != nil {
			return nil, fmt.Errorf("redistest: role of %s: %w", n.Addr, err)
		}
		if role == "master" {
			out = append(out, n)
		}
	}
	return out, nil
}

// ReplicaOf returns a node that replicates primary, or nil when none does.
func (c *Cluster) ReplicaOf(primary *Server) (*Server, error) {
	_, port, _ := strings.Cut(primary.Addr, ":")
	for _, n := range c.Nodes {
		if n == primary {
			continue
		}
		out, err := n.Do("ROLE")
		if err != nil {
			continue // a stopped node, say
		}
		// slave, master ip, master port, state, offset
		f := strings.Split(out, "\n")
		if len(f) >= 3 && f[0] == "slave" && f[2] == port {
			return n, nil
		}
	}
	return nil, nil
}

// PrimaryOf returns the primary that serves a hash slot, as a node that
// answers CLUSTER NODES sees it. A primary another test stopped a moment
// ago may still be flagged failed in every view: PrimaryOf waits up to
// primaryWait for one that is not, and fails only then.
func (c *Cluster) PrimaryOf(slot int) (*Server, error) {
	deadline := time.Now().Add(primaryWait)
	for {
		s, err := c.primaryOf(slot)
		if err == nil || time.Now().After(deadline) {
			return s, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// primaryWait bounds PrimaryOf's wait for a slot's primary.
const primaryWait = 10 * time.Second

// primaryOf is one look of PrimaryOf: the first view that names a primary
// not flagged failed for slot.
func (c *Cluster) primaryOf(slot int) (*Server, error) {
	answered := false
	for _, n := range c.Nodes {
		out, err := n.Do("CLUSTER", "NODES")
		if err != nil {
			continue
		}
		answered = true
		// id host:port@cport flags primary ping pong epoch link slots...
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if len(f) < 9 || !strings.Contains(f[2], "master") || strings.Contains(f[2], "fail") {
				continue
			}
			addr, _, _ := strings.Cut(f[1], "@")
			for _, rg := range f[8:] {
				lo, hi, ok := strings.Cut(rg, "-")
				if !ok {
					hi = lo
				}
				a, err1 := strconv.Atoi(lo)
				b, err2 := strconv.Atoi(hi)
				if err1 == nil && err2 == nil && a <= slot && slot <= b {
					if s := c.ServerAt(addr); s != nil {
						return s, nil
					}
				}
			}
		}
	}
	if answered {
		return nil, fmt.Errorf("redistest: no primary serves slot %d", slot)
	}
	return nil, errors.New("redistest: no node answers CLUSTER NODES")
}

// ServerAt returns the node listening on addr, or nil.
func (c *Cluster) ServerAt(addr string) *Server {
	for _, n := range c.Nodes {
		if n.Addr == addr {
			return n
		}
	}
	return nil
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
//
// A test before may have stopped or paused a node of it, and the cluster
// can say CLUSTERDOWN for a while after the node is back (until every node
// has seen it alive again): Shared waits up to sharedWait for every node to
// say its state is ok, and returns the cluster as it is after that.
func Shared() (*Cluster, error) {
	sharedOnce.Do(func() { shared, sharedErr = NewCluster("") })
	if sharedErr == nil {
		_ = shared.waitOK(time.Now().Add(sharedWait))
	}
	return shared, sharedErr
}

// sharedWait bounds Shared's wait for a cluster whose state is ok.
const sharedWait = 15 * time.Second

// waitOK waits until every node of c answers CLUSTER INFO with
// cluster_state:ok, or until deadline.
func (c *Cluster) waitOK(deadline time.Time) error {
	for _, n := range c.Nodes {
		for {
			info, err := n.Do("CLUSTER", "INFO")
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("redistest: cluster node %s not ok: %v %s", n.Addr, err, info)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
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
