package workers_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/prq-dev/prq/fake/corpus"
	"github.com/prq-dev/prq/fake/fakegithub"
	"github.com/prq-dev/prq/ghapp"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
	"github.com/prq-dev/prq/workers"
)

var (
	appKeyOnce sync.Once
	appKey     *rsa.PrivateKey
)

// ghRig is the fake GitHub on a server of its own, holding pr (one file,
// a.go, at head h1), and the App that calls it through go-github.
type ghRig struct {
	fake *fakegithub.Server
	app  *ghapp.App
}

func newGHRig(t *testing.T, pr jobs.PR) ghRig {
	t.Helper()
	return newGHRigWith(t, pr, fakegithub.Config{WritesPerPeriod: -1})
}

// newGHRigWith is newGHRig with the fake's limits and clock from cfg.
func newGHRigWith(t *testing.T, pr jobs.PR, cfg fakegithub.Config) ghRig {
	t.Helper()
	appKeyOnce.Do(func() {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			panic(err)
		}
		appKey = k
	})
	cfg.AppID, cfg.PublicKey = 9, &appKey.PublicKey
	fake := fakegithub.New(cfg)
	srv := httptest.NewServer(fake)
	tr := &http.Transport{}
	t.Cleanup(func() {
		srv.Close()
		tr.CloseIdleConnections()
	})
	app, err := ghapp.New(9, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(appKey)}), srv.URL+"/api/v3", tr)
	if err != nil {
		t.Fatal(err)
	}
	patch := patchA
	fake.AddPR(pr.Installation, pr.Owner, pr.Repo, corpus.PR{Repo: pr.Owner + "/" + pr.Repo, Number: pr.Number, Title: "t", HeadSHA: "h1", BaseSHA: "b0",
		Files: []corpus.File{{Filename: "a.go", Status: "modified", Additions: 1, Changes: 1, Patch: &patch}}})
	return ghRig{fake: fake, app: app}
}

// decorationCounts counts ErrorFunc's calls by "kind|status".
type decorationCounts struct {
	mu sync.Mutex
	n  map[string]int
}

func (d *decorationCounts) count(kind, status string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.n == nil {
		d.n = map[string]int{}
	}
	d.n[kind+"|"+status]++
}

func (d *decorationCounts) String() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return fmt.Sprint(d.n)
}

