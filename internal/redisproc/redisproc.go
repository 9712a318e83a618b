// Package redisproc starts and stops local redis-server processes: one
// server on a free loopback port (restartable, killable) and a small Redis
// Cluster. The demo, the benchmark, the chaos run and the tests use it. It
// owns no client logic and imports no testing; the testing.TB helpers live
// in internal/redistest.
package redisproc

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// Server is a redis-server process this program started (or, where no
// redis-server binary exists, an in-process miniredis).
type Server struct {
	Addr string
	cmd  *exec.Cmd
	dir  string
	mini *miniredis.Miniredis
	args []string
}

// URL returns the redis:// URL of the server.
func (s *Server) URL() string { return "redis://" + s.Addr }

// Real reports whether this is a real redis-server process (not the
// in-process fallback, which has no persistence settings to test).
func (s *Server) Real() bool { return s.cmd != nil }

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

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
