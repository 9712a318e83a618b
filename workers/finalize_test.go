package workers_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/prq-dev/prq/ghapp"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
	"github.com/prq-dev/prq/workers"
)

// finishedRun records a head whose one file has a summary and a review
// with a line comment, and returns its finalize task.
func finishedRun(t *testing.T, st *store.Store, pr jobs.PR) *asynq.Task {
	t.Helper()
	ctx := context.Background()
	if _, _, err := st.StartRun(ctx, store.Run{PR: pr, Head: "h1", Tier: jobs.TierPaid, SummaryTotal: 1, ReviewTotal: 1},
		[]store.FileData{{Path: "a.go", Status: "modified", Patch: patchA}}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []store.Result{
		{Kind: jobs.KindSummary, Path: "a.go", Text: "Adds b."},
		{Kind: jobs.KindReview, Path: "a.go", Text: "b lacks a check", Comments: []store.Comment{{Path: "a.go", Line: 2, Side: "RIGHT", Body: "check b"}}},
	} {
		if _, err := st.CompleteFile(ctx, pr, "h1", r); err != nil {
			t.Fatal(err)
		}
	}
	return asynq.NewTask(jobs.TypeFinalize, jobs.Marshal(jobs.Finalize{PR: pr, HeadSHA: "h1", Tier: jobs.TierPaid}))
}

func newFinalizer(t *testing.T, st *store.Store, gh *fakeGitHub) *workers.Finalizer {
	t.Helper()
	f, err := workers.NewFinalizer(workers.FinalizerConfig{Attempts: newAttempts(t), Results: st, Publications: st, GitHub: gh, Turns: newPacer(t)})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// github is a fake GitHub that posts everything.
func github() *fakeGitHub {
	return &fakeGitHub{
		UpsertCommentFunc: func(known int64, body string) (int64, error) {
			if known != 0 {
				return known, nil
			}
			return 71, nil
		},
		HasReviewFunc:    func(string) (int64, error) { return 0, nil },
		CreateReviewFunc: func(string, []ghapp.ReviewComment) (int64, error) { return 81, nil },
	}
}

func TestFinalizerPublishesOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, gh := newStore(t), github()
	var knownOnRerun int64 = -1
	upsert := gh.UpsertCommentFunc
	gh.UpsertCommentFunc = func(known int64, body string) (int64, error) {
		if !strings.Contains(body, "Adds b.") || !strings.Contains(body, workers.SummaryMarker) {
			t.Errorf("summary body lacks the summary or its marker:\n%s", body)
		}
		knownOnRerun = known
		return upsert(known, body)
	}
	pr := testPR(t, 401)
	task := finishedRun(t, st, pr)
	f := newFinalizer(t, st, gh)
	if err := f.ProcessTask(ctx, task); err != nil {
		t.Fatal(err)
	}
	if w := gh.Writes(); len(w) != 2 || w[0] != "upsert" || w[1] != "review 1" {
		t.Fatalf("writes %q, want the summary and a review with one comment", w)
	}
	if run, err := st.GetRun(ctx, pr); err != nil || run.State != store.StateDone || run.LastReviewed != "h1" {
		t.Fatalf("run %+v (%v), want done, last reviewed at h1", run, err)
	}
	// a rerun writes nothing: GitHub holds this summary and the review
	if err := f.ProcessTask(ctx, task); err != nil {
		t.Fatal(err)
	}
	if w := gh.Writes(); len(w) != 2 {
		t.Errorf("rerun writes %q, want none after the first run's two", w[2:])
	}
	if knownOnRerun != 0 {
		t.Errorf("the summary was upserted knowing comment %d, want a create (0)", knownOnRerun)
	}
}

// TestFinalizerEditsOnlyAChangedSummary: a run finalized without one
// file's result (stuck past its bound) is finalized again when the
// result comes late: its summary is edited in place, once, and the
// review is not posted again.
func TestFinalizerEditsOnlyAChangedSummary(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, gh := newStore(t), github()
	var edits []int64
	upsert := gh.UpsertCommentFunc
	gh.UpsertCommentFunc = func(known int64, body string) (int64, error) {
		edits = append(edits, known)
		return upsert(known, body)
	}
	pr := testPR(t, 409)
	if _, _, err := st.StartRun(ctx, store.Run{PR: pr, Head: "h1", Tier: jobs.TierPaid, SummaryTotal: 2, ReviewTotal: 1},
		[]store.FileData{{Path: "a.go", Status: "modified", Patch: patchA}, {Path: "b.go", Status: "added", Patch: patchA}}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []store.Result{{Kind: jobs.KindSummary, Path: "a.go", Text: "Adds b."}, {Kind: jobs.KindReview, Path: "a.go", Text: "fine"}} {
		if _, err := st.CompleteFile(ctx, pr, "h1", r); err != nil {
			t.Fatal(err)
		}
	}
	f := newFinalizer(t, st, gh)
	task := asynq.NewTask(jobs.TypeFinalize, jobs.Marshal(jobs.Finalize{PR: pr, HeadSHA: "h1", Tier: jobs.TierPaid}))
	if err := f.ProcessTask(ctx, task); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CompleteFile(ctx, pr, "h1", store.Result{Kind: jobs.KindSummary, Index: 1, Path: "b.go", Text: "Adds c."}); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the late result's finalize, and a rerun of it
		if err := f.ProcessTask(ctx, task); err != nil {
			t.Fatal(err)
		}
	}
	if w := gh.Writes(); fmt.Sprint(w) != "[upsert review 0 upsert]" || fmt.Sprint(edits) != "[0 71]" {
		t.Errorf("writes %q, upserts knowing %v: want the summary, the review, one edit of comment 71", w, edits)
	}
}

func TestFinalizerFindsAReviewPostedBeforeACrash(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, gh := newStore(t), github()
	gh.HasReviewFunc = func(marker string) (int64, error) {
		if !strings.Contains(marker, "h1") {
			t.Errorf("marker %q does not name the head", marker)
		}
		return 82, nil
	}
	pr := testPR(t, 402)
	if err := newFinalizer(t, st, gh).ProcessTask(ctx, finishedRun(t, st, pr)); err != nil {
		t.Fatal(err)
	}
	if w := gh.Writes(); len(w) != 1 || w[0] != "upsert" {
		t.Fatalf("writes %q, want only the summary: the review exists", w)
	}
	if id, err := st.Posted(ctx, pr, "review:h1"); err != nil || id != 82 {
		t.Errorf("recorded review %d (%v), want the one found, 82", id, err)
	}
}

func TestFinalizerUnprocessableLinesGoInTheBody(t *testing.T) {
	t.Parallel()
	st, gh := newStore(t), github()
	var bodies []string
	gh.CreateReviewFunc = func(body string, comments []ghapp.ReviewComment) (int64, error) {
		bodies = append(bodies, body)
		if len(comments) > 0 {
			return 0, ghapp.ErrUnprocessable
		}
		return 83, nil
	}
	if err := newFinalizer(t, st, gh).ProcessTask(context.Background(), finishedRun(t, st, testPR(t, 403))); err != nil {
		t.Fatal(err)
	}
	if len(bodies) != 2 || !strings.Contains(bodies[1], "**`a.go`**") || !strings.Contains(bodies[1], "line 2: check b") {
		t.Fatalf("review bodies %q", bodies)
	}
}

func TestFinalizerOutcomes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		inst    int64
		stale   bool
		upsert  error
		wantErr func(error) bool
	}{
		{name: "superseded head: revoked, nothing posted", inst: 411, stale: true,
			wantErr: func(err error) bool { return errors.Is(err, asynq.RevokeTask) }},
		{name: "PR gone: dropped", inst: 412, upsert: ghapp.ErrNotFound, wantErr: func(err error) bool { return err == nil }},
		{name: "GitHub rate limit: retried when told, not a failure", inst: 413, upsert: &ghapp.RateLimitedError{RetryAfter: time.Minute},
			wantErr: func(err error) bool {
				var ra *workers.RetryAfterError
				return errors.As(err, &ra) && !workers.IsFailure(err)
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			st, gh := newStore(t), github()
			if tc.upsert != nil {
				gh.UpsertCommentFunc = func(int64, string) (int64, error) { return 0, tc.upsert }
			}
			pr := testPR(t, tc.inst)
			task := finishedRun(t, st, pr)
			if tc.stale {
				if _, _, err := st.StartRun(ctx, store.Run{PR: pr, Head: "h2", Tier: jobs.TierPaid}, nil); err != nil {
					t.Fatal(err)
				}
			}
			err := newFinalizer(t, st, gh).ProcessTask(ctx, task)
			if !tc.wantErr(err) {
				t.Fatalf("ProcessTask = %v", err)
			}
			if w := gh.Writes(); tc.stale && len(w) != 0 || len(w) > 1 {
				t.Errorf("writes %q", w)
			}
			if id, _ := st.Posted(ctx, pr, "review:h1"); id != 0 {
				t.Errorf("review recorded as %d after a failed summary", id)
			}
		})
	}
}

