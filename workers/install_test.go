package workers_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/prq-dev/prq/ghapp"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
	"github.com/prq-dev/prq/workers"
)

// TestCancelInstallation: uninstalling (or suspending) cancels every run
// in progress of the installation through admission, and nothing of
// another; removing repositories cancels only theirs.
func TestCancelInstallation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, adm := newStore(t), &fakeAdmission{models: []string{"gpt-4o-mini"}}
	e := newEnqueuer(t, &fakeQueue{}, adm, st)
	prs := []jobs.PR{
		{Installation: 601, Owner: "acme", Repo: "api", Number: 1},
		{Installation: 601, Owner: "acme", Repo: "web", Number: 2},
		{Installation: 602, Owner: "beta", Repo: "api", Number: 1},
	}
	for i, pr := range prs {
		if _, _, err := st.StartRun(ctx, store.Run{PR: pr, Head: "h1", Tier: jobs.TierPaid, SummaryTotal: 1}, nil); err != nil {
			t.Fatal(err)
		}
		if err := st.SetTaskIDs(ctx, pr, "h1", []string{fmt.Sprintf("summary-%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := e.CancelInstallation(ctx, 601, []string{"WEB"}); err != nil || n != 1 {
		t.Fatalf("repositories removed: %d runs cancelled (%v), want 1", n, err)
	}
	if n, err := e.CancelInstallation(ctx, 601, nil); err != nil || n != 1 {
		t.Fatalf("uninstalled: %d runs cancelled (%v), want the 1 left", n, err)
	}
	if got := adm.Events("cancel"); len(got) != 2 || got[0] != "cancel gpt-4o-mini summary-1" || got[1] != "cancel gpt-4o-mini summary-0" {
		t.Errorf("admission cancels %q, want the installation's two tickets", got)
	}
	for i, pr := range prs {
		cur, err := st.Current(ctx, pr, "h1")
		if err != nil || cur != (i == 2) {
			t.Errorf("%s current=%v (%v)", pr, cur, err)
		}
	}
}

// TestDisabledInstallationsJobsMakeNoCall: a job of an uninstalled
// installation vanishes without a call and refunds its reservation; the
// installation created again runs it.
func TestDisabledInstallationsJobsMakeNoCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, adm, q, model := newStore(t), &fakeAdmission{}, &fakeQueue{}, &fakeLLM{CompleteFunc: answer("Adds b.")}
	pr := testPR(t, 603)
	f, task := plannedFile(t, st, pr, jobs.KindSummary)
	var mu sync.Mutex
	counts := map[string]int{}
	w, err := workers.NewFileWorker(workers.FileWorkerConfig{Attempts: newAttempts(t), Store: st, Ledger: adm, Caller: newCaller(t, adm, model, nil, nil),
		Queue: q, Models: testModels, Repairs: st, Requeue: adm, Installs: st,
		LifecycleFunc: func(event, reason string) { mu.Lock(); counts[event+"|"+reason]++; mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SetInstallation(ctx, 603, "acme", 0, "deleted"); err != nil {
		t.Fatal(err)
	}
	if err := w.ProcessTask(ctx, task); !errors.Is(err, asynq.RevokeTask) {
		t.Fatalf("ProcessTask = %v, want the job dropped", err)
	}
	if model.Calls() != 0 || counts["job_skipped|deleted"] != 1 {
		t.Fatalf("%d calls, counts %v: want none and job_skipped|deleted once", model.Calls(), counts)
	}
	if got := adm.Events("settle"); len(got) != 1 || got[0] != "settle "+jobs.FileTaskID(f)+" 0" {
		t.Errorf("settled %q, want the reservation refunded", got)
	}
	if err := st.SetInstallation(ctx, 603, "acme", 0, "created"); err != nil {
		t.Fatal(err)
	}
	if err := w.ProcessTask(ctx, task); err != nil || model.Calls() != 1 {
		t.Fatalf("reinstalled: %v, %d calls; want the job to run", err, model.Calls())
	}
}

// TestInstallationGateComesFirst: the gate's verdict counts before the
// run's, though one read carries both: a job of a deleted installation
// whose run the uninstall cancelled is dropped as the installation's
// (job_skipped), not as a stale head's. And an InstallState of the
// embedder's own is asked, not bypassed for the store's record.
func TestInstallationGateComesFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for i, installs := range []workers.InstallState{nil, suspendedAll{}} {
		st, adm, model := newStore(t), &fakeAdmission{}, &fakeLLM{CompleteFunc: answer("Adds b.")}
		pr := testPR(t, int64(604+i))
		_, task := plannedFile(t, st, pr, jobs.KindSummary)
		want := "job_skipped|" + store.DisabledSuspended
		if installs == nil {
			installs, want = st, "job_skipped|"+store.DisabledDeleted
			if err := st.SetInstallation(ctx, pr.Installation, "acme", 0, "deleted"); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Cancel(ctx, pr); err != nil {
				t.Fatal(err)
			}
		}
		var mu sync.Mutex
		counts := map[string]int{}
		w, err := workers.NewFileWorker(workers.FileWorkerConfig{Attempts: newAttempts(t), Store: st, Ledger: adm, Caller: newCaller(t, adm, model, nil, nil),
			Queue: &fakeQueue{}, Models: testModels, Repairs: st, Requeue: adm, Installs: installs,
			LifecycleFunc: func(event, reason string) { mu.Lock(); counts[event+"|"+reason]++; mu.Unlock() }})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.ProcessTask(ctx, task); !errors.Is(err, asynq.RevokeTask) || model.Calls() != 0 || counts[want] != 1 {
			t.Fatalf("ProcessTask = %v, %d calls, counts %v: want the job dropped with no call, %s once", err, model.Calls(), counts, want)
		}
	}
}

// suspendedAll is an embedder's InstallState: every installation
// suspended, whatever the store's record says.
type suspendedAll struct{}

func (suspendedAll) Disabled(context.Context, int64) (string, error) {
	return store.DisabledSuspended, nil
}
func (suspendedAll) MarkTokenRefused(context.Context, int64, string) error { return nil }

// TestTokenRefusedIsPermanentForTheInstallation: GitHub refusing the
// installation a token (404 uninstalled, 403 suspended) ends the job at
// once and marks the installation, whose next jobs ask GitHub nothing
// (before: retried 10 to 20 times as transient, each job). Unsuspending
// clears the mark.
func TestTokenRefusedIsPermanentForTheInstallation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, adm, q := newStore(t), &fakeAdmission{}, &fakeQueue{}
	var mu sync.Mutex
	asked := 0
	refused := true
	gh := &fakeGitHub{FilesFunc: threeFiles, PRFunc: func() (ghapp.PullRequest, error) {
		mu.Lock()
		defer mu.Unlock()
		asked++
		if refused {
			return ghapp.PullRequest{}, fmt.Errorf("get pull request: %w", &ghapp.InstallationRefusedError{Installation: 604, Status: 403})
		}
		return openPR("h1")()
	}}
	counts := map[string]int{}
	p, err := workers.NewPlanner(workers.PlannerConfig{Attempts: newAttempts(t), Store: st, Plans: st, Tickets: adm, GitHub: gh, Queue: q,
		Models: testModels, SummaryModel: "gpt-4o-mini", ReviewModel: "gpt-4o", Tiers: map[jobs.Tier]workers.TierSpec{jobs.TierPaid: {Review: true}},
		Installs: st, LifecycleFunc: func(event, reason string) { counts[event+"|"+reason]++ }})
	if err != nil {
		t.Fatal(err)
	}
	pr := testPR(t, 604)
	for i := 0; i < 2; i++ {
		if err := p.ProcessTask(ctx, planTask(pr, "h1", "opened", jobs.TierPaid)); !errors.Is(err, asynq.RevokeTask) {
			t.Fatalf("plan %d: %v, want the job dropped", i+1, err)
		}
	}
	if why, err := st.Disabled(ctx, 604); err != nil || why != store.DisabledTokenRefused {
		t.Fatalf("installation state %q (%v), want %q", why, err, store.DisabledTokenRefused)
	}
	if asked != 1 || counts["job_skipped|token_refused"] != 2 {
		t.Fatalf("GitHub asked %d times, counts %v: want once, and both jobs counted", asked, counts)
	}
	refused = false
	if err := st.SetInstallation(ctx, 604, "acme", 0, "unsuspend"); err != nil {
		t.Fatal(err)
	}
	if err := p.ProcessTask(ctx, planTask(pr, "h1", "opened", jobs.TierPaid)); err != nil {
		t.Fatalf("unsuspended: %v", err)
	}
	if got := adm.Events("submit"); len(got) != 5 {
		t.Errorf("submitted %q after unsuspend, want a summary and a review of both text files, and the walkthrough", got)
	}
}
