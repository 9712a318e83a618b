// Package redistest gives each test package its own real redis-server on
// a free loopback port, as testing.TB helpers over internal/redisproc
// (which starts and stops the process). Only where no redis-server binary
// exists does it fall back to an in-process Redis (miniredis), and it says
// so; under CI (CI=true) the fallback is an error, so CI always tests
// against Redis. Production code uses redisproc, never this package.
package redistest

import (
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/internal/redisproc"
)

// Server is a Redis started for tests.
type Server struct{ *redisproc.Server }

// Client returns a new client of the server, closed on cleanup.
func (s *Server) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	tb.Cleanup(func() { c.Close() })
	return c
}

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
	s, err := redisproc.Start(args...)
	if err != nil {
		return nil, err
	}
	return &Server{s}, nil
}