// TestStaleFinalizeNeverWritesLast: a finalize that found its head
// current, then was overtaken by a push whose finalize publishes, must
// not leave the older summary last nor mark the newer run done (before:
// the model-based test saw the older head's summary win the race).
func TestStaleFinalizeNeverWritesLast(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, gh := newStore(t), github()
	pr := testPR(t, 421)
	f := newFinalizer(t, st, gh)
	old := finishedRun(t, st, pr) // h1, published below
	h2 := asynq.NewTask(jobs.TypeFinalize, jobs.Marshal(jobs.Finalize{PR: pr, HeadSHA: "h2", Tier: jobs.TierPaid}))
	var bodies []string
	var nestedErr error
	pushed := false
	gh.UpsertCommentFunc = func(known int64, body string) (int64, error) {
		if strings.Contains(body, "=h1 -->") && !pushed {
			// a push lands while h1's summary is on its way: h2 is planned
			// (nothing to review) and its finalize runs
			pushed = true
			if _, _, err := st.StartRun(ctx, store.Run{PR: pr, Head: "h2", Tier: jobs.TierPaid, LastReviewed: "h1"}, []store.FileData{{Path: "a.go", SkipReason: "unchanged since h1"}}); err != nil {
				t.Fatal(err)
			}
			nestedErr = f.ProcessTask(ctx, h2)
		}
		bodies = append(bodies, body)
		return 71, nil
	}
	if err := f.ProcessTask(ctx, old); err != nil {
		t.Fatal(err)
	}
	if nestedErr != nil { // it waited for h1's publication: it runs again
		var ra *workers.RetryAfterError
		if !errors.As(nestedErr, &ra) {
			t.Fatalf("h2's finalize while h1 publishes: %v, want a wait", nestedErr)
		}
		if err := f.ProcessTask(ctx, h2); err != nil {
			t.Fatal(err)
		}
	}
	if len(bodies) == 0 || !strings.Contains(bodies[len(bodies)-1], "h2 -->") {
		t.Fatalf("the last summary written is not h2's:\n%s", bodies[len(bodies)-1])
	}
	if run, err := st.GetRun(ctx, pr); err != nil || run.Head != "h2" || run.LastReviewed != "h2" || run.State != store.StateDone {
		t.Fatalf("run %+v (%v), want h2 done and last reviewed", run, err)
	}
}
