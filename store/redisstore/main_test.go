package redisstore

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/floodgate/floodgate/internal/leaktest"
	"github.com/floodgate/floodgate/internal/redistest"
)

// One standalone server and one Cluster serve every test of the package;
// each test uses its own key prefix.
var (
	standaloneOnce sync.Once
	standalone     *redistest.Server
	standaloneErr  error
	prefixSeq      atomic.Int64
)

func sharedServer(t testing.TB) *redistest.Server {
	t.Helper()
	standaloneOnce.Do(func() { standalone, standaloneErr = redistest.StartServer(redistest.Config{}) })
	if standaloneErr != nil {
		t.Fatal(standaloneErr)
	}
	return standalone
}

func sharedCluster(t testing.TB) *redistest.Cluster {
	t.Helper()
	c, err := redistest.Shared()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// uniquePrefix keeps the keys of one test apart from the others'.
func uniquePrefix(t testing.TB) string {
	return fmt.Sprintf("t%d:", prefixSeq.Add(1))
}

// newStandalone returns a store on the shared standalone server.
func newStandalone(t testing.TB) *Store {
	t.Helper()
	srv := sharedServer(t)
	s, err := New(Options{URL: "redis://" + srv.Addr, Prefix: uniquePrefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// newCluster returns a store on the shared Cluster.
func newCluster(t testing.TB) *Store {
	t.Helper()
	return newClusterWith(t, Options{})
}

// newClusterWith is newCluster with options o (its URL and prefix set).
func newClusterWith(t testing.TB, o Options) *Store {
	t.Helper()
	c := sharedCluster(t)
	o.URL, o.Prefix = "redis+cluster://"+c.Addrs()[0]+","+c.Addrs()[1], uniquePrefix(t)
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	if s.Mode() != Cluster {
		t.Fatalf("mode = %s, want cluster", s.Mode())
	}
	t.Cleanup(s.Close)
	return s
}

// modes are the deployments the store is tested on, as storeOn takes them.
var modes = []string{"standalone", "cluster"}

// storeOn returns a store on the shared server of mode: newCluster's for
// "cluster", else newStandalone's.
func storeOn(t testing.TB, mode string) *Store {
	t.Helper()
	if mode == "cluster" {
		return newCluster(t)
	}
	return newStandalone(t)
}

func TestMain(m *testing.M) {
	if len(os.Args) > 0 && os.Getenv(helperEnv) != "" {
		os.Exit(helperMain())
	}
	code := m.Run()
	if standalone != nil {
		standalone.Stop()
	}
	redistest.StopShared()
	leaktest.Exit(code)
}
