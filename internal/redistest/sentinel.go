package redistest

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Sentinel is one redis-server in sentinel mode watching a primary under
// the name MasterSet.
type Sentinel struct {
	*Server
	MasterSet string
}

// StartSentinel starts a sentinel that monitors primary as masterSet (quorum
// 1) and registers its stop with t.Cleanup.
func StartSentinel(t TB, primary *Server, masterSet string) *Sentinel {
	t.Helper()
	s, err := NewSentinel(t.TempDir(), primary, masterSet)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// NewSentinel starts a sentinel with its files in dir. The caller stops it.
func NewSentinel(dir string, primary *Server, masterSet string) (*Sentinel, error) {
	bin, err := Binary("redis-server")
	if err != nil {
		return nil, err
	}
	host, port, err := net.SplitHostPort(primary.Addr)
	if err != nil {
		return nil, fmt.Errorf("redistest: sentinel: %w", err)
	}
	var last error
	for attempt := 0; attempt < 5; attempt++ {
		sport, err := FreePort()
		if err != nil {
			return nil, err
		}
		conf := filepath.Join(dir, "sentinel-"+strconv.Itoa(sport)+".conf")
		body := strings.Join([]string{
			"port " + strconv.Itoa(sport),
			"bind 127.0.0.1",
			"daemonize no",
			"protected-mode no",
			"logfile " + filepath.Join(dir, "sentinel-"+strconv.Itoa(sport)+".log"),
			"dir " + dir,
			"sentinel monitor " + masterSet + " " + host + " " + port + " 1",
			"sentinel down-after-milliseconds " + masterSet + " 5000",
			"",
		}, "\n")
		if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
			return nil, fmt.Errorf("redistest: sentinel: %w", err)
		}
		s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(sport)), dir: dir}
		s.args = []string{conf, "--sentinel"}
		if last = s.start(bin); last != nil {
			continue
		}
		// Wait until the sentinel knows the primary.
		deadline := time.Now().Add(10 * time.Second)
		for {
			addr, err := s.Do("SENTINEL", "GET-MASTER-ADDR-BY-NAME", masterSet)
			if err == nil && strings.Contains(addr, port) {
				return &Sentinel{Server: s, MasterSet: masterSet}, nil
			}
			if time.Now().After(deadline) {
				s.Kill()
				return nil, fmt.Errorf("redistest: sentinel on %s does not know %s: %v %q", s.Addr, masterSet, err, addr)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil, fmt.Errorf("redistest: could not start a sentinel: %w", last)
}
