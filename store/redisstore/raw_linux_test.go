//go:build linux

package redisstore

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/internal/rawconn"
	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/internal/ruletest"
	"github.com/floodgate/floodgate/limiter"
)

// trackedConns returns the connections the store tracks, on every node.
func trackedConns(s *Store) []*trackedConn {
	r := s.replies
	servers := []*server{&r.all}
	if r.cluster {
		servers = servers[:0]
		r.mu.Lock()
		for _, v := range r.nodes {
			servers = append(servers, v)
		}
		r.mu.Unlock()
	}
	var cs []*trackedConn
	for _, v := range servers {
		v.mu.Lock()
		for c := range v.conns {
			cs = append(cs, c)
		}
		v.mu.Unlock()
	}
	return cs
}

// TestConnectionsReadRaw: the store's plain connections to Redis,
// standalone and Cluster, are read and written with raw system calls
// (rawconn: no runtime bookkeeping around each call, which on shared cores
// costs the client CPU that Redis would otherwise have), written through
// net while no reply is owed, and decide as before; so is a connection to
// a Unix socket (redis+unix), tracked for progress as a TCP one; a TLS
// connection is read and written through TLS alone.
func TestConnectionsReadRaw(t *testing.T) {
	r := ruletest.Rule(t, floodgate.Limit{Name: "raw", Algorithm: floodgate.FixedWindow, Max: 1, Window: time.Hour})
	out := make([]floodgate.Decision, 1)
	hits := []limiter.Hit{{Rule: r, Key: "k", Cost: 1}}
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			s := storeOn(t, mode)
			for i, want := range []bool{true, false} {
				if err := s.Decide(context.Background(), hits, false, out); err != nil {
					t.Fatal(err)
				}
				if out[0].Allowed != want {
					t.Fatalf("request %d: %+v, want allowed=%v", i+1, out[0], want)
				}
			}
			cs := trackedConns(s)
			if len(cs) == 0 {
				t.Fatal("no connection tracked")
			}
			for _, c := range cs {
				rc, ok := c.Conn.(*rawconn.Conn)
				if !ok || rc.Raw() == nil {
					t.Fatalf("a connection to %s is a %T, not read and written raw", c.raw.RemoteAddr(), c.Conn)
				}
				if rc.PlainConn() != c.raw {
					t.Fatalf("a connection to %s writes %v through net while no reply is owed, want its TCP connection", c.raw.RemoteAddr(), rc.PlainConn())
				}
			}
		})
	}
	t.Run("unix", func(t *testing.T) {
		// A Unix socket's store is opened as a TCP one is: its connection
		// tracked for progress, and read and written raw.
		_, sock := redistest.StartUnix(t)
		s, err := New(Options{URL: "redis+unix://" + sock, Prefix: uniquePrefix(t)})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		for i, want := range []bool{true, false} {
			if err := s.Decide(context.Background(), hits, false, out); err != nil || out[0].Allowed != want {
				t.Fatalf("request %d over a Unix socket: %+v, %v; want allowed=%v", i+1, out[0], err, want)
			}
		}
		if at, ok := s.LastReply(hits); !ok || time.Since(at) > time.Minute {
			t.Fatalf("LastReply over a Unix socket: %v, %v; want the last reply's time", at, ok)
		}
		cs := trackedConns(s)
		if len(cs) == 0 {
			t.Fatal("no connection tracked over a Unix socket")
		}
		for _, c := range cs {
			if rc, ok := c.Conn.(*rawconn.Conn); !ok || rc.Raw() == nil {
				t.Fatalf("a connection over a Unix socket is a %T, not read and written raw", c.Conn)
			}
		}
	})
	t.Run("tls", func(t *testing.T) {
		srv, pool := startTLSRedis(t)
		s, err := New(Options{URL: "rediss://" + srv.TLSAddr, Prefix: uniquePrefix(t), TLSConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := s.Decide(context.Background(), hits, false, out); err != nil || !out[0].Allowed {
			t.Fatalf("over TLS: %+v, %v", out[0], err)
		}
		cs := trackedConns(s)
		if len(cs) == 0 {
			t.Fatal("no connection tracked")
		}
		for _, c := range cs {
			if _, ok := c.Conn.(*tls.Conn); !ok {
				t.Fatalf("a TLS connection is a %T, not written through TLS alone", c.Conn)
			}
		}
	})
}
