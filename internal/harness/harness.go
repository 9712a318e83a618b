// Package harness runs prq against the world it talks to, on one machine:
// it starts the fake GitHub and the fake provider (fake/), points a
// configuration at them, compresses their limits in time, runs a serve
// process in-process and worker processes (with their environment) as
// children, and reads Redis and /proc figures. The demo, the benchmark,
// the chaos run and the end-to-end tests share it. It owns no measurement
// and no scenario (internal/bench, internal/chaos), and it does not wire a
// process (internal/server) or start Redis (internal/redisproc).
package harness

import (
	"bytes"
	"net"
	"sync"

	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"github.com/prq-dev/prq/fake/corpus"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/internal/server"
)

// RandomHex returns n random hex digits (secrets, keys, commit SHAs).
func RandomHex(n int) string {
	b := make([]byte, n/2)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Compress sets the limits the demo runs with: small enough that the
// traffic keeps the fake provider saturated, periods divided by compress;
// concurrency jobs per worker. Free tenants get a quota they run into,
// and skip what it does not cover.
func Compress(cfg *config.Config, compress float64, concurrency int) {
	per := config.Duration(float64(time.Minute) / compress)
	cfg.Models = []config.ModelConfig{
		{Name: "gpt-4o-mini", RequestsPerMinute: 600, TokensPerMinute: 60000, MaxOutputTokens: 300, Period: per},
		{Name: "gpt-4o", RequestsPerMinute: 300, TokensPerMinute: 24000, MaxOutputTokens: 600, Period: per},
	}
	cfg.Jobs = config.JobsConfig{SummaryModel: "gpt-4o-mini", ReviewModel: "gpt-4o", ChatModel: "gpt-4o-mini"}
	cfg.Worker.Concurrency = concurrency
	cfg.GitHub.WriteGap = config.Duration(float64(time.Second) / compress)
	cfg.Batch.Every = config.Duration(max(per.D(), time.Second)) // the batch lane's minute
	if t, ok := cfg.Tiers["free"]; ok && t.QuotaTokens == 0 {
		t.QuotaTokens = 40000 // free tenants run into their daily quota during the demo
		cfg.Tiers["free"] = t
		// the quota's day is not compressed: waiting for its reset would
		// outlast the run, so the demo's spent quotas skip (and say so)
		cfg.Quota.WhenSpent = "skip"
	}
}

// Serve runs s with roles in the background until ctx ends and returns
// once it listens (or has failed); its result arrives on the channel.
func Serve(ctx context.Context, s *server.Server, out io.Writer, roles server.Roles, opt server.Options) <-chan error {
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, out, roles, opt) }()
	for s.ListenAddr() == "" {
		select {
		case err := <-done:
			done <- err
			return done
		case <-time.After(5 * time.Millisecond):
		}
	}
	return done
}

// Proc is a worker process: a prq binary started with the fakes'
// environment, its output in a log file, killed if this process dies.
type Proc struct {
	Cmd  *exec.Cmd
	done chan struct{}
}

// StartProc starts exe with args and env, writing its output to logPath.
func StartProc(exe string, args, env []string, logPath string) (*Proc, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", exe, err)
	}
	p := &Proc{Cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); logf.Close(); close(p.done) }()
	return p, nil
}

// Exited says whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.Cmd.Process.Pid }

// Signal sends sig (SIGTERM, SIGSTOP, SIGCONT…).
func (p *Proc) Signal(sig os.Signal) { p.Cmd.Process.Signal(sig) }

// Kill sends SIGKILL.
func (p *Proc) Kill() { p.Cmd.Process.Kill() }

// Wait waits until the process exits, killing it after d.
func (p *Proc) Wait(d time.Duration) {
	select {
	case <-p.done:
	case <-time.After(d):
		p.Kill()
		<-p.done
	}
}

// Executable is exe, or this program when exe is empty.
func Executable(exe string) (string, error) {
	if exe != "" {
		return exe, nil
	}
	return os.Executable()
}

// RunConfig is the configuration of a measured run (bench, chaos): the
// demo's compressed limits, free tenants without a quota (so scheduling
// alone is measured), quiet logs, a 10 s shutdown.
func RunConfig(redisURL string, compress float64, concurrency int) config.Config {
	cfg := config.Default()
	cfg.RedisURL = redisURL
	Compress(&cfg, compress, concurrency)
	cfg.Tiers["free"] = config.Tier{Weight: 1, Review: config.BoolPtr(false)}
	cfg.Log = config.LogConfig{Format: "text", Level: "warn"}
	cfg.ShutdownTimeout = config.Duration(10 * time.Second)
	return cfg
}

// SmallPRs are n PRs sized like the corpus's ordinary ones (1 to 12
// files): the shared corpus's first such PRs when present, else
// generated ones; numbered from 100, with fresh head SHAs.
func SmallPRs(n int) ([]corpus.PR, error) {
	prs, _, err := LoadPRs("", 200, 7)
	if err != nil {
		return nil, err
	}
	var out []corpus.PR
	for _, p := range prs {
		if len(p.Files) == 0 || len(p.Files) > 12 {
			continue
		}
		p.Number = 100 + len(out)
		p.HeadSHA = RandomHex(40)
		out = append(out, p)
		if len(out) == n {
			break
		}
	}
	return out, nil
}

// SyncBuffer collects a process's output for scanning; safe for
// concurrent writers.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// FreeAddr returns a loopback address with a port free right now.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
