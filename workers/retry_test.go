package workers_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/prq-dev/prq/ghapp"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/llm"
	"github.com/prq-dev/prq/workers"
)

// gaveUp records what GaveUpFunc was told.
type gaveUp struct {
	mu   sync.Mutex
	seen []string
}

func (g *gaveUp) Func(kind, reason string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.seen = append(g.seen, kind+" "+reason)
}

func (g *gaveUp) Seen() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.seen...)
}

// clock is a settable clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// fileTaskOf is f's task, as the planner makes it (file index 0).
func fileTaskOf(f jobs.File) *asynq.Task {
	payload := jobs.Marshal(struct {
		jobs.File
		FileIndex int `json:"file_index"`
	}{File: f, FileIndex: 0})
	return asynq.NewTask(jobs.TypeSummary, payload)
}

// A provider that refuses forever (a revoked key, a 429 on every call)
// no longer keeps a file job alive: after its budget of attempts the job
// records a failed result with a generic reason, the head's finalize is
// enqueued, and the give-up is counted. Before budgets, every run went
// back to admission and the job never ended.
func TestFileJobGivesUpAfterItsAttempts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		inst       int64
		kind       error
		wantReason string
		wantText   string
		wantPauses int
	}{
		{name: "revoked key", inst: 601, kind: llm.ErrAccount, wantReason: workers.GaveUpAccount,
			wantText: "the provider kept refusing (account problem)", wantPauses: 3},
		{name: "429 forever", inst: 602, kind: llm.ErrRateLimited, wantReason: workers.GaveUpRateLimited,
			wantText: "the provider kept refusing (rate limited)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			st, adm, q, model := newStore(t), &fakeAdmission{}, &fakeQueue{}, &fakeLLM{CompleteFunc: fail(tc.kind)}
			gave := &gaveUp{}
			w, err := workers.NewFileWorker(workers.FileWorkerConfig{Store: st, Ledger: adm, Caller: newCaller(t, adm, model, nil, nil), Queue: q,
				Models: testModels, Repairs: st, Requeue: adm, Attempts: newAttempts(t), Budget: workers.RetryBudget{MaxAttempts: 3},
				GaveUpFunc: gave.Func})
			if err != nil {
				t.Fatal(err)
			}
			pr := testPR(t, tc.inst)
			_, task := plannedFile(t, st, pr, jobs.KindSummary)
			runs := 0
			for ; runs < 10; runs++ {
				err := w.ProcessTask(ctx, task)
				if err == nil {
					break
				}
				if workers.IsFailure(err) {
					t.Fatalf("run %d: %v, want back to admission (no failure)", runs+1, err)
				}
			}
			if runs+1 != 3 {
				t.Fatalf("the job ran %d times (11 means it never ended), want 3: its budget", runs+1)
			}
			results, err := st.Results(ctx, pr, "h1")
			if err != nil {
				t.Fatal(err)
			}
			if len(results) != 1 || !results[0].Failed {
				t.Fatalf("results %+v, want one failed result", results)
			}
			r := results[0]
			if !strings.HasPrefix(r.Skipped, "gave up after 3 attempts over ") || !strings.HasSuffix(r.Skipped, tc.wantText) {
				t.Errorf("reason %q, want \"gave up after 3 attempts over …: %s\"", r.Skipped, tc.wantText)
			}
			if strings.Contains(r.Skipped, "provider says no") {
				t.Errorf("reason %q carries the provider's words", r.Skipped)
			}
			if got := q.Tasks(); len(got) != 1 || got[0] != jobs.TypeFinalize {
				t.Errorf("enqueued %q, want the head's finalize", got)
			}
			if got, want := gave.Seen(), []string{"summary " + tc.wantReason}; !slices.Equal(got, want) {
				t.Errorf("gave up %q, want %q", got, want)
			}
			if got := len(adm.Events("register")); got != 2 {
				t.Errorf("back to admission %d times, want 2 (not after giving up)", got)
			}
			if got := len(adm.Events("pause")); got != tc.wantPauses {
				t.Errorf("paused the model %d times, want %d", got, tc.wantPauses)
			}
			if model.Calls() != 3 {
				t.Errorf("%d LLM calls, want 3", model.Calls())
			}
		})
	}
}

