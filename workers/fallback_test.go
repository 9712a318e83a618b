package workers_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/llm"
	"github.com/prq-dev/prq/llmcall"
	"github.com/prq-dev/prq/ratelimit"
	"github.com/prq-dev/prq/workers"
)

// fallbackModels: the summary model gpt-4o-mini falls back to
// gpt-4.1-mini.
var fallbackModels = map[string]workers.Model{
	"gpt-4o-mini":  {Model: llmcall.Model{Name: "gpt-4o-mini", Fallbacks: []string{"gpt-4.1-mini"}}},
	"gpt-4.1-mini": {Model: llmcall.Model{Name: "gpt-4.1-mini"}},
	"gpt-4o":       {Model: llmcall.Model{Name: "gpt-4o"}},
}

// moves counts FallbackFunc's calls as "from>to:reason".
type moves struct {
	mu sync.Mutex
	n  []string
}

func (m *moves) count(from, to, reason string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.n = append(m.n, from+">"+to+":"+reason)
}

func (m *moves) all() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.n)
}

// TestFileWorkerFallsBack: a summary job whose model's provider fails
// the call (5xx) or whose one key is refused (the model paused) moves to
// the model's fallback through admission: registered there with the
// fallback's own estimate, counted, and on its next run called on the
// fallback, its result saying which model made it. On the last fallback
// a failing call ends as it would without fallbacks.
func TestFileWorkerFallsBack(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		kind      error
		reason    string
		wantPause bool
	}{
		{"provider fails", llm.ErrTransient, workers.FallbackProvider, false},
		{"key refused", llm.ErrAccount, workers.FallbackPaused, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			st, adm, q := newStore(t), &fakeAdmission{}, &fakeQueue{}
			var mu sync.Mutex
			var called []string
			backupFails := false
			model := &fakeLLM{CompleteFunc: func(r llm.Request) (llm.Response, error) {
				mu.Lock()
				defer mu.Unlock()
				called = append(called, r.Model)
				if r.Model == "gpt-4o-mini" || backupFails {
					return llm.Response{}, &llm.Error{Kind: tc.kind, Status: 503, Message: "provider says no"}
				}
				return llm.Response{Text: "Adds b.", PromptTokens: 100, OutputTokens: 20}, nil
			}}
			caller, err := workers.NewCaller(workers.CallerConfig{LLM: model, Ledger: adm, Requeue: adm, Provider: adm})
			if err != nil {
				t.Fatal(err)
			}
			counted := &moves{}
			attempts := newAttempts(t)
			kicked := 0
			w, err := workers.NewFileWorker(workers.FileWorkerConfig{Attempts: attempts, Store: st, Ledger: adm, Caller: caller, Queue: q, Models: fallbackModels,
				Repairs: st, Requeue: adm, FallbackFunc: counted.count, Paused: func() { kicked++ }})
			if err != nil {
				t.Fatal(err)
			}
			pr := testPR(t, 251)
			f, task := plannedFile(t, st, pr, jobs.KindSummary)
			id := jobs.FileTaskID(f)

			err = w.ProcessTask(ctx, task)
			if err == nil || workers.IsFailure(err) {
				t.Fatalf("first run = %v, want back to admission (not a failure)", err)
			}
			reg := adm.Registered()
			if len(reg) != 1 || reg[0].ID != id || reg[0].Model != "gpt-4.1-mini" || reg[0].Tokens <= 0 || reg[0].Tokens == f.Estimate {
				t.Fatalf("registered %+v, want the job under gpt-4.1-mini with that model's own estimate (not the payload's %d)", reg, f.Estimate)
			}
			if mv, err := attempts.Moved(ctx, id); err != nil || mv.Model != "gpt-4.1-mini" || mv.Tokens != reg[0].Tokens {
				t.Fatalf("move recorded %+v (%v), want gpt-4.1-mini at %d tokens", mv, err, reg[0].Tokens)
			}
			if got := counted.all(); len(got) != 1 || got[0] != "gpt-4o-mini>gpt-4.1-mini:"+tc.reason {
				t.Fatalf("counted %q, want one move for %s", got, tc.reason)
			}
			if got := len(adm.Events("pause")) == 1; got != tc.wantPause || (kicked == 1) != tc.wantPause {
				t.Fatalf("paused %v, mover kicked %d times; want %v", got, kicked, tc.wantPause)
			}
			if results, _ := st.Results(ctx, pr, "h1"); len(results) != 0 {
				t.Fatalf("results %+v before the fallback ran", results)
			}

			// admitted under the fallback: called there
			if err := w.ProcessTask(ctx, task); err != nil {
				t.Fatalf("second run: %v", err)
			}
			mu.Lock()
			if want := []string{"gpt-4o-mini", "gpt-4.1-mini"}; !slices.Equal(called, want) {
				t.Errorf("calls to %q, want %q", called, want)
			}
			mu.Unlock()
			results, err := st.Results(ctx, pr, "h1")
			if err != nil || len(results) != 1 || results[0].Text != "Adds b." || results[0].Fallback != "gpt-4.1-mini" {
				t.Fatalf("results %+v (%v), want the fallback's summary, saying so", results, err)
			}
			if mv, _ := attempts.Moved(ctx, id); mv.Model != "" {
				t.Errorf("the move %+v outlived the job", mv)
			}
			if got := counted.all(); len(got) != 1 {
				t.Errorf("counted %q, want the one move", got)
			}

			// the same job again (a new head's), the fallback failing too:
			// no further move; it ends as it would without fallbacks
			pr2 := testPR(t, 252)
			f2, task2 := plannedFile(t, st, pr2, jobs.KindSummary)
			mu.Lock()
			backupFails = true
			mu.Unlock()
			if err := w.ProcessTask(ctx, task2); err == nil {
				t.Fatal("first run on a failing primary: want back to admission")
			}
			err = w.ProcessTask(ctx, task2)
			if got := counted.all(); len(got) != 2 {
				t.Fatalf("counted %q, want one move per job, none from the last fallback", got)
			}
			reg = adm.Registered()
			last := reg[len(reg)-1]
			if tc.kind == llm.ErrTransient {
				// no retry left (a plain context's): recorded as failed
				results, _ := st.Results(ctx, pr2, "h1")
				if err != nil || len(results) != 1 || !results[0].Failed || !strings.HasPrefix(results[0].Skipped, "the model provider failed 1 times") {
					t.Fatalf("last fallback failing: %v, results %+v; want the failure recorded", err, results)
				}
			} else if err == nil || workers.IsFailure(err) || last.ID != jobs.FileTaskID(f2) || last.Model != "gpt-4.1-mini" {
				t.Fatalf("last fallback refused: %v, registered %+v; want back to admission under the fallback (paused)", err, last)
			}
		})
	}
}

