package workers_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/ratelimit"
	"github.com/prq-dev/prq/store"
	"github.com/prq-dev/prq/workers"
)

// A file whose tenant's quota is spent is not skipped: the job goes
// back to admission for the quota's reset (a second after it), the
// run and the check run learn when, the retry budget starts again at
// the reset, and the job, run again after the reset on a stepped
// clock, makes its call and records its result.
func TestFileWorkerWaitsForSpentQuota(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// the next hour's start: Redis expires the quota's keys a day after
	// their period, by its own clock, so the stepped one starts near it
	reset := time.Now().UTC().Truncate(time.Hour).Add(time.Hour)
	clk := &clock{now: reset.Add(-10 * time.Second)}
	rdb := redistest.Shared(t).Client(t)
	qu, err := ratelimit.NewQuota(rdb, ratelimit.QuotaConfig{Period: ratelimit.Hour, Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	const inst, limit = 231, 1000
	// another job of the tenant spent the hour's quota but 5 tokens
	if _, err := qu.Reserve(ctx, strconv.Itoa(inst), "", "earlier-"+t.Name(), limit, limit-5, 0); err != nil {
		t.Fatal(err)
	}
	st, q, model := newStore(t), &fakeQueue{}, &fakeLLM{CompleteFunc: answer("Adds b.")}
	var mu sync.Mutex
	var registered []time.Time
	adm := &fakeAdmission{RegisterAtFunc: func(_ admission.Ticket, at time.Time) error {
		mu.Lock()
		defer mu.Unlock()
		registered = append(registered, at)
		return nil
	}}
	var waits []time.Time
	caller := newCaller(t, adm, model, qu, map[jobs.Tier]workers.TierSpec{jobs.TierPaid: {QuotaTokens: limit}})
	attempts := newAttempts(t)
	w, err := workers.NewFileWorker(workers.FileWorkerConfig{Attempts: attempts, Store: st, Ledger: adm, Caller: caller, Queue: q, Models: testModels,
		Repairs: st, Requeue: adm, NowFunc: clk.Now, Budget: workers.RetryBudget{MaxAttempts: 5, MaxAge: time.Minute},
		QuotaWait: func(_ context.Context, _ jobs.PR, head string, until time.Time) {
			mu.Lock()
			defer mu.Unlock()
			waits = append(waits, until)
		}})
	if err != nil {
		t.Fatal(err)
	}
	pr := testPR(t, inst)
	f, task := plannedFile(t, st, pr, jobs.KindSummary)
	id := jobs.FileTaskID(f)

	err = w.ProcessTask(ctx, task)
	if err == nil || workers.IsFailure(err) {
		t.Fatalf("ProcessTask = %v, want the job held again (no failure)", err)
	}
	if model.Calls() != 0 {
		t.Errorf("%d calls with the quota spent, want none", model.Calls())
	}
	if got := adm.Events("settle"); len(got) != 1 || !strings.HasSuffix(got[0], " 0") {
		t.Errorf("settled %q, want the whole reservation refunded", got)
	}
	mu.Lock()
	if len(registered) != 1 || !registered[0].Equal(reset.Add(time.Second)) {
		t.Errorf("registered again at %v, want once at the reset and a second (%v)", registered, reset.Add(time.Second))
	}
	if len(waits) != 1 || !waits[0].Equal(reset) {
		t.Errorf("the check run was told %v, want the reset %v", waits, reset)
	}
	mu.Unlock()
	if results, err := st.Results(ctx, pr, "h1"); err != nil || len(results) != 0 {
		t.Errorf("results %+v (%v), want none: the file waits, it is not skipped", results, err)
	}
	run, err := st.GetRun(ctx, pr)
	if err != nil || !run.WaitingUntil.Equal(reset) || run.SkippedQuota != 0 {
		t.Errorf("run waiting until %v, %d skipped for quota (%v); want %v and none", run.WaitingUntil, run.SkippedQuota, err, reset)
	}

	// after the reset, and past the budget's age counted from the first
	// run: the budget counts from the reset, and the call is made
	clk.Add(75 * time.Second)
	if c, err := attempts.Add(ctx, id, clk.Now(), time.Hour); err != nil || !c.Rebased || !c.First.Equal(reset) {
		t.Errorf("the retry budget counts from %v (rebased %v, %v), want the reset %v", c.First, c.Rebased, err, reset)
	}
	if err := w.ProcessTask(ctx, task); err != nil {
		t.Fatalf("ProcessTask after the reset: %v", err)
	}
	if model.Calls() != 1 {
		t.Errorf("%d calls after the reset, want 1", model.Calls())
	}
	results, err := st.Results(ctx, pr, "h1")
	if err != nil || len(results) != 1 || results[0].Text != "Adds b." || results[0].Skipped != "" {
		t.Fatalf("results %+v (%v), want the summary", results, err)
	}
	if u, err := qu.Used(ctx, strconv.Itoa(inst), "", limit); err != nil || u.Used == 0 || u.Used > limit {
		t.Errorf("the new hour's quota used %d (%v), want the call's tokens, within the limit", u.Used, err)
	}
}

// With quota.when_spent: skip, the file is skipped without a call or a
// wait.
func TestSpentQuotaSkip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	qu, err := ratelimit.NewQuota(redistest.Shared(t).Client(t), ratelimit.QuotaConfig{})
	if err != nil {
		t.Fatal(err)
	}
	st, adm, q, model := newStore(t), &fakeAdmission{}, &fakeQueue{}, &fakeLLM{CompleteFunc: answer("never")}
	caller, err := workers.NewCaller(workers.CallerConfig{LLM: model, Ledger: adm, Requeue: adm, Provider: adm, Quota: qu, QuotaSkip: true,
		Tiers: map[jobs.Tier]workers.TierSpec{jobs.TierPaid: {QuotaTokens: 10}}})
	if err != nil {
		t.Fatal(err)
	}
	pr := testPR(t, 232)
	_, task := plannedFile(t, st, pr, jobs.KindSummary)
	w := newFileWorker(t, st, adm, caller, q, nil)
	if err := w.ProcessTask(ctx, task); err != nil {
		t.Fatal(err)
	}
	results, err := st.Results(ctx, pr, "h1")
	if err != nil || len(results) != 1 || !strings.HasPrefix(results[0].Skipped, "skipped: quota reached") || model.Calls() != 0 {
		t.Fatalf("results %+v (%v), %d calls: want the file skipped for the quota, no call", results, err, model.Calls())
	}
	if got := adm.Events("register"); len(got) != 0 {
		t.Errorf("registered %q, want none: skip does not wait", got)
	}
}

// The check run of a head waiting for the quota says until when (once
// per reset time), and a head whose files were skipped for the quota
// completes neutral, never green.
func TestCheckRunQuotaWaitAndSkip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newStore(t)
	pr := testPR(t, 233)
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
	if _, _, err := st.StartRun(ctx, store.Run{PR: pr, Head: "h1", Tier: jobs.TierPaid, SummaryTotal: 1},
		[]store.FileData{{Path: "a.go", Status: "modified", Patch: patchA}}); err != nil {
		t.Fatal(err)
	}
	checks.Queued(ctx, pr, "h1", 1, "", time.Time{})
	reset := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	checks.QuotaWait(ctx, pr, "h1", reset)
	checks.QuotaWait(ctx, pr, "h1", reset) // the same state: not written again
	cs := rig.fake.CheckRuns(pr.Owner, pr.Repo, "h1")
	if len(cs) != 1 || cs[0].Status != "queued" || cs[0].Title != "Waiting for the quota: resumes 2026-12-04 00:00 UTC" || len(cs[0].History) != 2 ||
		!strings.Contains(cs[0].Summary, "resumes by itself when the quota resets, at 2026-12-04 00:00 UTC") {
		t.Fatalf("check runs %+v, want one queued, saying when the quota resets, written twice (queued, waiting)", cs)
	}
	if _, err := st.CompleteFile(ctx, pr, "h1", store.Result{Kind: jobs.KindSummary, Path: "a.go", Skipped: "skipped: quota reached, resets at 2026-12-04 00:00 UTC"}); err != nil {
		t.Fatal(err)
	}
	if err := fin.ProcessTask(ctx, asynq.NewTask(jobs.TypeFinalize, jobs.Marshal(jobs.Finalize{PR: pr, HeadSHA: "h1", Tier: jobs.TierPaid}))); err != nil {
		t.Fatal(err)
	}
	cs = rig.fake.CheckRuns(pr.Owner, pr.Repo, "h1")
	if len(cs) != 1 || cs[0].Status != "completed" || cs[0].Conclusion != "neutral" || cs[0].Title != "1 file skipped: the quota is spent" {
		t.Fatalf("check runs %+v, want one completed neutral: files skipped for the quota", cs)
	}
}

