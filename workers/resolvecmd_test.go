package workers_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/prq-dev/prq/ghapp"
	"github.com/prq-dev/prq/internal/render"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
	"github.com/prq-dev/prq/workers"
)

// reactingGitHub is the fake GitHub with reactions (a command's
// acknowledgement).
type reactingGitHub struct {
	*fakeGitHub
	mu        sync.Mutex
	reactions []string
}

var _ workers.Commanders = (*reactingGitHub)(nil)

func (g *reactingGitHub) Reactor(int64) (workers.Reactor, error) { return g, nil }

func (g *reactingGitHub) React(_ context.Context, _, _ string, _ int, id int64, _ bool, content string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.reactions = append(g.reactions, fmt.Sprintf("%d %s", id, content))
	return nil
}

func (g *reactingGitHub) Reactions() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return strings.Join(g.reactions, "|")
}

// TestResolveCommand: `resolve` resolves prq's open threads only prq
// wrote in, once each, and forgets their findings; a thread a person
// answered in (or one too long to read whole) stays open, a person's own
// thread and a resolved one are left alone; a redelivered command neither
// resolves nor answers again; GitHub refusing is answered and
// acknowledged as refused.
func TestResolveCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newStore(t)
	gh := &reactingGitHub{fakeGitHub: github()}
	pr := testPR(t, 470)
	if err := newFinalizer(t, st, gh.fakeGitHub).ProcessTask(ctx, reviewedHead(t, st, pr, "h1", []store.Comment{
		{Path: "a.go", Line: 2, Side: "RIGHT", Body: "check `b`", Key: "k-b", Lines: []string{"b"}},
		{Path: "a.go", Line: 1, Side: "RIGHT", Body: "name `a`", Key: "k-a", Lines: []string{"a"}},
	})); err != nil {
		t.Fatal(err)
	}
	mk := render.Markers{}
	ours := func(id int64, key string) ghapp.ThreadComment {
		return ghapp.ThreadComment{ID: id, Ours: true, Body: "finding\n\n" + mk.Finding(pr.Key(), key)}
	}
	threads := []ghapp.ReviewThread{
		{ID: "T1", Comments: []ghapp.ThreadComment{ours(500, "k-b")}},
		{ID: "T2", Comments: []ghapp.ThreadComment{ours(501, "k-a"), {ID: 502, Body: "No, keep it."}}},
		{ID: "T3", Comments: []ghapp.ThreadComment{{ID: 503, Body: "a person's own note"}}},
		{ID: "T4", Resolved: true, Comments: []ghapp.ThreadComment{ours(504, "k-gone")}},
		{ID: "T5", More: true, Comments: []ghapp.ThreadComment{ours(505, "k-long")}},
		{ID: "T6", Comments: []ghapp.ThreadComment{ours(506, "k-forgotten")}}, // its finding no longer kept: resolved all the same
	}
	var mu sync.Mutex
	gh.ThreadsFunc = func() ([]ghapp.ReviewThread, error) {
		mu.Lock()
		defer mu.Unlock()
		return append([]ghapp.ReviewThread(nil), threads...), nil
	}
	gh.ResolveFunc = func(id string) error {
		mu.Lock()
		defer mu.Unlock()
		for i := range threads {
			if threads[i].ID == id {
				threads[i].Resolved = true
			}
		}
		return nil
	}
	var answers []string
	gh.CommentFunc = func(body string) (int64, error) {
		answers = append(answers, body)
		return int64(900 + len(answers)), nil
	}
	r, err := workers.NewCommandRunner(workers.CommandRunnerConfig{Store: st, GitHub: gh, Queue: &fakeQueue{}, Turns: newPacer(t)})
	if err != nil {
		t.Fatal(err)
	}
	cmd := jobs.Command{PR: pr, CommentID: 77, Author: "maintainer", Name: jobs.CommandResolve}
	task := asynq.NewTask(jobs.TypeCommand, jobs.Marshal(cmd))
	for range 2 { // delivered, then run again
		if err := r.ProcessTask(ctx, task); err != nil {
			t.Fatal(err)
		}
	}
	var resolves []string
	for _, w := range gh.Writes() {
		if strings.HasPrefix(w, "resolve") {
			resolves = append(resolves, w)
		}
	}
	if got := strings.Join(resolves, "|"); got != "resolve T1|resolve T6" {
		t.Errorf("resolved %q, want T1 and T6 once each", got)
	}
	if len(answers) != 1 || !strings.Contains(answers[0], "Resolved 2 of my review threads. 2 threads people answered in stay open") {
		t.Errorf("answers %q, want one saying 2 resolved and 2 left to people", answers)
	}
	open, err := st.PostedFindings(ctx, pr)
	if _, b := open["k-b"]; err != nil || b {
		t.Errorf("k-b still open after its thread was resolved (%v)", err)
	}
	if _, a := open["k-a"]; !a {
		t.Errorf("k-a, whose thread a person answered in, was forgotten")
	}
	if got := gh.Reactions(); got != "77 eyes|77 rocket|77 eyes|77 rocket" {
		t.Errorf("reactions %q", got)
	}

	// GitHub refusing the mutation: said in the answer, confused
	threads = append(threads, ghapp.ReviewThread{ID: "T7", Comments: []ghapp.ThreadComment{ours(507, "k-new")}})
	gh.ResolveFunc = func(string) error { return ghapp.ErrForbidden }
	if err := r.ProcessTask(ctx, asynq.NewTask(jobs.TypeCommand, jobs.Marshal(jobs.Command{PR: pr, CommentID: 78, Author: "maintainer", Name: jobs.CommandResolve}))); err != nil {
		t.Fatal(err)
	}
	if len(answers) != 2 || !strings.Contains(answers[1], "GitHub refused to resolve my threads") {
		t.Errorf("refused: answers %q", answers)
	}
	if got := gh.Reactions(); !strings.HasSuffix(got, "78 eyes|78 confused") {
		t.Errorf("refused: reactions %q, want eyes then confused", got)
	}
}
