package workers_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/prq-dev/prq/ghapp"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
	"github.com/prq-dev/prq/workers"
)

const patchA = "@@ -1,2 +1,3 @@\n a\n+b\n c"

func newPlanner(t *testing.T, st *store.Store, adm *fakeAdmission, gh *fakeGitHub, q *fakeQueue) *workers.Planner {
	t.Helper()
	p, err := workers.NewPlanner(workers.PlannerConfig{Attempts: newAttempts(t), Store: st, Plans: st, Tickets: adm, GitHub: gh, Queue: q,
		Models: testModels, SummaryModel: "gpt-4o-mini", ReviewModel: "gpt-4o",
		Tiers:   map[jobs.Tier]workers.TierSpec{jobs.TierPaid: {Review: true}, jobs.TierFree: {}},
		Exclude: []string{"go.sum"}, SkipBotPRs: true})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func planTask(pr jobs.PR, head, action string, tier jobs.Tier) *asynq.Task {
	return asynq.NewTask(jobs.TypePlan, jobs.Marshal(jobs.Plan{PR: pr, HeadSHA: head, Action: action, Delivery: "d-" + head, Tier: tier}))
}

func openPR(head string) func() (ghapp.PullRequest, error) {
	return func() (ghapp.PullRequest, error) {
		return ghapp.PullRequest{State: "open", HeadSHA: head, BaseSHA: "base", Title: "Add b", Author: "dev"}, nil
	}
}

func threeFiles() ([]ghapp.File, error) {
	return []ghapp.File{
		{Filename: "a.go", Status: "modified", Additions: 1, Patch: ptr(patchA)},
		{Filename: "go.sum", Status: "modified", Additions: 1, Patch: ptr(patchA)},
		{Filename: "logo.png", Status: "added"},
	}, nil
}

func TestPlanner(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		inst     int64
		tier     jobs.Tier
		pr       func() (ghapp.PullRequest, error)
		wantErr  func(error) bool
		submits  []string
		finalize bool
	}{
		{name: "paid tier: a summary and a review of the one reviewable file", inst: 101, tier: jobs.TierPaid, pr: openPR("h1"),
			submits: []string{"submit file:summary", "submit file:review"}},
		{name: "free tier: summaries only", inst: 102, tier: jobs.TierFree, pr: openPR("h1"),
			submits: []string{"submit file:summary"}},
		{name: "closed PR: nothing", inst: 103, tier: jobs.TierPaid, pr: func() (ghapp.PullRequest, error) {
			return ghapp.PullRequest{State: "closed", HeadSHA: "h1"}, nil
		}},
		{name: "head moved on: a newer event plans it", inst: 104, tier: jobs.TierPaid, pr: openPR("h2")},
		{name: "bot PR skipped", inst: 105, tier: jobs.TierPaid, pr: func() (ghapp.PullRequest, error) {
			return ghapp.PullRequest{State: "open", HeadSHA: "h1", AuthorIsBot: true, Author: "dependabot[bot]"}, nil
		}},
		{name: "PR gone: nothing, no retry", inst: 106, tier: jobs.TierPaid, pr: func() (ghapp.PullRequest, error) {
			return ghapp.PullRequest{}, ghapp.ErrNotFound
		}},
		{name: "GitHub rate limit: retried when told, not a failure", inst: 107, tier: jobs.TierPaid,
			pr: func() (ghapp.PullRequest, error) {
				return ghapp.PullRequest{}, &ghapp.RateLimitedError{RetryAfter: time.Minute}
			},
			wantErr: func(err error) bool {
				var ra *workers.RetryAfterError
				return errors.As(err, &ra) && ra.After == time.Minute && !workers.IsFailure(err)
			}},
		{name: "GitHub 5xx: retried as a failure", inst: 108, tier: jobs.TierPaid,
			pr: func() (ghapp.PullRequest, error) {
				return ghapp.PullRequest{}, &ghapp.TransientError{Err: errors.New("502")}
			},
			wantErr: func(err error) bool {
				var tr *ghapp.TransientError
				return errors.As(err, &tr) && workers.IsFailure(err)
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st, adm, q := newStore(t), &fakeAdmission{}, &fakeQueue{}
			gh := &fakeGitHub{PRFunc: tc.pr, FilesFunc: threeFiles}
			pr := testPR(t, tc.inst)
			err := newPlanner(t, st, adm, gh, q).ProcessTask(context.Background(), planTask(pr, "h1", "opened", tc.tier))
			if tc.wantErr == nil && err != nil || tc.wantErr != nil && !tc.wantErr(err) {
				t.Fatalf("ProcessTask: unexpected error %v", err)
			}
			subs := adm.Events("submit")
			if len(subs) != len(tc.submits) {
				t.Fatalf("submitted %q, want %d jobs", subs, len(tc.submits))
			}
			for i, want := range tc.submits {
				if got := subs[i][:len(want)]; got != want {
					t.Errorf("submit %d: %q, want %q…", i, subs[i], want)
				}
			}
			if len(tc.submits) > 0 {
				files, err := st.Files(context.Background(), pr, "h1")
				if err != nil {
					t.Fatal(err)
				}
				want := map[string]string{"a.go": "", "go.sum": "excluded by go.sum", "logo.png": "binary or too large for a patch"}
				for _, f := range files {
					if f.SkipReason != want[f.Path] {
						t.Errorf("%s: skip reason %q, want %q", f.Path, f.SkipReason, want[f.Path])
					}
				}
				ids, err := st.TaskIDs(context.Background(), pr, "h1")
				if err != nil || len(ids) != len(tc.submits) {
					t.Errorf("task ids %v (%v), want %d", ids, err, len(tc.submits))
				}
			}
			if got := len(q.Tasks()) > 0; got != tc.finalize {
				t.Errorf("finalize enqueued: %v, want %v", got, tc.finalize)
			}
		})
	}
}

