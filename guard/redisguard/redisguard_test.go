package redisguard_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/floodgate/floodgate/guard"
	"github.com/floodgate/floodgate/guard/redisguard"
	"github.com/floodgate/floodgate/internal/redistest"
)

// TestInstancesShareRedis: two Guards on the policy file that names a
// real redis-server share its counts, as two instances of a service do:
// a limit of 3 an hour admits 3 requests between them, not 3 each.
func TestInstancesShareRedis(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	file := filepath.Join(t.TempDir(), "policy.yaml")
	policy := fmt.Sprintf("version: 1\nserver: {store: \"redis://%s/0\"}\nlimits:\n  - {name: three, rate: 3, per: 1h, key: global}\n", srv.Addr)
	if err := os.WriteFile(file, []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") })
	var urls []string
	for range 2 {
		g, err := guard.New(guard.File(file), guard.Options{OpenStore: redisguard.Open, ReloadInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := g.Close(); err != nil {
				t.Error(err)
			}
		})
		s := httptest.NewServer(g.Middleware(hello))
		t.Cleanup(s.Close)
		urls = append(urls, s.URL)
	}
	var got []int
	for i := range 6 {
		resp, err := http.Get(urls[i%2])
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		got = append(got, resp.StatusCode)
	}
	if want := []int{200, 200, 200, 429, 429, 429}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("alternating between the two instances: %v, want %v", got, want)
	}
}

// TestOpenWhileRedisIsDown: as floodgate serve, a Guard opens on a Redis
// that does not answer yet, standalone or Cluster (a service restarted
// during an outage serves, each limit by its failure policy, until Redis
// answers); a store that must check the servers' eviction settings first
// is an error of Open.
func TestOpenWhileRedisIsDown(t *testing.T) {
	t.Parallel()
	for _, url := range []string{"redis://127.0.0.1:1", "redis+cluster://127.0.0.1:1"} {
		st, closeStore, err := redisguard.Open(guard.StoreConfig{URL: url})
		if err != nil {
			t.Fatalf("%s does not answer: %v", url, err)
		}
		if st == nil {
			t.Fatal("no store")
		}
		if err := closeStore(); err != nil {
			t.Error(err)
		}
	}
	if _, _, err := redisguard.Open(guard.StoreConfig{URL: "redis+cluster://127.0.0.1:1", RefuseEvictable: true}); err == nil {
		t.Error("a Cluster nothing answers at opened with RefuseEvictable, which must check its nodes first")
	}
}
