package workers_test

import (
	"context"
	"strings"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/prq-dev/prq/ghapp"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
)

// reviewedHead records head as a finished run of pr whose file a.go has
// the given line comments, and returns its finalize task.
func reviewedHead(t *testing.T, st *store.Store, pr jobs.PR, head string, cs []store.Comment) *asynq.Task {
	t.Helper()
	ctx := context.Background()
	if _, _, err := st.StartRun(ctx, store.Run{PR: pr, Head: head, Tier: jobs.TierPaid, SummaryTotal: 1, ReviewTotal: 1},
		[]store.FileData{{Path: "a.go", Status: "modified", Patch: patchA}}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []store.Result{
		{Kind: jobs.KindSummary, Path: "a.go", Text: "Adds b."},
		{Kind: jobs.KindReview, Path: "a.go", Text: "b lacks a check", Comments: cs},
	} {
		if _, err := st.CompleteFile(ctx, pr, head, r); err != nil {
			t.Fatal(err)
		}
	}
	return asynq.NewTask(jobs.TypeFinalize, jobs.Marshal(jobs.Finalize{PR: pr, HeadSHA: head, Tier: jobs.TierPaid}))
}

// TestFinalizerPostsAFindingOnce: a finding posted on one head and raised
// again on the next (the same key) is not posted again, the review says
// it is still open; a new finding is posted with its marker and its
// suggestion; a rerun posts nothing.
func TestFinalizerPostsAFindingOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, gh := newStore(t), github()
	var bodies []string
	var posted [][]ghapp.ReviewComment
	gh.CreateReviewFunc = func(body string, cs []ghapp.ReviewComment) (int64, error) {
		bodies, posted = append(bodies, body), append(posted, cs)
		return int64(80 + len(bodies)), nil
	}
	pr := testPR(t, 431)
	f := newFinalizer(t, st, gh)
	fix := "b := check(a)"
	old := store.Comment{Path: "a.go", Line: 2, Side: "RIGHT", Body: "check b", Key: "k-old"}
	if err := f.ProcessTask(ctx, reviewedHead(t, st, pr, "h1", []store.Comment{old})); err != nil {
		t.Fatal(err)
	}
	// the next head: the old finding again (on a moved line, reworded) and a new one
	again := store.Comment{Path: "a.go", Line: 3, Side: "RIGHT", Body: "b is not checked", Key: "k-old"}
	fresh := store.Comment{Path: "a.go", Line: 2, Side: "RIGHT", Body: "a new problem", Key: "k-new", Suggestion: &fix}
	task := reviewedHead(t, st, pr, "h2", []store.Comment{again, fresh})
	if err := f.ProcessTask(ctx, task); err != nil {
		t.Fatal(err)
	}
	if len(posted) != 2 || len(posted[1]) != 1 {
		t.Fatalf("reviews posted %d, the second with %v, want it to hold the new finding only", len(posted), posted)
	}
	c := posted[1][0]
	if !strings.Contains(c.Body, "a new problem") || !strings.Contains(c.Body, "```suggestion\n"+fix+"\n```") || !strings.Contains(c.Body, "<!-- prq:finding key=k-new tag=") {
		t.Errorf("the new finding's comment lacks its text, suggestion or marker:\n%s", c.Body)
	}
	if !strings.Contains(bodies[1], "1 finding of an earlier review is still open and is not repeated.") {
		t.Errorf("the review body does not count the open finding:\n%s", bodies[1])
	}
	open, err := st.PostedFindings(ctx, pr)
	if err != nil || open["k-old"] != "review:h1" || open["k-new"] != "review:h2" || len(open) != 2 {
		t.Fatalf("posted findings %v (%v), want k-old from h1 and k-new from h2", open, err)
	}
	// a rerun of h2's finalize: nothing more is posted, k-new is its own
	if err := f.ProcessTask(ctx, task); err != nil {
		t.Fatal(err)
	}
	if len(posted) != 2 {
		t.Errorf("a rerun posted again: %d reviews", len(posted))
	}
}
