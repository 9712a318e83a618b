package workers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/prq-dev/prq/ghapp"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
)

// TestSummariesCarryAcrossPushes: a file left unchanged by several
// pushes keeps the summary of the last head that reviewed it (before: it
// lost it after the second push, listed "unchanged" with no summary).
func TestSummariesCarryAcrossPushes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newStore(t)
	pr := testPR(t, 411)
	var last string
	gh := github()
	gh.UpsertCommentFunc = func(known int64, body string) (int64, error) {
		last = body
		return 71, nil
	}
	f := newFinalizer(t, st, gh)
	publish := func(head, prev string, files []store.FileData, summaries map[string]string) {
		t.Helper()
		run := store.Run{PR: pr, Head: head, Tier: jobs.TierPaid, SummaryTotal: len(summaries)}
		if _, _, err := st.StartRun(ctx, run, files); err != nil {
			t.Fatal(err)
		}
		i := 0
		for path, text := range summaries {
			if _, err := st.CompleteFile(ctx, pr, head, store.Result{Kind: jobs.KindSummary, Index: i, Path: path, Text: text}); err != nil {
				t.Fatal(err)
			}
			i++
		}
		task := asynq.NewTask(jobs.TypeFinalize, jobs.Marshal(jobs.Finalize{PR: pr, HeadSHA: head, Tier: jobs.TierPaid}))
		if err := f.ProcessTask(ctx, task); err != nil {
			t.Fatal(err)
		}
	}
	both := func(skipB string) []store.FileData {
		return []store.FileData{{Path: "a.go", Status: "modified", Patch: patchA, Index: 0}, {Path: "b.go", Status: "modified", Patch: patchA, Index: 1, SkipReason: skipB}}
	}
	publish("h1", "", both(""), map[string]string{"a.go": "A at h1.", "b.go": "B at h1."})
	for k := 2; k <= 4; k++ { // three pushes that change a.go only
		head, prev := fmt.Sprintf("h%d", k), fmt.Sprintf("h%d", k-1)
		publish(head, prev, both("unchanged since "+prev), map[string]string{"a.go": fmt.Sprintf("A at h%d.", k)})
		for _, want := range []string{fmt.Sprintf("A at h%d.", k), "B at h1."} {
			if !strings.Contains(last, want) {
				t.Fatalf("summary of %s lacks %q:\n%s", head, want, last)
			}
		}
	}
}

// TestPlannerReviewsEverythingWhenTheComparisonIsTruncated: GitHub lists
// at most 300 files of a comparison; when it may have cut the list, a
// file missing from it is not known to be unchanged, so every file is
// reviewed (before: files past the cap were silently not reviewed).
func TestPlannerReviewsEverythingWhenTheComparisonIsTruncated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, adm, q := newStore(t), &fakeAdmission{}, &fakeQueue{}
	pr := testPR(t, 412)
	if _, _, err := st.StartRun(ctx, store.Run{PR: pr, Head: "h1", Tier: jobs.TierFree}, nil); err != nil {
		t.Fatal(err)
	}
	if err := st.MarkFinalized(ctx, pr, "h1"); err != nil {
		t.Fatal(err)
	}
	files := make([]ghapp.File, 0, 301)
	for i := 0; i < 301; i++ {
		files = append(files, ghapp.File{Filename: fmt.Sprintf("f%03d.go", i), Status: "modified", Additions: 1, Patch: ptr(patchA)})
	}
	gh := &fakeGitHub{PRFunc: openPR("h2"), FilesFunc: func() ([]ghapp.File, error) { return files, nil },
		CompareFunc: func(base, head string) ([]ghapp.File, error) {
			return files[:ghapp.MaxCompareFiles], fmt.Errorf("compare: %w", ghapp.ErrCompareTruncated)
		}}
	if err := newPlanner(t, st, adm, gh, q).ProcessTask(ctx, planTask(pr, "h2", "synchronize", jobs.TierFree)); err != nil {
		t.Fatal(err)
	}
	if got := len(adm.Events("submit file:summary")); got != 301+1 {
		t.Fatalf("%d summaries planned, want all 301 files and the walkthrough", got)
	}
}
