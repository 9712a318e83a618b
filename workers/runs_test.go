package workers_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
	"github.com/prq-dev/prq/workers"
)

// failingQueue is a real asynq client whose enqueues fail while down
// (Redis refused the write, or the process died between the two steps).
type failingQueue struct {
	*asynq.Client
	down bool
}

func (q *failingQueue) EnqueueContext(ctx context.Context, task *asynq.Task, opts ...asynq.Option) (*asynq.TaskInfo, error) {
	if q.down {
		return nil, errors.New("redis: connection reset")
	}
	return q.Client.EnqueueContext(ctx, task, opts...)
}

func finalizeExists(t *testing.T, insp *asynq.Inspector, pr jobs.PR, head string) bool {
	t.Helper()
	prefix := jobs.FinalizeTaskID(jobs.Finalize{PR: pr, HeadSHA: head}) // a run's finalize id adds "-r<run>"
	for _, list := range []func(string, ...asynq.ListOption) ([]*asynq.TaskInfo, error){insp.ListPendingTasks, insp.ListScheduledTasks, insp.ListRetryTasks, insp.ListCompletedTasks} {
		tasks, err := list(jobs.TierPaid.Queue())
		if err != nil && !errors.Is(err, asynq.ErrQueueNotFound) {
			t.Fatal(err)
		}
		for _, ti := range tasks {
			if ti.ID == prefix || strings.HasPrefix(ti.ID, prefix+"-r") {
				return true
			}
		}
	}
	return false
}

// TestFileRetryAfterFailedFinalizeEnqueue: the last file's result is
// recorded, then enqueuing finalize fails. The retried job must make no
// second LLM call and must enqueue finalize (before: it called the LLM
// again, the completion script saw a duplicate, and the run never
// finalized).
func TestFileRetryAfterFailedFinalizeEnqueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Shared(t).Client(t)
	st, adm, model := newStore(t), &fakeAdmission{}, &fakeLLM{CompleteFunc: answer("Adds b.")}
	client := asynq.NewClientFromRedisClient(rdb)
	insp := asynq.NewInspectorFromRedisClient(rdb)
	q := &failingQueue{Client: client, down: true}
	pr := testPR(t, 221)
	_, task := plannedFile(t, st, pr, jobs.KindSummary)
	w, err := workers.NewFileWorker(workers.FileWorkerConfig{Attempts: newAttempts(t), Store: st, Ledger: adm, Caller: newCaller(t, adm, model, nil, nil),
		Queue: q, Models: testModels, Repairs: st, Requeue: adm})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.ProcessTask(ctx, task); err == nil {
		t.Fatal("ProcessTask succeeded although finalize could not be enqueued")
	}
	q.down = false
	if err := w.ProcessTask(ctx, task); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if model.Calls() != 1 {
		t.Errorf("%d LLM calls, want 1: the retry found its result recorded", model.Calls())
	}
	if !finalizeExists(t, insp, pr, "h1") {
		t.Error("no finalize job after the retry: the run would stay running forever")
	}
}

