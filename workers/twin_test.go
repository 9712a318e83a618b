package workers_test

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/llm"
	"github.com/prq-dev/prq/store"
	"github.com/prq-dev/prq/workers"
)

// TestTwinWaitsThenPays: a job whose exact prompt another job is being
// answered for waits for it, back in admission, fifteen times (counted
// apart from its other runs), then pays rather than waits; a kept
// answer then serves a third twin with no call.
func TestTwinWaitsThenPays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, adm, q := newStore(t), &fakeAdmission{}, &fakeQueue{}
	release, first := make(chan struct{}), make(chan struct{})
	calls := 0
	model := &fakeLLM{CompleteFunc: func(llm.Request) (llm.Response, error) {
		calls++
		if calls == 1 {
			close(first)
			<-release // the first job's call is slow
		}
		return llm.Response{Text: "Adds b.", PromptTokens: 100, OutputTokens: 20}, nil
	}}
	attempts := newAttempts(t)
	w, err := workers.NewFileWorker(workers.FileWorkerConfig{Attempts: attempts, Store: st, Reuse: st, Ledger: adm, Caller: newCaller(t, adm, model, nil, nil), Queue: q,
		Models: testModels, Repairs: st, Requeue: adm})
	if err != nil {
		t.Fatal(err)
	}
	// three pull requests of one repository with the same title and file:
	// one prompt
	task := func(number int) *asynq.Task {
		pr := testPR(t, 291)
		pr.Number = number
		run := store.Run{PR: pr, Head: "h1", Tier: jobs.TierPaid, SummaryTotal: 1, Title: "Add b"}
		if _, _, err := st.StartRun(ctx, run, []store.FileData{{Path: "a.go", Status: "modified", Additions: 1, Patch: patchA}}); err != nil {
			t.Fatal(err)
		}
		f := jobs.File{PR: pr, HeadSHA: "h1", Kind: jobs.KindSummary, Tier: jobs.TierPaid, Path: "a.go", Total: 1, Estimate: 500, Model: "gpt-4o-mini"}
		return asynq.NewTask(jobs.TypeSummary, jobs.Marshal(struct {
			jobs.File
			FileIndex int `json:"file_index"`
		}{File: f, FileIndex: 0}))
	}
	done := make(chan error, 1)
	go func() { done <- w.ProcessTask(ctx, task(1)) }()
	select {
	case <-first:
	case <-time.After(30 * time.Second):
		t.Fatal("the first job never called")
	}
	twin := task(2)
	for i := 1; i <= 15; i++ {
		if err := w.ProcessTask(ctx, twin); err == nil || workers.IsFailure(err) {
			t.Fatalf("wait %d: %v, want back to admission", i, err)
		}
	}
	if got := len(adm.Events("registerAt")); got != 15 || calls != 1 {
		t.Fatalf("%d delayed registrations, %d calls: want 15 waits and only the first job's call", got, calls)
	}
	// the waits spent none of the twin's retry budget
	tk, _ := workers.TicketOf(twin.Type(), twin.Payload())
	if c, err := attempts.Add(ctx, tk.ID, time.Now(), time.Hour); err != nil || c.N != 1 {
		t.Fatalf("the twin's runs after 15 waits: %d (%v), want this one only", c.N, err)
	}
	// the sixteenth time it pays, the first still in flight
	if err := w.ProcessTask(ctx, twin); err != nil || calls != 2 {
		t.Fatalf("the twin's sixteenth run: %v, %d calls; want it to pay", err, calls)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := w.ProcessTask(ctx, task(3)); err != nil || calls != 2 {
		t.Fatalf("a third twin: %v, %d calls; want it served by a kept answer", err, calls)
	}
}
