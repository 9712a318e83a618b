package workers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/llmcall"
	"github.com/prq-dev/prq/store"
	"github.com/prq-dev/prq/workers"
)

// conflictQueue refuses a task id it has seen, as asynq does.
type conflictQueue struct {
	seen map[string]bool
}

var _ workers.TaskQueue = (*conflictQueue)(nil)

func (q *conflictQueue) EnqueueContext(_ context.Context, task *asynq.Task, opts ...asynq.Option) (*asynq.TaskInfo, error) {
	for _, o := range opts {
		if o.Type() == asynq.TaskIDOpt {
			id := o.Value().(string)
			if q.seen[id] {
				return nil, asynq.ErrTaskIDConflict
			}
			q.seen[id] = true
		}
	}
	return &asynq.TaskInfo{Type: task.Type()}, nil
}

func newEnqueuer(t *testing.T, q workers.TaskQueue, adm *fakeAdmission, st *store.Store) *workers.Enqueuer {
	t.Helper()
	e, err := workers.NewEnqueuer(workers.EnqueuerConfig{Queue: q, Tickets: adm, Store: st, ChatModel: workers.Model{Model: llmcall.Model{Name: "gpt-4o-mini"}},
		NowFunc: func() time.Time { return time.UnixMilli(1_700_000_000_000) }})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestEnqueuerPlansOncePerDelivery(t *testing.T) {
	t.Parallel()
	e := newEnqueuer(t, &conflictQueue{seen: map[string]bool{}}, &fakeAdmission{}, newStore(t))
	p := jobs.Plan{PR: testPR(t, 501), HeadSHA: "h1", Delivery: "d1", Tier: jobs.TierPaid}
	for i, want := range []bool{true, false} {
		got, err := e.Plan(context.Background(), p)
		if err != nil || got != want {
			t.Errorf("delivery %d: enqueued %v (%v), want %v", i+1, got, err, want)
		}
	}
}

func TestEnqueuerChatGoesThroughAdmission(t *testing.T) {
	t.Parallel()
	var ticket admission.Ticket
	adm := &fakeAdmission{SubmitFunc: func(t admission.Ticket) (bool, error) { ticket = t; return true, nil }}
	e := newEnqueuer(t, &fakeQueue{}, adm, newStore(t))
	c := jobs.Chat{PR: testPR(t, 502), CommentID: 3, Author: "dev", Body: "@prq why?", Tier: jobs.TierPaid}
	if ok, err := e.Chat(context.Background(), c); err != nil || !ok {
		t.Fatalf("Chat = %v, %v", ok, err)
	}
	if ticket.Model != "gpt-4o-mini" || ticket.Queue != jobs.QueueChat || ticket.Class != admission.ClassChat || ticket.Tokens <= 0 {
		t.Errorf("ticket %+v: want the chat model, queue and class, and an estimate", ticket)
	}
}

func TestEnqueuerCancelDropsWaitingWork(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, adm := newStore(t), &fakeAdmission{models: []string{"gpt-4o-mini"}}
	pr := testPR(t, 503)
	e := newEnqueuer(t, &fakeQueue{}, adm, st)
	if err := e.Cancel(ctx, pr); err != nil {
		t.Fatalf("cancelling a PR never planned: %v", err)
	}
	if _, _, err := st.StartRun(ctx, store.Run{PR: pr, Head: "h1", Tier: jobs.TierPaid, SummaryTotal: 1}, nil); err != nil {
		t.Fatal(err)
	}
	if err := st.SetTaskIDs(ctx, pr, "h1", []string{"summary-x"}); err != nil {
		t.Fatal(err)
	}
	if err := e.Cancel(ctx, pr); err != nil {
		t.Fatal(err)
	}
	if got := adm.Events("cancel"); len(got) != 1 || got[0] != "cancel gpt-4o-mini summary-x" {
		t.Errorf("cancelled %q", got)
	}
	if cur, err := st.Current(ctx, pr, "h1"); err != nil || cur {
		t.Errorf("h1 still current after cancel (%v)", err)
	}
}

func TestConstructorsNameTheMissingField(t *testing.T) {
	t.Parallel()
	_, err := workers.NewEnqueuer(workers.EnqueuerConfig{Queue: &fakeQueue{}, Tickets: &fakeAdmission{}, Store: newStore(t)})
	if err == nil || !strings.Contains(err.Error(), "ChatModel") {
		t.Errorf("NewEnqueuer without a chat model: %v", err)
	}
	_, err = workers.NewPlanner(workers.PlannerConfig{Attempts: newAttempts(t), Store: newStore(t), Plans: newStore(t), Tickets: &fakeAdmission{}, GitHub: &fakeGitHub{}, Queue: &fakeQueue{},
		Models: testModels, SummaryModel: "gpt-4o-mini", ReviewModel: "o9"})
	if err == nil || !strings.Contains(err.Error(), `"o9"`) {
		t.Errorf("NewPlanner with an unknown model: %v", err)
	}
	_, err = workers.NewPlanner(workers.PlannerConfig{Attempts: newAttempts(t), Store: newStore(t), Plans: newStore(t), Tickets: &fakeAdmission{}, GitHub: &fakeGitHub{}, Queue: &fakeQueue{},
		Models: testModels, SummaryModel: "gpt-4o-mini", ReviewModel: "gpt-4o", Exclude: []string{"[a-"}})
	if err == nil || !strings.Contains(err.Error(), `"[a-"`) {
		t.Errorf("NewPlanner with a malformed glob: %v", err)
	}
	_, err = workers.NewCaller(workers.CallerConfig{})
	if err == nil || !strings.Contains(err.Error(), "LLM") {
		t.Errorf("NewCaller without an LLM: %v", err)
	}
}