// TestCheckRunFailuresNeverBlockFinalize: whatever GitHub's check-runs
// endpoints answer (a refusal, a failure, no answer in time), finalize
// posts one summary and one review, never writes them again, and
// completes (retrying only for the check run, a bounded number of
// times); each failure is counted by kind and status and logged once per
// installation and kind.
func TestCheckRunFailuresNeverBlockFinalize(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		fail  func(*fakegithub.Server)
		runs  int    // finalize runs until it completes
		count string // the failures counted, by kind|status
		logs  int    // failure lines logged
		hits  int    // requests to the check-runs endpoints
		state string // the check run GitHub shows at the end
	}{
		{"working", func(*fakegithub.Server) {}, 1, "map[]", 0, 3, "completed"}, // find, create queued, complete
		{"403", func(f *fakegithub.Server) { f.FailFamily(fakegithub.FamilyCheckRuns, 403) }, 1, "map[check_run_queued|403:1]", 1, 1, ""},
		{"404", func(f *fakegithub.Server) { f.FailFamily(fakegithub.FamilyCheckRuns, 404) }, 1, "map[check_run_queued|404:1]", 1, 1, ""},
		{"422", func(f *fakegithub.Server) { f.FailFamily(fakegithub.FamilyCheckRuns, 422) }, 1, "map[check_run_queued|422:1]", 1, 1, ""},
		{"500", func(f *fakegithub.Server) { f.FailFamily(fakegithub.FamilyCheckRuns, 500) }, 3,
			"map[check_run_complete|500:3 check_run_queued|500:1]", 2, 4, ""},
		{"timeout", func(f *fakegithub.Server) { f.StallFamily(fakegithub.FamilyCheckRuns, time.Minute) }, 3,
			"map[check_run_complete|timeout:3 check_run_queued|timeout:1]", 2, 4, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			st := newStore(t)
			pr := testPR(t, 501)
			rig := newGHRig(t, pr)
			tt.fail(rig.fake)
			var counts decorationCounts
			var logs syncBuffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			pacer := newPacer(t)
			gh := workers.Installations{App: rig.app}
			checks, err := workers.NewChecks(workers.ChecksConfig{GitHub: gh, Store: st, Turns: pacer, Timeout: 200 * time.Millisecond, ErrorFunc: counts.count, Log: log})
			if err != nil {
				t.Fatal(err)
			}
			gaveUp := 0
			fin, err := workers.NewFinalizer(workers.FinalizerConfig{Attempts: newAttempts(t), Results: st, Publications: st, GitHub: gh, Turns: pacer,
				Checks: checks, GaveUpFunc: func(string, string) { gaveUp++ }, Log: log})
			if err != nil {
				t.Fatal(err)
			}
			task := finishedRun(t, st, pr)
			checks.Queued(ctx, pr, "h1", 2, "", time.Time{}) // as the planner does
			runs := 0
			for runs = 1; ; runs++ {
				err := fin.ProcessTask(ctx, task)
				if err == nil {
					break
				}
				var ra *workers.RetryAfterError
				if !errors.As(err, &ra) || runs >= 20 {
					t.Fatalf("finalize run %d: %v, want done or a retry of the check run", runs, err)
				}
			}
			if runs != tt.runs || gaveUp != 0 {
				t.Errorf("finalize completed after %d runs (%d gave up), want %d", runs, gaveUp, tt.runs)
			}
			if run, err := st.GetRun(ctx, pr); err != nil || run.State != store.StateDone {
				t.Errorf("run %+v (%v), want done", run, err)
			}
			s := rig.fake.Stats(pr.Owner, pr.Repo, pr.Number)
			if s.CommentsCreated != 1 || s.CommentsEdited != 0 || s.Reviews != 1 || s.Duplicates != 0 {
				t.Errorf("%+v: want one summary, never edited, and one review", s)
			}
			if got := counts.String(); got != tt.count {
				t.Errorf("counted %s, want %s", got, tt.count)
			}
			if got := strings.Count(logs.String(), "a check-run write failed"); got != tt.logs {
				t.Errorf("%d failure lines logged, want %d:\n%s", got, tt.logs, logs.String())
			}
			if got := rig.fake.FamilyRequests(fakegithub.FamilyCheckRuns); got != tt.hits {
				t.Errorf("%d check-run requests, want %d", got, tt.hits)
			}
			state := ""
			if cs := rig.fake.CheckRuns(pr.Owner, pr.Repo, "h1"); len(cs) == 1 {
				state = cs[0].Status
			} else if len(cs) > 1 {
				t.Errorf("%d check runs, want at most one", len(cs))
			}
			if state != tt.state {
				t.Errorf("check run %q, want %q", state, tt.state)
			}
		})
	}
}

// TestCheckRunLeftUnfinishedByTheLastAttempt: a check run still failing
// on the finalize job's last attempt is left as it is; the job completes
// (nothing given up), its results published.
func TestCheckRunLeftUnfinishedByTheLastAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newStore(t)
	pr := testPR(t, 502)
	rig := newGHRig(t, pr)
	pacer := newPacer(t)
	gh := workers.Installations{App: rig.app}
	checks, err := workers.NewChecks(workers.ChecksConfig{GitHub: gh, Store: st, Turns: pacer, Tries: 5})
	if err != nil {
		t.Fatal(err)
	}
	gaveUp := 0
	fin, err := workers.NewFinalizer(workers.FinalizerConfig{Attempts: newAttempts(t), Results: st, Publications: st, GitHub: gh, Turns: pacer,
		Checks: checks, Budget: workers.RetryBudget{MaxAttempts: 2}, GaveUpFunc: func(string, string) { gaveUp++ }})
	if err != nil {
		t.Fatal(err)
	}
	task := finishedRun(t, st, pr)
	rig.fake.FailFamily(fakegithub.FamilyCheckRuns, 502)
	var ra *workers.RetryAfterError
	if err := fin.ProcessTask(ctx, task); !errors.As(err, &ra) {
		t.Fatalf("first run: %v, want a retry of the check run", err)
	}
	if err := fin.ProcessTask(ctx, task); err != nil || gaveUp != 0 {
		t.Fatalf("last run: %v (%d gave up), want done", err, gaveUp)
	}
	if s := rig.fake.Stats(pr.Owner, pr.Repo, pr.Number); s.CommentsCreated != 1 || s.CommentsEdited != 0 || s.Reviews != 1 {
		t.Errorf("%+v: want one summary, never edited, and one review", s)
	}
}

