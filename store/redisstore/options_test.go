package redisstore

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseURL(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Address
	}{
		{"redis://127.0.0.1:6380", Address{Mode: Standalone, Hosts: []string{"127.0.0.1:6380"}}},
		{"redis://localhost", Address{Mode: Standalone, Hosts: []string{"localhost:6379"}}},
		{"redis://:s3cret@h:1/2", Address{Mode: Standalone, Hosts: []string{"h:1"}, Password: "s3cret", DB: 2}},
		{"redis://u:p%40ss@h:1/", Address{Mode: Standalone, Hosts: []string{"h:1"}, Username: "u", Password: "p@ss"}},
		{"rediss://cache.example:6390/0", Address{Mode: Standalone, TLS: true, Hosts: []string{"cache.example:6390"}}},
		{"redis://[::1]:7000", Address{Mode: Standalone, Hosts: []string{"[::1]:7000"}}},
		{"redis+cluster://a:7000,b:7001,c", Address{Mode: Cluster, Hosts: []string{"a:7000", "b:7001", "c:6379"}}},
		{"rediss+cluster://u:p@a:7000", Address{Mode: Cluster, TLS: true, Hosts: []string{"a:7000"}, Username: "u", Password: "p"}},
		{"redis+sentinel://s1:26379,s2/mymaster", Address{Mode: Sentinel, Hosts: []string{"s1:26379", "s2:26379"}, MasterSet: "mymaster"}},
		{"redis+sentinel://s1/mymaster/3", Address{Mode: Sentinel, Hosts: []string{"s1:26379"}, MasterSet: "mymaster", DB: 3}},
		{"redis+unix:///run/redis.sock", Address{Mode: Standalone, Unix: true, Hosts: []string{"/run/redis.sock"}}},
		{"redis+unix://u:p%40ss@/run/redis.sock", Address{Mode: Standalone, Unix: true, Hosts: []string{"/run/redis.sock"}, Username: "u", Password: "p@ss"}},
	} {
		got, err := ParseURL(c.in)
		if err != nil {
			t.Fatalf("ParseURL(%q): %v", c.in, err)
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Fatalf("ParseURL(%q) = %+v, want %+v", c.in, got, c.want)
		}
	}
}

func TestParseURLErrors(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", "want a URL"},
		{"127.0.0.1:6379", "want a URL"},
		{"http://h:1", "unknown scheme"},
		{"redis://", "no host"},
		{"redis://h:0", "bad port"},
		{"redis://h:99999", "bad port"},
		{"redis://h:x", "bad port"},
		{"redis://a:1,b:2", "one host"},
		{"redis://h/x", "not a number"},
		{"redis://h/1/2", "too many parts"},
		{"redis://h?db=1", "query"},
		{"redis+cluster://a:1/1", "only database 0"},
		{"redis+cluster://a:1,,b:2", "empty host"},
		{"redis+sentinel://s1:26379", "master's name"},
		{"redis://user:hunter2@h:x", "bad port"},
		{"redis+unix://run/redis.sock", "want redis+unix:///path"},
		{"redis+unix:///", "want redis+unix:///path"},
		{"redis+unix:///run/redis.sock?db=1", "want redis+unix:///path"},
		{"redis+unix://user:hunter2@/run/%zz.sock?x", "want redis+unix:///path"},
		{"redis+unix://user:%zz@/run/redis.sock", "bad credentials"},
	} {
		_, err := ParseURL(c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("ParseURL(%q): %v, want an error about %q", c.in, err, c.want)
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Fatalf("ParseURL(%q): the error shows the password: %v", c.in, err)
		}
	}
}