func TestPlannerNothingToReviewFinalizesAtOnce(t *testing.T) {
	t.Parallel()
	st, adm, q := newStore(t), &fakeAdmission{}, &fakeQueue{}
	gh := &fakeGitHub{PRFunc: openPR("h1"), FilesFunc: func() ([]ghapp.File, error) {
		return []ghapp.File{{Filename: "go.sum", Status: "modified", Patch: ptr(patchA)}}, nil
	}}
	if err := newPlanner(t, st, adm, gh, q).ProcessTask(context.Background(), planTask(testPR(t, 111), "h1", "opened", jobs.TierPaid)); err != nil {
		t.Fatal(err)
	}
	if subs := adm.Events("submit"); len(subs) != 0 {
		t.Fatalf("submitted %q for an excluded file", subs)
	}
	if got := q.Tasks(); len(got) != 1 || got[0] != jobs.TypeFinalize {
		t.Fatalf("enqueued %q, want one finalize", got)
	}
}

func TestPlannerOpenSourcePlanGetsReviews(t *testing.T) {
	t.Parallel()
	st, adm, q := newStore(t), &fakeAdmission{}, &fakeQueue{}
	ctx := context.Background()
	if err := st.SetPlan(ctx, store.Plan{Installation: 112, Tier: jobs.TierFree, Reason: "open_source_user", Explicit: true}); err != nil {
		t.Fatal(err)
	}
	gh := &fakeGitHub{PRFunc: openPR("h1"), FilesFunc: threeFiles}
	if err := newPlanner(t, st, adm, gh, q).ProcessTask(ctx, planTask(testPR(t, 112), "h1", "opened", jobs.TierFree)); err != nil {
		t.Fatal(err)
	}
	if got := len(adm.Events("submit file:review")); got != 1 {
		t.Fatalf("%d review jobs for an open-source plan, want 1", got)
	}
}

func TestPlannerSupersedesThePreviousHead(t *testing.T) {
	t.Parallel()
	st, adm, q := newStore(t), &fakeAdmission{models: []string{"gpt-4o-mini"}}, &fakeQueue{}
	ctx := context.Background()
	pr := testPR(t, 113)
	gh := &fakeGitHub{PRFunc: openPR("h1"), FilesFunc: threeFiles}
	p := newPlanner(t, st, adm, gh, q)
	if err := p.ProcessTask(ctx, planTask(pr, "h1", "opened", jobs.TierFree)); err != nil {
		t.Fatal(err)
	}
	old, err := st.TaskIDs(ctx, pr, "h1")
	if err != nil || len(old) != 1 {
		t.Fatalf("h1's jobs %v (%v)", old, err)
	}
	// a retried plan of the same head submits nothing twice
	if err := p.ProcessTask(ctx, planTask(pr, "h1", "opened", jobs.TierFree)); err != nil {
		t.Fatal(err)
	}
	if n := len(adm.Events("submit")); n != 1 {
		t.Fatalf("%d submissions after a retried plan, want 1", n)
	}
	gh.PRFunc = openPR("h2")
	if err := p.ProcessTask(ctx, planTask(pr, "h2", "synchronize", jobs.TierFree)); err != nil {
		t.Fatal(err)
	}
	if got, want := adm.Events("cancel"), []string{"cancel gpt-4o-mini " + old[0]}; len(got) != 1 || got[0] != want[0] {
		t.Errorf("cancelled %q, want %q", got, want)
	}
	if got := adm.Events("delete"); len(got) != 3 {
		t.Errorf("deleted %q, want h1's job from the three tier queues", got)
	}
	if cur, err := st.Current(ctx, pr, "h1"); err != nil || cur {
		t.Errorf("h1 still current (%v)", err)
	}
}

// TestPlansOfOnePRTakeTurns: while another plan of the pull request runs
// (its lock held), a plan starts no run: it tries again shortly, not as
// a failure (an older event's plan that read the head before a push
// must not start its run after the newer event's). Once the lock is
// free the plan runs.
func TestPlansOfOnePRTakeTurns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, adm, q := newStore(t), &fakeAdmission{}, &fakeQueue{}
	gh := &fakeGitHub{PRFunc: openPR("h1"), FilesFunc: func() ([]ghapp.File, error) {
		return []ghapp.File{{Filename: "a.go", Status: "modified", Additions: 1, Patch: ptr(patchA)}}, nil
	}}
	pr := testPR(t, 112)
	release, ok, err := st.Lock(ctx, pr, "plan", "another-plan", time.Minute)
	if err != nil || !ok {
		t.Fatalf("lock: %v %v", ok, err)
	}
	p := newPlanner(t, st, adm, gh, q)
	err = p.ProcessTask(ctx, planTask(pr, "h1", "opened", jobs.TierPaid))
	var ra *workers.RetryAfterError
	if !errors.As(err, &ra) || workers.IsFailure(err) || ra.After <= 0 {
		t.Fatalf("a plan while another runs: %v, want a retry soon, not a failure", err)
	}
	if subs := adm.Events("submit"); len(subs) != 0 {
		t.Fatalf("submitted %q while another plan held the pull request", subs)
	}
	if _, err := st.GetRun(ctx, pr); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a run was started while another plan held the pull request: %v", err)
	}
	release()
	if err := p.ProcessTask(ctx, planTask(pr, "h1", "opened", jobs.TierPaid)); err != nil {
		t.Fatal(err)
	}
	if subs := adm.Events("submit"); len(subs) == 0 {
		t.Fatal("nothing submitted once the lock was free")
	}
}