// TestCheckRunCreatedCompletedWhenQueuedFailed: a check run that could
// not be created when planned (GitHub failed then) is created completed
// at the end, once GitHub works again; progress never creates one.
func TestCheckRunCreatedCompletedWhenQueuedFailed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newStore(t)
	pr := testPR(t, 503)
	rig := newGHRig(t, pr)
	pacer := newPacer(t)
	gh := workers.Installations{App: rig.app}
	checks, err := workers.NewChecks(workers.ChecksConfig{GitHub: gh, Store: st, Turns: pacer, Every: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	fin, err := workers.NewFinalizer(workers.FinalizerConfig{Attempts: newAttempts(t), Results: st, Publications: st, GitHub: gh, Turns: pacer, Checks: checks})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.StartRun(ctx, store.Run{PR: pr, Head: "h1", Tier: jobs.TierPaid, SummaryTotal: 2},
		[]store.FileData{{Path: "a.go", Status: "modified", Patch: patchA}, {Path: "b.go", Status: "added", Patch: patchA}}); err != nil {
		t.Fatal(err)
	}
	rig.fake.FailFamily(fakegithub.FamilyCheckRuns, 503)
	checks.Queued(ctx, pr, "h1", 2, "", time.Time{})
	rig.fake.FailFamily(fakegithub.FamilyCheckRuns, 0)
	if _, err := st.CompleteFile(ctx, pr, "h1", store.Result{Kind: jobs.KindSummary, Path: "a.go", Text: "Adds b."}); err != nil {
		t.Fatal(err)
	}
	checks.Progress(ctx, pr, "h1") // one file of two: no run to update
	if n := len(rig.fake.CheckRuns(pr.Owner, pr.Repo, "h1")); n != 0 {
		t.Fatalf("%d check runs after progress, want none", n)
	}
	if _, err := st.CompleteFile(ctx, pr, "h1", store.Result{Kind: jobs.KindSummary, Index: 1, Path: "b.go", Text: "Adds c."}); err != nil {
		t.Fatal(err)
	}
	if err := fin.ProcessTask(ctx, asynq.NewTask(jobs.TypeFinalize, jobs.Marshal(jobs.Finalize{PR: pr, HeadSHA: "h1", Tier: jobs.TierPaid}))); err != nil {
		t.Fatal(err)
	}
	cs := rig.fake.CheckRuns(pr.Owner, pr.Repo, "h1")
	if len(cs) != 1 || cs[0].Status != "completed" || len(cs[0].History) != 1 || cs[0].Conclusion != "success" {
		t.Fatalf("check runs %+v, want one created completed (success)", cs)
	}
}

// throttleCount is the store, counting its Throttle calls for progress
// (not the write's own, "…:sent").
type throttleCount struct {
	*store.Store
	mu sync.Mutex
	n  int
}

func (s *throttleCount) Throttle(ctx context.Context, pr jobs.PR, what string, every time.Duration) (bool, error) {
	if !strings.HasSuffix(what, ":sent") {
		s.mu.Lock()
		s.n++
		s.mu.Unlock()
	}
	return s.Store.Throttle(ctx, pr, what, every)
}

// TestProgressPacedInProcess: the files a process finishes while its own
// pacing of the head's progress stands ask Redis nothing; once it ends,
// the next one asks again.
func TestProgressPacedInProcess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := &throttleCount{Store: newStore(t)}
	pr := testPR(t, 504)
	rig := newGHRig(t, pr)
	now := time.Now()
	checks, err := workers.NewChecks(workers.ChecksConfig{GitHub: workers.Installations{App: rig.app}, Store: st, Turns: newPacer(t), Every: time.Hour,
		NowFunc: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.StartRun(ctx, store.Run{PR: pr, Head: "h1", Tier: jobs.TierPaid, SummaryTotal: 3}, nil); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		checks.Progress(ctx, pr, "h1")
	}
	if st.n != 1 {
		t.Fatalf("three files within the pacing: %d Throttle calls, want 1", st.n)
	}
	now = now.Add(time.Hour)
	checks.Progress(ctx, pr, "h1")
	if st.n != 2 {
		t.Fatalf("after the pacing: %d Throttle calls, want 2", st.n)
	}
}

// postedReads is the store, counting the reads of posted marks.
type postedReads struct {
	*store.Store
	mu sync.Mutex
	n  int
}

func (s *postedReads) Posted(ctx context.Context, pr jobs.PR, what string) (int64, error) {
	s.mu.Lock()
	s.n++
	s.mu.Unlock()
	return s.Store.Posted(ctx, pr, what)
}

func (s *postedReads) PostedEach(ctx context.Context, pr jobs.PR, whats ...string) ([]int64, error) {
	s.mu.Lock()
	s.n++
	s.mu.Unlock()
	return s.Store.PostedEach(ctx, pr, whats...)
}

func (s *postedReads) reads() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.n
	s.n = 0
	return n
}

