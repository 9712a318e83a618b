// Package redistest gives each test package its own real redis-server on
// a free loopback port. Only where no redis-server binary exists does it
// fall back to an in-process Redis (miniredis), and it says so; under CI
// (CI=true) the fallback is an error, so CI always tests against Redis.
package redistest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Server is a Redis started for tests.
type Server struct {
	Addr string
	cmd  *exec.Cmd
	dir  string
	mini *miniredis.Miniredis
	args []string
}

// URL returns the redis:// URL of the server.
func (s *Server) URL() string { return "redis://" + s.Addr }

// Client returns a new client of the server, closed on cleanup.
func (s *Server) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	tb.Cleanup(func() { c.Close() })
	return c
}

// Real reports whether this is a real redis-server process.
func (s *Server) Real() bool { return s.cmd != nil }

var (
	shared   *Server
	sharedMu sync.Mutex
)

// Shared returns the package's Redis, started on first use. Call Stop
// from TestMain (or leave it: the process is killed when the test binary
// exits because it runs in its own process group bound to ours).
func Shared(tb testing.TB) *Server {
	tb.Helper()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared == nil {
		s, err := Start()
		if err != nil {
			tb.Fatalf("redistest: %v", err)
		}
		shared = s
	}
	return shared
}

// StopShared stops the package's Redis if one was started; for TestMain.
func StopShared() {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared != nil {
		shared.Stop()
		shared = nil
	}
}

// New starts a Redis of its own for one test and stops it on cleanup.
// Extra arguments go to redis-server (for example "--appendonly", "yes").
func New(tb testing.TB, args ...string) *Server {
	tb.Helper()
	s, err := Start(args...)
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// Start starts a redis-server on a free port.
func Start(args ...string) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			return nil, fmt.Errorf("redis-server not found and CI=true: install it (apt-get install redis-server)")
		}
		fmt.Fprintln(os.Stderr, "redistest: redis-server not found; falling back to in-process miniredis (install redis-server to test against real Redis)")
		m, err := miniredis.Run()
		if err != nil {
			return nil, err
		}
		return &Server{Addr: m.Addr(), mini: m}, nil
	}
	dir, err := os.MkdirTemp("", "prq-redis-*")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, args: args}
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s.Addr = "127.0.0.1:" + strconv.Itoa(port)
		if err = s.launch(bin); err == nil {
			return s, nil
		}
	}
	os.RemoveAll(dir)
	return nil, fmt.Errorf("could not start redis-server after 5 attempts")
}

func (s *Server) launch(bin string) error {
	_, port, _ := net.SplitHostPort(s.Addr)
	argv := []string{"--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", s.dir, "--maxmemory-policy", "noeviction"}
	argv = append(argv, s.args...)
	cmd := exec.Command(bin, argv...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sent := false
		for sc.Scan() {
			if !sent && strings.Contains(sc.Text(), "Ready to accept connections") {
				ready <- true
				sent = true
			}
		}
		if !sent {
			ready <- false
		}
	}()
	select {
	case ok := <-ready:
		if ok {
			s.cmd = cmd
			return nil
		}
	case <-time.After(10 * time.Second):
	}
	cmd.Process.Kill()
	cmd.Wait()
	return fmt.Errorf("redis-server did not become ready on %s", s.Addr)
}

// Restart stops the server with SIGTERM (so AOF is flushed when enabled)
// and starts it again on the same port and directory.
func (s *Server) Restart() error {
	if s.cmd == nil {
		return fmt.Errorf("restart needs a real redis-server")
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	s.cmd.Wait()
	bin, _ := exec.LookPath("redis-server")
	for i := 0; i < 50; i++ {
		if err := s.launch(bin); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("redis-server did not restart on %s", s.Addr)
}

// StopGraceful stops the server with SIGTERM (AOF is flushed) and keeps
// its directory for StartAgain.
func (s *Server) StopGraceful() {
	if s.cmd != nil {
		s.cmd.Process.Signal(syscall.SIGTERM)
		s.cmd.Wait()
	}
}

// Kill stops the server with SIGKILL (no flush) and keeps its directory.
func (s *Server) Kill() {
	if s.cmd != nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
	}
}

// StartAgain starts a stopped server on the same port and directory.
func (s *Server) StartAgain() error {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return err
	}
	for i := 0; i < 50; i++ {
		if err := s.launch(bin); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("redis-server did not start again on %s", s.Addr)
}

// Stop stops the server and removes its directory.
func (s *Server) Stop() {
	if s.mini != nil {
		s.mini.Close()
		return
	}
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
	}
	if s.dir != "" {
		os.RemoveAll(filepath.Clean(s.dir))
	}
}

// Flush empties the server between tests that share it.
func (s *Server) Flush(tb testing.TB) {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer c.Close()
	if err := c.FlushAll(context.Background()).Err(); err != nil {
		tb.Fatalf("redistest: flush: %v", err)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