// TestFallbackMoverMovesWaitingJobs: the jobs waiting for a paused model
// move to its fallback (the next one not paused whose limits admit
// them), once each, with their estimates; chat stays; a model not paused is left alone; where each
// moved job waits is recorded for the reconciler (MovedTicket).
func TestFallbackMoverMovesWaitingJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Shared(t).Client(t)
	n := time.Now().UnixNano()
	primary, second, third, tiny := fmt.Sprintf("gpt-4o-%d", n), fmt.Sprintf("gpt-4.1-%d", n), fmt.Sprintf("gpt-4o-mini-%d", n), fmt.Sprintf("gpt-4.1-nano-%d", n)
	small := ratelimit.Limits{RequestsPerPeriod: 100, TokensPerPeriod: 400, Period: time.Minute}
	models := map[string]workers.Model{
		primary: {Model: llmcall.Model{Name: primary, Fallbacks: []string{tiny, second, third}}},
		tiny:    {Model: llmcall.Model{Name: tiny, Limits: &small}}, // no job of 500 tokens fits it
		second:  {Model: llmcall.Model{Name: second}},
		third:   {Model: llmcall.Model{Name: third}},
	}
	buckets := map[string]*ratelimit.Bucket{}
	for m := range models {
		b, err := ratelimit.NewBucket(rdb, m, "sk", ratelimit.Limits{RequestsPerPeriod: 1000, TokensPerPeriod: 100000, Period: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		buckets[m] = b
	}
	sched, err := admission.New(rdb, buckets, asynq.NewClientFromRedisClient(rdb), asynq.NewInspectorFromRedisClient(rdb), admission.Config{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	pr := testPR(t, 261)
	var ids []string
	for i := range 3 {
		f := jobs.File{PR: pr, HeadSHA: "h1", Kind: jobs.KindReview, Tier: jobs.TierPaid, Path: fmt.Sprintf("f%d.go", i), Index: i, Total: 3, Estimate: int64(500 + i), EstimateOutput: 100, Model: primary}
		task := asynq.NewTask(jobs.TypeReview, jobs.Marshal(f))
		tk, _ := workers.TicketOf(jobs.TypeReview, task.Payload())
		if ok, err := sched.Submit(ctx, task, tk); err != nil || !ok {
			t.Fatalf("submit: %v %v", ok, err)
		}
		ids = append(ids, tk.ID)
	}
	chat := jobs.Chat{PR: pr, CommentID: 9, Model: primary, Estimate: 300}
	if ok, err := sched.Submit(ctx, asynq.NewTask(jobs.TypeChat, jobs.Marshal(chat)), workers.ChatTicket(chat)); err != nil || !ok {
		t.Fatalf("submit chat: %v %v", ok, err)
	}
	counted := &moves{}
	attempts := newAttempts(t)
	// a page of one ticket: the staying job and the chat, which never
	// move, must not hide the others
	mover, err := workers.NewFallbackMover(workers.FallbackMoverConfig{Admission: sched, Attempts: attempts, Models: models, FallbackFunc: counted.count, Batch: 1})
	if err != nil {
		t.Fatal(err)
	}
	if moved, err := mover.Pass(ctx); err != nil || moved != 0 {
		t.Fatalf("pass with nothing paused: %d moved (%v)", moved, err)
	}
	// the first job came back from a fallback too small for it: it stays
	if err := attempts.SetMoved(ctx, ids[0], workers.Move{Model: primary, Tokens: 500, Output: 100, Stay: true}, time.Hour); err != nil {
		t.Fatal(err)
	}
	// the first fallback is paused too: the jobs go to the second
	for _, m := range []string{primary, second} {
		if err := sched.Pause(ctx, m, "401 invalid_api_key", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	// a kick makes a pass at once (not the hour's)
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan struct{})
	go func() { defer close(ran); mover.Run(runCtx, time.Hour) }()
	mover.Kick()
	for deadline := time.Now().Add(30 * time.Second); len(counted.all()) < 2 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	<-ran
	if got := counted.all(); len(got) != 2 {
		t.Fatalf("%d moved after a kick, want the 2 review jobs that may move", len(got))
	}
	if moved, err := mover.Pass(ctx); err != nil || moved != 0 {
		t.Fatalf("second pass moved %d (%v), want none", moved, err)
	}
	left, _ := sched.Waiting(ctx, primary, 0, 10)
	if len(left) != 2 || left[0].ID != ids[0] || left[1].Class != admission.ClassChat {
		t.Fatalf("left under the paused model %+v, want the staying job and the chat", left)
	}
	there, _ := sched.Waiting(ctx, third, 0, 10)
	if len(there) != 2 {
		t.Fatalf("waiting under %s: %+v, want the 2 jobs", third, there)
	}
	for i, w := range there {
		if w.Tokens != int64(501+i) || w.Output != 100 {
			t.Errorf("moved %+v, want its estimate %d (output 100)", w, 501+i)
		}
	}
	if got := counted.all(); len(got) != 2 || got[0] != primary+">"+third+":paused" {
		t.Errorf("counted %q, want 2 moves %s>%s:paused", got, primary, third)
	}
	for i, id := range ids[1:] {
		i++
		tk := admission.Ticket{ID: id, Model: primary, Class: string(jobs.TierPaid), Tokens: 1}
		if got := workers.MovedTicket(ctx, attempts, models, tk); got.Model != third || got.Tokens != int64(500+i) {
			t.Errorf("MovedTicket(%s) = %+v, want under %s at its estimate", id, got, third)
		}
	}
}

// TestFileWorkerOutgrowsItsFallback: a job moved to a fallback whose
// context cannot hold its file (the mover moved it by its estimate) goes
// back to the model it was planned for, to stay: registered there, the
// move recorded as staying, no call made.
func TestFileWorkerOutgrowsItsFallback(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	models := map[string]workers.Model{
		"gpt-4o-mini":  {Model: llmcall.Model{Name: "gpt-4o-mini", Fallbacks: []string{"gpt-4.1-nano"}}},
		"gpt-4.1-nano": {Model: llmcall.Model{Name: "gpt-4.1-nano", ContextTokens: 50, MaxOutput: 10}},
		"gpt-4o":       {Model: llmcall.Model{Name: "gpt-4o"}},
	}
	st, adm, q, model := newStore(t), &fakeAdmission{}, &fakeQueue{}, &fakeLLM{CompleteFunc: answer("never")}
	attempts := newAttempts(t)
	w, err := workers.NewFileWorker(workers.FileWorkerConfig{Attempts: attempts, Store: st, Ledger: adm, Caller: newCaller(t, adm, model, nil, nil), Queue: q,
		Models: models, Repairs: st, Requeue: adm})
	if err != nil {
		t.Fatal(err)
	}
	pr := testPR(t, 271)
	f, task := plannedFile(t, st, pr, jobs.KindSummary)
	id := jobs.FileTaskID(f)
	if err := attempts.SetMoved(ctx, id, workers.Move{Model: "gpt-4.1-nano", Tokens: 40, Output: 10}, time.Hour); err != nil {
		t.Fatal(err)
	}
	err = w.ProcessTask(ctx, task)
	if err == nil || workers.IsFailure(err) {
		t.Fatalf("ProcessTask = %v, want back to admission", err)
	}
	if model.Calls() != 0 {
		t.Fatalf("%d calls on a fallback too small", model.Calls())
	}
	reg := adm.Registered()
	if len(reg) != 1 || reg[0].Model != "gpt-4o-mini" || reg[0].Tokens != f.Estimate {
		t.Fatalf("registered %+v, want the job back under gpt-4o-mini at its planned estimate %d", reg, f.Estimate)
	}
	if mv, err := attempts.Moved(ctx, id); err != nil || mv.Model != "gpt-4o-mini" || !mv.Stay {
		t.Fatalf("move %+v (%v), want back under gpt-4o-mini, staying", mv, err)
	}
	if got := workers.MovedTicket(ctx, attempts, models, reg[0]); got.Model != "gpt-4o-mini" {
		t.Fatalf("the reconciler would register it under %s", got.Model)
	}
	if results, _ := st.Results(ctx, pr, "h1"); len(results) != 0 {
		t.Fatalf("results %+v: the file fits the model it was planned for, it is not too large", results)
	}
}

// TestFileWorkerSkipsAPausedFallback: a job whose provider fails moves
// to the first of its fallbacks that is not paused.
func TestFileWorkerSkipsAPausedFallback(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	models := map[string]workers.Model{
		"gpt-4o-mini":  {Model: llmcall.Model{Name: "gpt-4o-mini", Fallbacks: []string{"gpt-4.1-nano", "gpt-4.1-mini"}}},
		"gpt-4.1-nano": {Model: llmcall.Model{Name: "gpt-4.1-nano"}},
		"gpt-4.1-mini": {Model: llmcall.Model{Name: "gpt-4.1-mini"}},
		"gpt-4o":       {Model: llmcall.Model{Name: "gpt-4o"}},
	}
	st, adm, q := newStore(t), &fakeAdmission{paused: map[string]string{"gpt-4.1-nano": "401 invalid_api_key"}}, &fakeQueue{}
	model := &fakeLLM{CompleteFunc: fail(llm.ErrTransient)}
	w, err := workers.NewFileWorker(workers.FileWorkerConfig{Attempts: newAttempts(t), Store: st, Ledger: adm, Caller: newCaller(t, adm, model, nil, nil), Queue: q,
		Models: models, Repairs: st, Requeue: adm})
	if err != nil {
		t.Fatal(err)
	}
	_, task := plannedFile(t, st, testPR(t, 253), jobs.KindSummary)
	if err := w.ProcessTask(ctx, task); err == nil || workers.IsFailure(err) {
		t.Fatalf("ProcessTask = %v, want back to admission", err)
	}
	if reg := adm.Registered(); len(reg) != 1 || reg[0].Model != "gpt-4.1-mini" {
		t.Fatalf("registered %+v, want under gpt-4.1-mini (gpt-4.1-nano is paused)", reg)
	}
}