// TestRunReconciler: a run whose files are all done but whose finalize
// was never enqueued (a crash between the two steps) is finalized; a run
// running past the bound is surfaced once and finalized with what it has.
func TestRunReconciler(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Shared(t).Client(t)
	st := newStore(t)
	client := asynq.NewClientFromRedisClient(rdb)
	insp := asynq.NewInspectorFromRedisClient(rdb)
	now := time.Now()
	st.NowFunc = func() time.Time { return now }
	done := jobs.PR{Installation: 231, Owner: "o", Repo: "done", Number: 1}
	stuck := jobs.PR{Installation: 231, Owner: "o", Repo: "stuck", Number: 2}
	fresh := jobs.PR{Installation: 231, Owner: "o", Repo: "fresh", Number: 3}
	// waiting: a job waits for the tenant's quota, which resets in 90 min
	waiting := jobs.PR{Installation: 231, Owner: "o", Repo: "waiting", Number: 4}
	for _, pr := range []jobs.PR{done, stuck, fresh, waiting} {
		files := []store.FileData{{Path: "a.go", Index: 0}, {Path: "b.go", Index: 1}}
		if _, _, err := st.StartRun(ctx, store.Run{PR: pr, Head: "h1", Tier: jobs.TierPaid, SummaryTotal: 2}, files); err != nil {
			t.Fatal(err)
		}
	}
	// done: both files recorded, and the process died before enqueuing finalize
	for i, p := range []string{"a.go", "b.go"} {
		if _, err := st.CompleteFile(ctx, done, "h1", store.Result{Kind: jobs.KindSummary, Index: i, Path: p, Text: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.SetWaiting(ctx, waiting, "h1", now.Add(90*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := st.SetWaiting(ctx, waiting, "h0", now.Add(900*time.Minute)); err != nil { // another head's: ignored
		t.Fatal(err)
	}
	// stuck, fresh and waiting: one file of two
	for _, pr := range []jobs.PR{stuck, fresh, waiting} {
		if _, err := st.CompleteFile(ctx, pr, "h1", store.Result{Kind: jobs.KindSummary, Index: 0, Path: "a.go", Text: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	counts := map[string]int{}
	clock := now
	rec, err := workers.NewRunReconciler(workers.RunReconcilerConfig{Store: st, Queue: client, Grace: time.Minute, StuckAfter: time.Hour,
		NowFunc: func() time.Time { return clock }, CountFunc: func(event, reason string) { counts[event+"|"+reason]++ }})
	if err != nil {
		t.Fatal(err)
	}
	// within the grace, the last file's own job is still enqueueing finalize
	if got, err := rec.Reconcile(ctx); err != nil || got != (workers.Reconciled{}) {
		t.Fatalf("within the grace: %+v %v, want nothing done", got, err)
	}
	clock = now.Add(2 * time.Minute)
	if got, err := rec.Reconcile(ctx); err != nil || got != (workers.Reconciled{Finalized: 1}) {
		t.Fatalf("after the grace: %+v %v, want the done run finalized", got, err)
	}
	if !finalizeExists(t, insp, done, "h1") || finalizeExists(t, insp, stuck, "h1") {
		t.Fatal("want a finalize job for the done run only")
	}
	// a second pass (or another process) finds its finalize there already
	if got, err := rec.Reconcile(ctx); err != nil || got != (workers.Reconciled{}) {
		t.Fatalf("second pass: %+v %v, want nothing", got, err)
	}
	// fresh is replanned later: only stuck passes the bound
	clock = now.Add(2 * time.Hour)
	st.NowFunc = func() time.Time { return clock }
	if _, _, err := st.StartRun(ctx, store.Run{PR: fresh, Head: "h3", Tier: jobs.TierPaid, SummaryTotal: 1}, []store.FileData{{Path: "a.go"}}); err != nil {
		t.Fatal(err)
	}
	got, err := rec.Reconcile(ctx)
	if err != nil || got.Stuck != 2 {
		// done's finalize never ran (no worker here) and stuck lacks a
		// file; waiting's bound counts from the quota's reset
		t.Fatalf("past the bound: %+v %v, want two stuck runs surfaced", got, err)
	}
	if !finalizeExists(t, insp, stuck, "h1") {
		t.Error("the stuck run was not finalized with what it has")
	}
	if got, err := rec.Reconcile(ctx); err != nil || got.Stuck != 0 {
		t.Fatalf("a stuck run is surfaced once: %+v %v", got, err)
	}
	want := map[string]int{"run_finalized|all_done": 1, "run_stuck|files": 1, "run_stuck|finalize": 1}
	for k, n := range want {
		if counts[k] != n {
			t.Errorf("counted %v, want %v", counts, want)
			break
		}
	}
}