// The age budget runs from when the job was planned, on the injected
// clock: a job planned two hours ago whose provider still refuses gives
// up at its next run, however few attempts it made.
func TestFileJobGivesUpAfterItsAge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, adm, q, model := newStore(t), &fakeAdmission{}, &fakeQueue{}, &fakeLLM{CompleteFunc: fail(llm.ErrRateLimited)}
	clk := &clock{now: time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)}
	gave := &gaveUp{}
	w, err := workers.NewFileWorker(workers.FileWorkerConfig{Store: st, Ledger: adm, Caller: newCaller(t, adm, model, nil, nil), Queue: q,
		Models: testModels, Repairs: st, Requeue: adm, Attempts: newAttempts(t), Budget: workers.RetryBudget{MaxAttempts: 100, MaxAge: time.Hour},
		GaveUpFunc: gave.Func, NowFunc: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	pr := testPR(t, 603)
	f, _ := plannedFile(t, st, pr, jobs.KindSummary)
	f.Created = clk.Now().Add(-10 * time.Minute).UnixMilli()
	task := fileTaskOf(f)
	if err := w.ProcessTask(ctx, task); err == nil || workers.IsFailure(err) {
		t.Fatalf("first run = %v, want back to admission", err)
	}
	clk.Add(50 * time.Minute) // an hour since planned
	if err := w.ProcessTask(ctx, task); err != nil {
		t.Fatalf("run past the age budget = %v, want the job ended", err)
	}
	results, err := st.Results(ctx, pr, "h1")
	if err != nil {
		t.Fatal(err)
	}
	want := "gave up after 2 attempts over 1h0m0s: the provider kept refusing (rate limited)"
	if len(results) != 1 || results[0].Skipped != want || !results[0].Failed {
		t.Fatalf("results %+v, want one failed %q", results, want)
	}
	if got := q.Tasks(); len(got) != 1 || got[0] != jobs.TypeFinalize {
		t.Errorf("enqueued %q, want the head's finalize", got)
	}
	if got, want := gave.Seen(), []string{"summary rate_limited"}; !slices.Equal(got, want) {
		t.Errorf("gave up %q, want %q", got, want)
	}
}

// GitHub rate limiting a finalize forever: each wait is no failure (so
// asynq's retry count never grows), yet after its budget the job is
// archived (SkipRetry) with the reason, and counted.
func TestFinalizeGivesUpOnGitHubRateLimits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, gh := newStore(t), github()
	gh.UpsertCommentFunc = func(int64, string) (int64, error) {
		return 0, &ghapp.RateLimitedError{RetryAfter: time.Millisecond}
	}
	gave := &gaveUp{}
	pacer := newPacer(t)
	fin, err := workers.NewFinalizer(workers.FinalizerConfig{Results: st, Publications: st, GitHub: gh, Turns: pacer,
		Attempts: newAttempts(t), Budget: workers.RetryBudget{MaxAttempts: 3}, GaveUpFunc: gave.Func})
	if err != nil {
		t.Fatal(err)
	}
	task := finishedRun(t, st, testPR(t, 604))
	var last error
	runs := 0
	for ; runs < 10; runs++ {
		last = fin.ProcessTask(ctx, task)
		if last == nil || errors.Is(last, asynq.SkipRetry) {
			break
		}
		var ra *workers.RetryAfterError
		if !errors.As(last, &ra) || workers.IsFailure(last) {
			t.Fatalf("run %d = %v, want a rate-limit wait (no failure)", runs+1, last)
		}
	}
	if runs+1 != 3 || !errors.Is(last, asynq.SkipRetry) {
		t.Fatalf("run %d = %v; want archived (SkipRetry) at run 3", runs+1, last)
	}
	if !strings.Contains(last.Error(), "gave up after 3 attempts over ") || !strings.Contains(last.Error(), "GitHub kept rate limiting") {
		t.Errorf("archived with %q, want the reason", last)
	}
	if got, want := gave.Seen(), []string{"finalize github_rate_limited"}; !slices.Equal(got, want) {
		t.Errorf("gave up %q, want %q", got, want)
	}
}