// A call that needs more than a whole period's quota is not held for a
// reset that can never let it through: it is recorded as failed at once.
func TestQuotaTooSmallNeverWaits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	qu, err := ratelimit.NewQuota(redistest.Shared(t).Client(t), ratelimit.QuotaConfig{})
	if err != nil {
		t.Fatal(err)
	}
	st, adm, q, model := newStore(t), &fakeAdmission{}, &fakeQueue{}, &fakeLLM{CompleteFunc: answer("never")}
	caller := newCaller(t, adm, model, qu, map[jobs.Tier]workers.TierSpec{jobs.TierPaid: {QuotaTokens: 10}})
	pr := testPR(t, 234)
	_, task := plannedFile(t, st, pr, jobs.KindSummary)
	w := newFileWorker(t, st, adm, caller, q, nil)
	if err := w.ProcessTask(ctx, task); err != nil {
		t.Fatal(err)
	}
	results, err := st.Results(ctx, pr, "h1")
	if err != nil || len(results) != 1 || !results[0].Failed || !strings.Contains(results[0].Skipped, "too large for the tier's quota") {
		t.Fatalf("results %+v (%v), want the file failed as too large for the quota", results, err)
	}
	if got := adm.Events("register"); len(got) != 0 || model.Calls() != 0 {
		t.Errorf("registered %q, %d calls: want no wait and no call", got, model.Calls())
	}
}
