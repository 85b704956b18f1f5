package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// TB is the part of testing.TB the helpers use.
type TB interface {
	Helper()
	Cleanup(func())
	Fatalf(format string, args ...any)
	TempDir() string
}

// Binary returns the path of the named Redis binary (redis-server,
// redis-cli), or an error that says how to install it.
func Binary(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	p := filepath.Join("/usr/bin", name)
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("redistest: %s not found in PATH or /usr/bin; install it (scripts/test.sh does: apt-get install redis-server redis-tools)", name)
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("redistest: free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port, nil
}

// Server is one redis-server process that this package started.
type Server struct {
	// Addr is host:port on the loopback interface.
	Addr string
	// TLSAddr is the TLS port's host:port when Config.TLSArgs opened one.
	TLSAddr string

	dir    string
	ownDir bool // dir was made here and is removed by Stop
	args   []string
	mu     sync.Mutex // guards cmd and done
	cmd    *exec.Cmd
	done   chan struct{}
}

// Config tunes a server.
type Config struct {
	// Dir holds the server's files; a fresh temporary directory when empty.
	Dir string
	// Args are extra redis-server arguments ("--cluster-enabled", "yes").
	Args []string
	// TLSArgs, when set, open a TLS port beside the plain one: the
	// server is started with "--tls-port PORT" and these arguments (the
	// certificate files), on a port picked again with the plain one at
	// each attempt. Server.TLSAddr says where.
	TLSArgs []string
}

// Start starts a standalone redis-server on a free loopback port and
// registers its stop with t.Cleanup.
func Start(t TB) *Server {
	t.Helper()
	s, err := StartServer(Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// StartUnix starts a standalone redis-server that also listens on a Unix
// socket (its owner alone may connect), registers its stop with
// t.Cleanup, and returns it with the socket's path.
func StartUnix(t TB) (*Server, string) {
	t.Helper()
	dir := t.TempDir()
	sock := dir + "/redis.sock"
	s, err := StartServer(Config{Dir: dir, Args: []string{"--unixsocket", sock, "--unixsocketperm", "700"}})
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(s.Stop)
	return s, sock
}

// StartServer starts a redis-server as cfg says. The caller stops it.
func StartServer(cfg Config) (*Server, error) {
	bin, err := Binary("redis-server")
	if err != nil {
		return nil, err
	}
	dir := cfg.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "redistest-"); err != nil {
			return nil, fmt.Errorf("redistest: %w", err)
		}
	}
	var last error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir, ownDir: cfg.Dir == ""}
		s.args = append([]string{
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", dir,
			"--protected-mode", "no", "--daemonize", "no", "--loglevel", "warning",
			"--logfile", filepath.Join(dir, "redis-"+strconv.Itoa(port)+".log"),
		}, cfg.Args...)
		if cfg.TLSArgs != nil {
			tlsPort, err := FreePort()
			if err != nil {
				return nil, err
			}
			s.TLSAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(tlsPort))
			s.args = append(append(s.args, "--tls-port", strconv.Itoa(tlsPort)), cfg.TLSArgs...)
		}
		if err := s.start(bin); err != nil {
			last = err
			continue
		}
		return s, nil
	}
	return nil, fmt.Errorf("redistest: could not start redis-server: %w", last)
}

func (s *Server) start(bin string) error {
	cmd := exec.Command(bin, s.args...)
	cmd.Dir = s.dir
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redistest: start redis-server: %w", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return fmt.Errorf("redistest: redis-server on %s exited at start (port taken?); log: %s", s.Addr, s.logTail())
		default:
		}
		if err := s.ping(); err == nil {
			// The port was free a moment before the start: a server of
			// another test may have taken it in between and answer
			// here, while this one exits on the taken port.
			if pid, err := s.pid(); err == nil && pid != cmd.Process.Pid {
				s.Kill()
				return fmt.Errorf("redistest: another redis-server (pid %d) answers on %s", pid, s.Addr)
			}
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.Kill()
	return fmt.Errorf("redistest: redis-server on %s did not answer PING within 10s", s.Addr)
}

func (s *Server) logTail() string {
	matches, _ := filepath.Glob(filepath.Join(s.dir, "redis-"+s.port()+".log"))
	for _, m := range matches {
		b, _ := os.ReadFile(m)
		if len(b) > 500 {
			b = b[len(b)-500:]
		}
		return strings.TrimSpace(string(b))
	}
	return "(none)"
}

func (s *Server) port() string {
	_, p, _ := net.SplitHostPort(s.Addr)
	return p
}

// pid asks the server for its process ID (INFO server's process_id).
func (s *Server) pid() (int, error) {
	info, err := s.Do("INFO", "server")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, fmt.Errorf("redistest: no process_id in INFO server")
}

// ping sends PING over a fresh connection and waits for PONG.
func (s *Server) ping() error {
	_, err := s.Do("PING")
	return err
}

// Do sends one command over a fresh connection and returns the reply as
// text (simple strings, integers and bulk strings; arrays are joined with
// newlines). It is for test set-up, not for speed.
func (s *Server) Do(args ...string) (string, error) {
	return Do(s.Addr, args...)
}

// Do sends one command to addr; see Server.Do.
func Do(addr string, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	return readReply(bufio.NewReader(c))
}

func readReply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", errors.New("redistest: empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", errors.New(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", err
		}
		if n < 0 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := ioReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", err
		}
		parts := make([]string, 0, max(n, 0))
		for i := 0; i < n; i++ {
			p, err := readReply(r)
			if err != nil {
				return "", err
			}
			parts = append(parts, p)
		}
		return strings.Join(parts, "\n"), nil
	}
	return "", fmt.Errorf("redistest: unexpected reply %q", line)
}

func ioReadFull(r *bufio.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// PID returns the process id of the running server, or 0.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd != nil && cmd.Process != nil {
		cmd.Process.Signal(sig)
	}
}

// wait waits up to d for the process to exit and reports whether it did.
func (s *Server) wait(d time.Duration) bool {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	if done == nil {
		return true
	}
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// Stop ends the server (SIGTERM, then SIGKILL after 5 s) and waits for it.
// It is safe to call more than once.
func (s *Server) Stop() {
	s.signal(syscall.SIGCONT) // a paused server cannot handle SIGTERM
	s.signal(syscall.SIGTERM)
	if !s.wait(5 * time.Second) {
		s.Kill()
	}
	if s.ownDir {
		os.RemoveAll(s.dir)
	}
}

// Kill ends the server with SIGKILL, as a crash would, and waits for it.
func (s *Server) Kill() {
	s.signal(syscall.SIGKILL)
	s.wait(10 * time.Second)
}

// Pause stops the server with SIGSTOP: connections stay open and nothing
// answers.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

// Restart starts the server again on the same port after Stop or Kill. The
// data is gone (no persistence). It retries briefly while the port is still
// being released.
func (s *Server) Restart() error {
	s.signal(syscall.SIGCONT)
	s.signal(syscall.SIGTERM)
	if !s.wait(5 * time.Second) {
		s.Kill()
	}
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return fmt.Errorf("redistest: restart: %w", err)
	}
	bin, err := Binary("redis-server")
	if err != nil {
		return err
	}
	var last error
	for i := 0; i < 20; i++ {
		if last = s.start(bin); last == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return last
}