// A chat reply whose provider refuses the account gives up within the
// chat budget: one short apology with the generic reason, nothing of
// the provider's words, and no return to admission after it.
func TestChatGivesUpOnARevokedKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, adm, model := newStore(t), &fakeAdmission{}, &fakeLLM{CompleteFunc: fail(llm.ErrAccount)}
	gh := &fakeGitHub{ReplyFunc: posted(91), CommentFunc: func(string) (int64, error) { return 92, nil }}
	gave := &gaveUp{}
	r, err := workers.NewChatResponder(workers.ChatResponderConfig{Replies: st, Drafts: st, Ledger: adm, Requeue: adm,
		Caller: newCaller(t, adm, model, nil, nil), GitHub: gh, Turns: newPacer(t), Models: testModels,
		Attempts: newAttempts(t), Budget: workers.RetryBudget{MaxAttempts: 2}, GaveUpFunc: gave.Func})
	if err != nil {
		t.Fatal(err)
	}
	_, task := chatTask(testPR(t, 605), false)
	runs := 0
	for ; runs < 10; runs++ {
		if err := r.ProcessTask(ctx, task); err == nil {
			break
		} else if workers.IsFailure(err) {
			t.Fatalf("run %d = %v, want back to admission", runs+1, err)
		}
	}
	if runs+1 != 2 {
		t.Fatalf("the reply ran %d times (11 means it never ended), want 2", runs+1)
	}
	w := gh.Writes()
	if len(w) != 1 || !strings.HasPrefix(w[0], "comment @dev Sorry, I can't answer right now: gave up after 2 attempts over ") ||
		!strings.Contains(w[0], "account problem") || strings.Contains(w[0], "provider says no") {
		t.Errorf("writes %q, want one generic apology", w)
	}
	if got := len(adm.Events("register")); got != 1 {
		t.Errorf("back to admission %d times, want 1", got)
	}
	if got, want := gave.Seen(), []string{"chat account"}; !slices.Equal(got, want) {
		t.Errorf("gave up %q, want %q", got, want)
	}
}