// TestPasswordWithSlashNeverShown: a password holding a / (as base64
// passwords do) written into a URL unescaped is refused without any part
// of it in the message, and hidden where a URL is logged.
func TestPasswordWithSlashNeverShown(t *testing.T) {
	const pass = "k3/Zq+w9hunter2"
	for _, in := range []string{
		"redis://:" + pass + "@h:6379",
		"redis://user:" + pass + "@h:6379/0",
		"rediss://:" + pass + "@h",
		"redis+cluster://:" + pass + "@a:7000,b:7001",
		"redis+sentinel://:" + pass + "@s1:26379/mymaster",
	} {
		_, err := ParseURL(in)
		if err == nil || !strings.Contains(err.Error(), "%2F") {
			t.Errorf("ParseURL(%q): %v, want a refusal saying to write / as %%2F", in, err)
		}
		if err != nil && (strings.Contains(err.Error(), "k3") || strings.Contains(err.Error(), "hunter2")) {
			t.Errorf("ParseURL(%q): the error shows the password: %v", in, err)
		}
		if r := redact(in); strings.Contains(r, "k3") || strings.Contains(r, "hunter2") {
			t.Errorf("redact(%q) = %q", in, r)
		}
	}
	// A Unix socket's URL takes such a password; its URL is logged while
	// Redis does not answer at the start.
	in := "redis+unix://:" + pass + "@/run/redis.sock"
	if a, err := ParseURL(in); err != nil || a.Password != pass {
		t.Fatalf("ParseURL(%q) = %+v, %v", in, a, err)
	}
	if r := redact(in); r != "redis+unix://:xxxxx@/run/redis.sock" {
		t.Errorf("redact(%q) = %q", in, r)
	}
}

func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"redis://h:1/2", "rediss://u:p@h", "redis+cluster://a:1,b:2",
		"redis+sentinel://s:1/m/2", "redis://[::1]:1", "redis://:@/", "x://", "redis+unix://u:p@/s.sock"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseURL(s)
		if err != nil {
			return
		}
		if len(a.Hosts) == 0 || a.Mode < Standalone || a.Mode > Sentinel {
			t.Fatalf("ParseURL(%q) = %+v without an error", s, a)
		}
		if a.Mode == Sentinel && a.MasterSet == "" {
			t.Fatalf("ParseURL(%q): sentinel without a master", s)
		}
		_ = a.clientOption(&Options{})
	})
}

func TestSlot(t *testing.T) {
	// Values from the Redis Cluster specification and CLUSTER KEYSLOT.
	for key, want := range map[string]uint16{
		"123456789":             12739,
		"foo":                   12182,
		"{user1000}.following":  slot("user1000"),
		"foo{}{bar}":            slot("foo{}{bar}"),
		"foo{{bar}}zap":         slot("{bar"),
		"{}":                    slot("{}"),
		"fg:{1.2.3.4}:rule.abc": slot("1.2.3.4"),
	} {
		if got := slot(key); got != want {
			t.Fatalf("slot(%q) = %d, want %d", key, got, want)
		}
	}
}

// TestSlotMatchesServer compares slot with the server's CLUSTER KEYSLOT.
func TestSlotMatchesServer(t *testing.T) {
	c := sharedCluster(t)
	for _, key := range []string{"a", "fg:{user:42}:api.x1", "fg:{}:x", "{a}{b}", "x{y", "ünïcode{ü}"} {
		got, err := c.Nodes[0].Do("CLUSTER", "KEYSLOT", key)
		if err != nil {
			t.Fatal(err)
		}
		if want := slot(key); got != itoa(int64(want)) {
			t.Fatalf("slot(%q) = %d, server says %s", key, want, got)
		}
	}
}

func TestClientOptionPipeline(t *testing.T) {
	a, err := ParseURL("redis://127.0.0.1:6379")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		in        Options
		multiplex int
		delay     time.Duration
	}{
		{Options{}, -1, 0}, // batching gathers the requests
		{Options{MaxBatch: 1}, -1, DefaultMaxFlushDelay},
		{Options{PipelineMultiplex: -3, MaxFlushDelay: -1}, -1, 0},
		{Options{PipelineMultiplex: 2, MaxFlushDelay: 5 * time.Microsecond}, 2, 5 * time.Microsecond},
	} {
		o := a.clientOption(&c.in)
		if o.PipelineMultiplex != c.multiplex || o.MaxFlushDelay != c.delay {
			t.Errorf("%+v: multiplex %d, flush delay %v; want %d, %v", c.in, o.PipelineMultiplex, o.MaxFlushDelay, c.multiplex, c.delay)
		}
	}
}
