package harness

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prq-dev/prq/fake/corpus"
	"github.com/prq-dev/prq/fake/traffic"
	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/internal/logging"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/internal/server"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
)

func TestMain(m *testing.M) {
	code := m.Run()
	redistest.StopShared()
	os.Exit(code)
}

// stack is serve + worker in one process (the same wiring as `prq all`)
// on a real Redis, with the fake GitHub and provider.
type stack struct {
	t      *testing.T
	app    *server.Server
	fakes  *Fakes
	sender *traffic.Sender
	logs   *SyncBuffer
	cancel context.CancelFunc
	done   chan error
	redis  *redistest.Server
	// checkEvery is the configured pacing of check-run progress updates.
	checkEvery time.Duration
}

type stackOpts struct {
	compress    float64
	concurrency int
	tune        func(*config.Config)
	// providers, when set, changes the configuration after it points at
	// the fakes (a test's own providers).
	providers func(*config.Config, *Fakes)
	// record keeps every call the fake provider receives (its Calls).
	record bool
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
	cfg := config.Default()
	cfg.RedisURL = srv.URL()
	cfg.AllowNoPersistence = true // the test's Redis lives as long as the test
	cfg.Addr = "127.0.0.1:0"
	cfg.Log.Level = "debug"
	Compress(&cfg, o.compress, o.concurrency)
	cfg.ShutdownTimeout = config.Duration(20 * time.Second)
	if o.tune != nil {
		o.tune(&cfg)
	}
	fakes, err := StartFakes(&cfg, o.compress, "sk-test-"+RandomHex(8), 1, o.record)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fakes.Close)
	checkRequests(t, fakes.GitHub) // every request prq makes, against GitHub's description
	fakes.Configure(&cfg, "prq-test")
	if o.providers != nil {
		o.providers(&cfg, fakes)
	}
	cfg.Admin.Token = config.Secret("admin-" + RandomHex(32))
	if err := cfg.Validate(config.ModeAll); err != nil {
		t.Fatal(err)
	}
	logs := &SyncBuffer{}
	log := logging.New(logs, cfg.Log)
	conn, _ := config.ParseRedisURL(cfg.RedisURL)
	ctx, cancel := context.WithCancel(context.Background())
	a, err := server.New(ctx, &cfg, log, conn)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	s := &stack{t: t, app: a, fakes: fakes, logs: logs, cancel: cancel, done: make(chan error, 1), redis: srv, checkEvery: cfg.GitHub.CheckRunEvery.D()}
	served := Serve(ctx, a, logs, server.Roles{HTTP: true, Worker: true}, server.Options{})
	go func() {
		s.done <- <-served
		a.Close()
	}()
	if a.ListenAddr() == "" {
		t.Fatalf("stack did not start:\n%s", logs.String())
	}
	s.sender = &traffic.Sender{URL: "http://" + a.ListenAddr() + "/webhook", Secret: []byte(cfg.GitHub.WebhookSecret)}
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
	if err := s.app.Store().SetPlan(ctx, store.Plan{Installation: inst, Tier: tier, Explicit: true}); err != nil {
		s.t.Fatal(err)
	}
	owner := fmt.Sprintf("tenant-%d", inst)
	s.fakes.GitHub.AddPR(inst, owner, p.Name(), p)
	body := traffic.PullRequestEvent("opened", traffic.PR{Installation: inst, Owner: owner, Repo: p.Name(), Number: p.Number, Title: p.Title, Head: p.HeadSHA, Base: p.BaseSHA})
	code, err := s.sender.Send(ctx, "pull_request", traffic.NewDelivery(), body)
	if err != nil || code != 202 {
		s.t.Fatalf("webhook: %d %v", code, err)
	}
	return jobs.PR{Installation: inst, Owner: owner, Repo: p.Name(), Number: p.Number}
}

// summaryComments counts the PR's comments holding the summary marker.
func (s *stack) summaryComments(pr jobs.PR) int { return s.fakes.Summaries(pr) }

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

// testPRs are PRs sized like the corpus (SmallPRs).
func testPRs(t *testing.T, n int) []corpus.PR {
	t.Helper()
	prs, err := SmallPRs(n)
	if err != nil {
		t.Fatal(err)
	}
	return prs
}
