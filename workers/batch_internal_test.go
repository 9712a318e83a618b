package workers

import (
	"context"
	"fmt"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/llm"
)

// idQueue records each enqueued task's id and refuses an id it holds, as
// asynq does (ErrTaskIDConflict).
type idQueue struct {
	mu  sync.Mutex
	ids []string
}

func (q *idQueue) EnqueueContext(_ context.Context, task *asynq.Task, opts ...asynq.Option) (*asynq.TaskInfo, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	id := ""
	for _, o := range opts {
		if o.Type() == asynq.TaskIDOpt {
			id = o.Value().(string)
		}
	}
	for _, seen := range q.ids {
		if seen == id {
			return nil, asynq.ErrTaskIDConflict
		}
	}
	q.ids = append(q.ids, id)
	return &asynq.TaskInfo{ID: id, Type: task.Type()}, nil
}

func (q *idQueue) all() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]string(nil), q.ids...)
}

// laneRig is a batch lane on real Redis and the fake provider's batch
// API, one stepped clock for both.
type laneRig struct {
	lane  *BatchLane
	fake  *fakeopenai.Server
	queue *idQueue
	clock *stepClock
}

func newLaneRig(t *testing.T, model string, queueTokens int64) *laneRig {
	t.Helper()
	clock := &stepClock{t: time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)}
	fake := fakeopenai.New(fakeopenai.Config{Models: []fakeopenai.Model{{Name: model, RPM: 1000, TPM: 1000000, BatchLatency: 10 * time.Minute}},
		Keys: []string{"k"}, Now: clock.Now, LatencyScale: 1, Record: true})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	q := &idQueue{}
	lane, err := NewBatchLane(BatchLaneConfig{Redis: redistest.Shared(t).Client(t), Batchers: map[string]llm.Batcher{model: llm.New("k", srv.URL+"/v1", time.Minute, nil)},
		Queue: q, Every: time.Minute, QueueTokens: map[string]int64{model: queueTokens}, NowFunc: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	return &laneRig{lane: lane, fake: fake, queue: q, clock: clock}
}

func (r *laneRig) hand(t *testing.T, model, id string, tokens int64, wait time.Duration) bool {
	t.Helper()
	now := r.clock.Now()
	it := batchItem{Request: llm.Request{Model: model, System: "Summarise.", User: "Task: summarise the file below.\nFile: " + id + " (modified, +1 -0)\n\n   1 +x", MaxOutput: 50},
		Type: "file:summary", Payload: []byte(`{}`), Queue: "trial", Due: now.Add(wait).UnixMilli(), Tokens: tokens, Handed: now.UnixMilli()}
	ok, err := r.lane.hand(context.Background(), model, id, it)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestBatchLane: jobs handed once gather for Collect, go in one batch
// within the model's queue room, the rest wait for an earlier batch to
// end; an ended batch's results are kept and each job's result run
// enqueued once (delivering again enqueues nothing new); a batch past
// its lane's wait is cancelled and its unanswered jobs come back
// cancelled, for the standard lane.
func TestBatchLane(t *testing.T) {
	ctx := context.Background()
	model := fmt.Sprintf("m-%d", time.Now().UnixNano())
	r := newLaneRig(t, model, 3000)
	for i := range 3 {
		if !r.hand(t, model, fmt.Sprintf("job-%d", i), 1000, time.Hour) {
			t.Fatalf("job-%d: not handed", i)
		}
	}
	if r.hand(t, model, "job-0", 1000, time.Hour) {
		t.Fatal("a job handed twice")
	}
	r.lane.Pass(ctx)
	if st := r.fake.Stats()[model].Batch; st.Submitted != 0 {
		t.Fatalf("submitted %d batches before the jobs gathered for a minute", st.Submitted)
	}
	r.clock.step(time.Minute)
	r.lane.Pass(ctx)
	pending, inBatches, batches, err := r.lane.Stats(ctx, model)
	if err != nil || pending != 0 || inBatches != 3 || batches != 1 {
		t.Fatalf("after the first submit: %d pending, %d in %d batches (%v); want 0, 3 in 1", pending, inBatches, batches, err)
	}
	// the queue holds 3,000 tokens: two more jobs wait for the first batch
	r.hand(t, model, "job-3", 1000, time.Hour)
	r.hand(t, model, "job-4", 1000, time.Hour)
	r.clock.step(time.Minute)
	r.lane.Pass(ctx)
	if pending, _, batches, _ := r.lane.Stats(ctx, model); pending != 2 || batches != 1 {
		t.Fatalf("with the queue full: %d pending, %d batches; want 2 pending behind the one batch", pending, batches)
	}
	r.clock.step(10 * time.Minute) // the first batch is answered
	r.lane.Pass(ctx)
	for i := range 3 {
		o, ok, err := r.lane.outcome(ctx, model, fmt.Sprintf("job-%d", i))
		if err != nil || !ok || o.Response == nil || o.Response.Text == "" || o.Response.PromptTokens == 0 {
			t.Fatalf("job-%d: outcome %+v %v %v, want an answer with its usage", i, o, ok, err)
		}
	}
	if got := r.queue.all(); len(got) != 3 || got[0] != "job-0:batch" && got[1] != "job-0:batch" && got[2] != "job-0:batch" {
		t.Fatalf("result runs enqueued %q, want the three jobs' once", got)
	}
	if pending, inBatches, batches, _ := r.lane.Stats(ctx, model); pending != 0 || inBatches != 2 || batches != 1 {
		t.Fatalf("after the first batch: %d pending, %d in %d batches; want the two waiting ones submitted", pending, inBatches, batches)
	}
	// delivering again (a crash before the batch closed) runs nothing twice
	items := map[string]batchItem{"job-0": {Type: "file:summary", Queue: "trial"}}
	o, _, _ := r.lane.outcome(ctx, model, "job-0")
	if err := r.lane.deliver(ctx, model, map[string]batchOutcome{"job-0": o}, items); err != nil {
		t.Fatal(err)
	}
	if got := r.queue.all(); len(got) != 3 {
		t.Fatalf("delivered again: %d result runs, want 3", len(got))
	}

	// a batch past its lane's wait is cancelled: its unanswered jobs come
	// back cancelled
	r.hand(t, model, "late-0", 100, 3*time.Minute)
	r.hand(t, model, "late-1", 100, 3*time.Minute)
	r.clock.step(time.Minute)
	r.lane.Pass(ctx) // the late ones go out (the second batch runs on)
	r.clock.step(time.Minute)
	r.lane.Pass(ctx) // not over: a batch takes 10 minutes
	r.clock.step(90 * time.Second)
	r.lane.Pass(ctx) // past their wait: cancelled; the request in flight (due at 5 minutes) still finishes
	r.clock.step(3 * time.Minute)
	r.lane.Pass(ctx) // over: collected
	if o, ok, _ := r.lane.outcome(ctx, model, "late-0"); !ok || o.Response == nil {
		t.Fatalf("late-0, in flight when its batch was cancelled: %+v %v, want its answer", o, ok)
	}
	if o, ok, _ := r.lane.outcome(ctx, model, "late-1"); !ok || o.Response != nil || o.Kind != "cancelled" {
		t.Fatalf("late-1: %+v %v, want cancelled (the standard lane)", o, ok)
	}
	r.clock.step(10 * time.Minute)
	r.lane.Pass(ctx) // the second batch
	if pending, inBatches, batches, _ := r.lane.Stats(ctx, model); pending+inBatches+batches != 0 {
		t.Fatalf("the lane holds %d pending, %d in %d batches; want nothing", pending, inBatches, batches)
	}
	for _, id := range []string{"job-3", "job-4"} {
		if o, ok, _ := r.lane.outcome(ctx, model, id); !ok || o.Response == nil {
			t.Fatalf("%s: %+v %v, want its answer", id, o, ok)
		}
	}
	// a job whose wait ran out before a batch took it comes back expired
	r.hand(t, model, "never", 100, time.Minute)
	r.clock.step(2 * time.Minute)
	r.lane.Pass(ctx)
	if o, ok, _ := r.lane.outcome(ctx, model, "never"); !ok || o.Kind != "expired" {
		t.Fatalf("a job past its wait before any batch: %+v %v, want expired", o, ok)
	}
}