// Attempts count every run of a job id, keep the first run's time, and
// start afresh once forgotten.
func TestAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Shared(t).Client(t)
	a := workers.NewAttempts(rdb)
	id := "summary-" + strings.ReplaceAll(t.Name(), "/", "-")
	// the count record's key (the record's name as its hash tag)
	count := func(id string) string { return "{prq:attempts:" + id + "}:n" }
	t0 := time.UnixMilli(1_700_000_000_000)
	for i := 1; i <= 3; i++ {
		c, err := a.Add(ctx, id, t0.Add(time.Duration(i)*time.Minute), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if want := (workers.Count{N: i, First: t0.Add(time.Minute), Fresh: i == 1}); c != want {
			t.Fatalf("run %d: %+v, want %+v", i, c, want)
		}
	}
	if err := a.Forget(ctx, id); err != nil {
		t.Fatal(err)
	}
	c, err := a.Add(ctx, id, t0.Add(time.Hour), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if want := (workers.Count{N: 1, First: t0.Add(time.Hour), Fresh: true}); c != want {
		t.Errorf("after Forget: %+v, want a fresh count %+v", c, want)
	}
	// a rebase (a wait for the quota) starts the budget again from its time
	reset := t0.Add(48 * time.Hour)
	if err := a.Rebase(ctx, id, reset, time.Hour); err != nil {
		t.Fatal(err)
	}
	c, err = a.Add(ctx, id, reset.Add(time.Second), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if want := (workers.Count{N: 1, First: reset, Rebased: true}); c != want {
		t.Errorf("after Rebase: %+v, want %+v", c, want)
	}
	if ttl := rdb.PTTL(ctx, count(id)).Val(); ttl <= 59*time.Minute || ttl > time.Hour {
		t.Errorf("the count lasts %s, want the hour Add was given", ttl)
	}
	// a job that moved to a fallback before its first run: the move
	// stays, and the first run is this one
	moved := id + "-moved"
	if err := a.SetMoved(ctx, moved, workers.Move{Model: "fallback", Tokens: 10}, time.Hour); err != nil {
		t.Fatal(err)
	}
	c, err = a.Add(ctx, moved, t0, time.Hour)
	if want := (workers.Count{N: 1, First: t0, Fresh: true}); err != nil || c != want {
		t.Errorf("a moved job's first run: %+v (%v), want %+v", c, err, want)
	}
	if mv, err := a.Moved(ctx, moved); err != nil || mv.Model != "fallback" || mv.Tokens != 10 {
		t.Errorf("the move after the first run: %+v (%v)", mv, err)
	}
	// a later run renews the move with the count
	rdb.PExpire(ctx, "prq:attempts:"+moved, time.Minute)
	if _, err := a.Add(ctx, moved, t0.Add(time.Second), time.Hour); err != nil {
		t.Fatal(err)
	}
	if ttl := rdb.PTTL(ctx, "prq:attempts:"+moved).Val(); ttl <= 59*time.Minute || ttl > time.Hour {
		t.Errorf("after a later run the move lasts %s, want the hour Add was given", ttl)
	}
	// a count with no first run kept (a twin's wait before any run):
	// this run is the first, and later runs read it
	partial := id + "-partial"
	rdb.Set(ctx, count(partial), "n=3", time.Hour)
	for i, at := range []time.Time{t0, t0.Add(time.Minute)} {
		c, err = a.Add(ctx, partial, at, time.Hour)
		if want := (workers.Count{N: 4 + i, First: t0}); err != nil || c != want {
			t.Errorf("run %d of a count with no first run: %+v (%v), want %+v", i, c, err, want)
		}
	}
	if ttl := rdb.PTTL(ctx, count(partial)).Val(); ttl <= 59*time.Minute || ttl > time.Hour {
		t.Errorf("after a later run the count lasts %s, want the hour Add was given", ttl)
	}
	// a record Redis cannot read as a count is an error, not a run
	bad := id + "-bad"
	rdb.Set(ctx, count(bad), "n=2 first=yesterday", time.Hour)
	if _, err := a.Add(ctx, bad, t0, time.Hour); err == nil {
		t.Error("an unreadable first run's time: no error")
	}
}

// Bad budgets are refused by name.
func TestRetryBudgetValidated(t *testing.T) {
	t.Parallel()
	_, err := workers.NewFinalizer(workers.FinalizerConfig{Results: newStore(t), Publications: newStore(t), GitHub: github(), Turns: newPacer(t),
		Attempts: newAttempts(t), Budget: workers.RetryBudget{MaxAttempts: -1}})
	if err == nil || !strings.Contains(err.Error(), "Budget") {
		t.Errorf("NewFinalizer with a negative budget = %v, want an error naming Budget", err)
	}
}

// A plan job carries no planned time: its age runs from its first run,
// recorded in Redis. GitHub rate limiting it forever ends it once that
// age passes the budget, on the injected clock, however few attempts.
func TestPlanGivesUpAfterItsAge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, adm, q := newStore(t), &fakeAdmission{}, &fakeQueue{}
	gh := &fakeGitHub{PRFunc: func() (ghapp.PullRequest, error) {
		return ghapp.PullRequest{}, &ghapp.RateLimitedError{RetryAfter: time.Minute}
	}}
	clk := &clock{now: time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)}
	gave := &gaveUp{}
	p, err := workers.NewPlanner(workers.PlannerConfig{Attempts: newAttempts(t), Store: st, Plans: st, Tickets: adm, GitHub: gh, Queue: q,
		Models: testModels, SummaryModel: "gpt-4o-mini", ReviewModel: "gpt-4o",
		Budget: workers.RetryBudget{MaxAttempts: 100, MaxAge: 24 * time.Hour}, GaveUpFunc: gave.Func, NowFunc: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	task := planTask(testPR(t, 606), "h1", "opened", jobs.TierPaid)
	for _, step := range []time.Duration{0, 12 * time.Hour, 11 * time.Hour} {
		clk.Add(step)
		err := p.ProcessTask(ctx, task)
		var ra *workers.RetryAfterError
		if !errors.As(err, &ra) || workers.IsFailure(err) || errors.Is(err, asynq.SkipRetry) {
			t.Fatalf("at +%s: %v, want a rate-limit wait within the budget", step, err)
		}
	}
	clk.Add(time.Hour) // 24h since its first run
	err = p.ProcessTask(ctx, task)
	if !errors.Is(err, asynq.SkipRetry) || !strings.Contains(err.Error(), "gave up after 4 attempts over 24h0m0s: GitHub kept rate limiting") {
		t.Fatalf("past the age budget: %v, want archived with the reason", err)
	}
	if got, want := gave.Seen(), []string{"plan github_rate_limited"}; !slices.Equal(got, want) {
		t.Errorf("gave up %q, want %q", got, want)
	}
}
