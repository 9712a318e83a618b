package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prq-dev/prq/fake/corpus"
	"github.com/prq-dev/prq/fake/traffic"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
	"github.com/prq-dev/prq/workers"
)

func TestMain(m *testing.M) {
	code := m.Run()
	redistest.StopShared()
	os.Exit(code)
}

// syncBuffer collects a process's logs for scanning.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// stack is serve + worker in one process (the same wiring as `prq all`)
// on a real Redis, with the fake GitHub and provider.
type stack struct {
	t      *testing.T
	app    *app
	fakes  *fakeSet
	sender *traffic.Sender
	logs   *syncBuffer
	cancel context.CancelFunc
	done   chan error
	redis  *redistest.Server
}

type stackOpts struct {
	compress    float64
	concurrency int
	tune        func(*Config)
}

func startStack(t *testing.T, o stackOpts) *stack {
	t.Helper()
	if o.compress == 0 {
		o.compress = 30
	}
	if o.concurrency == 0 {
		o.concurrency = 20
	}
	srv := redistest.New(t)
	cfg := defaultConfig()
	cfg.sources = map[string]string{}
	cfg.RedisURL = srv.URL()
	cfg.Addr = "127.0.0.1:0"
	cfg.Log.Level = "debug"
	demoConfig(&cfg, demoFlags{compress: o.compress, concurrency: o.concurrency})
	cfg.ShutdownTimeout = Duration(20 * time.Second)
	if o.tune != nil {
		o.tune(&cfg)
	}
	apiKey := "sk-test-" + randomHex(8)
	fakes, err := startFakes(&cfg, o.compress, apiKey, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fakes.close)
	cfg.GitHub.AppID, cfg.GitHub.PrivateKey, cfg.GitHub.APIURL = fakes.appID, Secret(fakes.keyPEM), fakes.githubURL
	cfg.GitHub.WebhookSecret, cfg.GitHub.AppSlug = Secret(randomHex(32)), "prq-test"
	cfg.OpenAI.APIKey, cfg.OpenAI.BaseURL = Secret(apiKey), fakes.openaiURL
	cfg.Admin.Token = Secret("admin-" + randomHex(8))
	if err := cfg.validate(modeAll); err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	log := newLogger(logs, cfg.Log)
	conn, _ := parseRedisURL(cfg.RedisURL)
	ctx, cancel := context.WithCancel(context.Background())
	a, err := newApp(ctx, &cfg, log, conn)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	s := &stack{t: t, app: a, fakes: fakes, logs: logs, cancel: cancel, done: make(chan error, 1), redis: srv}
	go func() {
		defer a.close()
		s.done <- a.run(ctx, &cmdEnv{getenv: func(string) string { return "" }, stdout: logs, stderr: logs}, running{http: true, worker: true}, nil)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for a.listenAddr() == "" {
		if time.Now().After(deadline) {
			t.Fatalf("stack did not start:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.sender = &traffic.Sender{URL: "http://" + a.listenAddr() + "/webhook", Secret: []byte(cfg.GitHub.WebhookSecret)}
	t.Cleanup(func() {
		s.stop()
		if t.Failed() {
			t.Logf("logs:\n%s", tail(logs.String(), 60))
		}
	})
	return s
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (s *stack) stop() error {
	if s.cancel == nil {
		return nil
	}
	s.cancel()
	s.cancel = nil
	select {
	case err := <-s.done:
		return err
	case <-time.After(40 * time.Second):
		return fmt.Errorf("stack did not stop")
	}
}

// openPR serves p as installation inst's and sends pull_request.opened.
func (s *stack) openPR(inst int64, tier jobs.Tier, p corpus.PR) jobs.PR {
	s.t.Helper()
	ctx := context.Background()
	if err := s.app.store.SetPlan(ctx, store.Plan{Installation: inst, Tier: tier, Explicit: true}); err != nil {
		s.t.Fatal(err)
	}
	owner := fmt.Sprintf("tenant-%d", inst)
	s.fakes.github.AddPR(inst, owner, p.Name(), p)
	body := traffic.PullRequestEvent("opened", traffic.PR{Installation: inst, Owner: owner, Repo: p.Name(), Number: p.Number, Title: p.Title, Head: p.HeadSHA, Base: p.BaseSHA})
	code, err := s.sender.Send(ctx, "pull_request", traffic.NewDelivery(), body)
	if err != nil || code != 202 {
		s.t.Fatalf("webhook: %d %v", code, err)
	}
	return jobs.PR{Installation: inst, Owner: owner, Repo: p.Name(), Number: p.Number}
}

// summaryComments counts the PR's comments holding the summary marker.
func (s *stack) summaryComments(pr jobs.PR) int {
	n := 0
	for _, c := range s.fakes.github.Comments(pr.Owner, pr.Repo, pr.Number) {
		if strings.Contains(c.Body, workers.SummaryMarker) {
			n++
		}
	}
	return n
}

// waitFor polls cond until it holds or the timeout passes.
func (s *stack) waitFor(what string, timeout time.Duration, cond func() bool) {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			s.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var discardLog = slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil))

func redisForTest(t *testing.T) *redistest.Server { return redistest.New(t) }
