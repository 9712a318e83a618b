package workers_test

import (
	"context"
	"strings"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/prq-dev/prq/ghapp"
	"github.com/prq-dev/prq/internal/render"
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
	if err != nil || open["k-old"].What != "review:h1" || open["k-new"].What != "review:h2" || len(open) != 2 {
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

// TestFinalizerResolvesAddressedFindings: a push that rewrites the line a
// posted finding was about, whose review does not raise it again,
// resolves its thread with one reply; a reply found already (a retry after
// a crash) is not posted again; a thread a person answered is left open,
// and so is the finding of a line the push left alone.
func TestFinalizerResolvesAddressedFindings(t *testing.T) {
	t.Parallel()
	for i, tc := range []struct {
		name       string
		patch      string // the file's patch at the second head
		replied    bool   // prq's reply is in the thread already
		person     bool   // a person answered in the thread
		wantWrites []string
		open       bool // the finding is still open after
	}{
		{"rewritten: replied to and resolved", "@@ -1,2 +1,3 @@\n a\n+b2\n c", false, false, []string{"reply 500 Addressed in `h2`.", "resolve T1"}, false},
		{"rewritten, replied before a crash: resolved only", "@@ -1,2 +1,3 @@\n a\n+b2\n c", true, false, []string{"resolve T1"}, false},
		{"rewritten, a person answered: left open", "@@ -1,2 +1,3 @@\n a\n+b2\n c", false, true, nil, true},
		{"left alone: left open", "@@ -1,2 +1,4 @@\n a\n+b\n+z\n c", false, false, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st, gh := newStore(t), github()
			pr := testPR(t, int64(440+i))
			f := newFinalizer(t, st, gh)
			cm := store.Comment{Path: "a.go", Line: 2, Side: "RIGHT", Body: "check `b`", Key: "k-old", Lines: []string{"b"}}
			if err := f.ProcessTask(ctx, reviewedHead(t, st, pr, "h1", []store.Comment{cm})); err != nil {
				t.Fatal(err)
			}
			marker := render.Markers{}.Finding(pr.Key(), "k-old")
			thread := ghapp.ReviewThread{ID: "T1", Comments: []ghapp.ThreadComment{{ID: 500, Ours: true, Body: "check `b`\n\n" + marker}}}
			if tc.replied {
				thread.Comments = append(thread.Comments, ghapp.ThreadComment{ID: 501, Ours: true, Body: "Addressed in `h2`.\n\n" + render.Markers{}.Reply(pr.Key(), 500)})
			}
			if tc.person {
				thread.Comments = append(thread.Comments, ghapp.ThreadComment{ID: 502, Body: "No, keep it."})
			}
			gh.ThreadsFunc = func() ([]ghapp.ReviewThread, error) { return []ghapp.ReviewThread{thread}, nil }
			gh.ReplyFunc = func(int64, string) (int64, error) { return 600, nil }
			before := len(gh.Writes())
			if _, _, err := st.StartRun(ctx, store.Run{PR: pr, Head: "h2", Tier: jobs.TierPaid, SummaryTotal: 1, ReviewTotal: 1},
				[]store.FileData{{Path: "a.go", Status: "modified", Patch: tc.patch}}); err != nil {
				t.Fatal(err)
			}
			for _, r := range []store.Result{{Kind: jobs.KindSummary, Path: "a.go", Text: "Adds b."}, {Kind: jobs.KindReview, Path: "a.go", Text: "fine"}} {
				if _, err := st.CompleteFile(ctx, pr, "h2", r); err != nil {
					t.Fatal(err)
				}
			}
			if err := f.ProcessTask(ctx, asynq.NewTask(jobs.TypeFinalize, jobs.Marshal(jobs.Finalize{PR: pr, HeadSHA: "h2", Tier: jobs.TierPaid}))); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, w := range gh.Writes()[before:] {
				if strings.HasPrefix(w, "reply") || strings.HasPrefix(w, "resolve") {
					got = append(got, strings.SplitN(w, "\n", 2)[0])
				}
			}
			if strings.Join(got, "|") != strings.Join(tc.wantWrites, "|") {
				t.Errorf("writes %q, want %q", got, tc.wantWrites)
			}
			open, err := st.PostedFindings(ctx, pr)
			if _, ok := open["k-old"]; err != nil || ok != tc.open {
				t.Errorf("the finding open: %v (%v), want %v", ok, err, tc.open)
			}
		})
	}
}