// TestCheckRunWritesReadItsIDWithTheirState: a progress update and a
// superseded head's cancellation write to the check run Queued created,
// each with one read of the posted marks (whether check runs are off and
// the run's id, together); without a run recorded, neither writes.
func TestCheckRunWritesReadItsIDWithTheirState(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := &postedReads{Store: newStore(t)}
	pr := testPR(t, 505)
	pr.Number = int(time.Now().UnixNano() % 1_000_000) // its own keys in the shared Redis, run after run
	rig := newGHRig(t, pr)
	checks, err := workers.NewChecks(workers.ChecksConfig{GitHub: workers.Installations{App: rig.app}, Store: st, Turns: newPacer(t), Every: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.StartRun(ctx, store.Run{PR: pr, Head: "h1", Tier: jobs.TierPaid, SummaryTotal: 2}, nil); err != nil {
		t.Fatal(err)
	}
	checks.Superseded(ctx, pr, "h0", "h1") // no run for h0: nothing to cancel
	checks.Progress(ctx, pr, "h0")         // nor to update
	if n := len(rig.fake.CheckRuns(pr.Owner, pr.Repo, "h0")); n != 0 {
		t.Fatalf("%d check runs, want none", n)
	}
	checks.Queued(ctx, pr, "h1", 2, "", time.Time{})
	if _, err := st.CompleteFile(ctx, pr, "h1", store.Result{Kind: jobs.KindSummary, Path: "a.go", Text: "Adds b."}); err != nil {
		t.Fatal(err)
	}
	st.reads()
	checks.Progress(ctx, pr, "h1")
	if n := st.reads(); n != 1 {
		t.Errorf("progress read the posted marks %d times, want once", n)
	}
	checks.Superseded(ctx, pr, "h1", "h2")
	if n := st.reads(); n != 1 {
		t.Errorf("superseded read the posted marks %d times, want once", n)
	}
	cs := rig.fake.CheckRuns(pr.Owner, pr.Repo, "h1")
	if len(cs) != 1 || len(cs[0].History) != 3 || cs[0].History[1].Status != "in_progress" || cs[0].Conclusion != "cancelled" {
		t.Fatalf("check runs %+v, want one: queued, in progress, cancelled", cs)
	}
}
