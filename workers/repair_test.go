package workers_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/llm"
	"github.com/prq-dev/prq/workers"
)

// replies answers each call with the next reply, recording the requests.
type replies struct {
	mu   sync.Mutex
	next []string
	reqs []llm.Request
}

func (r *replies) complete(req llm.Request) (llm.Response, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reqs = append(r.reqs, req)
	text := r.next[0]
	r.next = r.next[1:]
	return llm.Response{Text: text, PromptTokens: 100, OutputTokens: 20}, nil
}

// TestUnusableReviewIsRepairedOnceThenShownAsFailed: a reply that is not
// the review asked for is never "no findings": it goes back through
// admission once with the bad reply and the error in the prompt; a
// second bad reply records the file as failed, and both are counted.
func TestUnusableReviewIsRepairedOnceThenShownAsFailed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		replies    []string
		wantFailed bool
		wantText   string
	}{
		{"prose twice", []string{"The file looks fine to me, nothing to add.", "Still fine, really."}, true, ""},
		{"quoted braces, then the review", []string{"There is `{}` in the code.", `{"summary":"ok now","comments":[]}`}, false, "ok now"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			st, adm, q := newStore(t), &fakeAdmission{}, &fakeQueue{}
			rs := &replies{next: tc.replies}
			model := &fakeLLM{CompleteFunc: rs.complete}
			var unusable []string
			pr := testPR(t, 251)
			f, task := plannedFile(t, st, pr, jobs.KindReview)
			w, err := workers.NewFileWorker(workers.FileWorkerConfig{Attempts: newAttempts(t), Store: st, Ledger: adm, Caller: newCaller(t, adm, model, nil, nil), Queue: q,
				Models: testModels, Repairs: st, Requeue: adm, UnusableFunc: func(m, k string) { unusable = append(unusable, m+"/"+k) }})
			if err != nil {
				t.Fatal(err)
			}
			err = w.ProcessTask(ctx, task)
			if err == nil || workers.IsFailure(err) {
				t.Fatalf("first run: %v, want back to admission for the repair", err)
			}
			if got := adm.Events("register"); len(got) != 1 || got[0] != "register "+jobs.FileTaskID(f) {
				t.Fatalf("registered %q, want the job once", got)
			}
			if res, _ := st.Results(ctx, pr, "h1"); len(res) != 0 {
				t.Fatalf("a result %+v before the repair: an unreadable reply was recorded", res)
			}
			if err := w.ProcessTask(ctx, task); err != nil {
				t.Fatalf("repair run: %v", err)
			}
			if len(rs.reqs) != 2 {
				t.Fatalf("%d calls, want 2", len(rs.reqs))
			}
			first, repair := rs.reqs[0], rs.reqs[1]
			if first.Format.Type != llm.FormatJSONSchema || len(first.Turns) != 0 {
				t.Errorf("first request: format %q, %d turns", first.Format.Type, len(first.Turns))
			}
			if len(repair.Turns) != 2 || repair.Turns[0].Content != tc.replies[0] || !strings.Contains(repair.Turns[1].Content, "could not be read") {
				t.Errorf("repair turns %+v, want the bad reply and the error", repair.Turns)
			}
			res, _ := st.Results(ctx, pr, "h1")
			if len(res) != 1 {
				t.Fatalf("results %+v", res)
			}
			r := res[0]
			if r.Failed != tc.wantFailed || r.Text != tc.wantText {
				t.Fatalf("result %+v, want failed=%v text %q", r, tc.wantFailed, tc.wantText)
			}
			if tc.wantFailed && r.Skipped != "review failed: the model's reply could not be read" {
				t.Errorf("skipped %q", r.Skipped)
			}
			wantCounted := 1
			if tc.wantFailed {
				wantCounted = 2
			}
			if len(unusable) != wantCounted || unusable[0] != "gpt-4o/review" {
				t.Errorf("counted %q, want %d unusable replies of gpt-4o/review", unusable, wantCounted)
			}
		})
	}
}

// TestReviewFindingsLandWhereTheyBelong: ranges inside one hunk stay
// ranges, deleted lines are LEFT, a finding far from the diff goes to
// the review body as a note (never onto an unrelated hunk).
func TestReviewFindingsLandWhereTheyBelong(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, adm, q := newStore(t), &fakeAdmission{}, &fakeQueue{}
	reply := `{"summary":"s","comments":[{"line":2,"start_line":1,"side":"RIGHT","body":"range"},{"line":1,"start_line":null,"side":"LEFT","body":"deleted"},{"line":500,"start_line":null,"side":"RIGHT","body":"far away"}]}`
	model := &fakeLLM{CompleteFunc: answer(reply)}
	pr := testPR(t, 252)
	_, task := plannedFile(t, st, pr, jobs.KindReview)
	w := newFileWorker(t, st, adm, newCaller(t, adm, model, nil, nil), q, nil)
	if err := w.ProcessTask(ctx, task); err != nil {
		t.Fatal(err)
	}
	res, _ := st.Results(ctx, pr, "h1")
	if len(res) != 1 {
		t.Fatalf("results %+v", res)
	}
	r := res[0]
	if len(r.Comments) != 2 || len(r.Notes) != 1 || r.Notes[0].Line != 500 {
		t.Fatalf("comments %+v notes %+v", r.Comments, r.Notes)
	}
	for _, c := range r.Comments {
		switch c.Body {
		case "range":
			if c.StartLine != 1 || c.Line != 2 || c.Side != "RIGHT" {
				t.Errorf("range comment %+v", c)
			}
		case "deleted":
			if c.Side != "LEFT" || c.Line != 1 {
				t.Errorf("deleted-line comment %+v", c)
			}
		default:
			t.Errorf("unexpected comment %+v", c)
		}
	}
}
