package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/jobs"
)

// TestChatStartsWithEveryBatchSlotBusy: with every batch slot of the only
// worker process taken by a job that does not end, and batch work still
// waiting, a chat job is admitted and starts on the slots kept for chat;
// the waiting batch job does not take them.
func TestChatStartsWithEveryBatchSlotBusy(t *testing.T) {
	s, _ := newTestServer(t, func(c *config.Config) { c.Worker.Concurrency = 2 })
	ctx := context.Background()
	started := make(chan string, 8)
	hold := make(chan struct{})
	s.jobs = &jobSide{
		handler: asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
			id, _ := asynq.GetTaskID(ctx)
			started <- id
			if task.Type() == "batch" {
				select {
				case <-hold:
				case <-ctx.Done():
				}
			}
			return nil
		}),
		ticketOf:   func(*asynq.TaskInfo) (admission.Ticket, bool) { return admission.Ticket{}, false },
		retryDelay: asynq.DefaultRetryDelayFunc,
		isFailure:  func(error) bool { return true },
	}
	stop, err := s.startWorker(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	defer close(hold)
	model := s.cfg.Jobs.ReviewModel
	submit := func(typ, id, class, queue string) {
		t.Helper()
		tk := admission.Ticket{ID: id, Queue: queue, Model: model, Class: class, Tenant: "1", Tokens: 10}
		if ok, err := s.sched.Submit(ctx, asynq.NewTask(typ, nil), tk); err != nil || !ok {
			t.Fatalf("submit %s: %v %v", id, ok, err)
		}
	}
	next := func() string {
		t.Helper()
		select {
		case id := <-started:
			return id
		case <-time.After(2 * time.Minute): // a hang, not a speed figure
			t.Fatal("no job started")
			return ""
		}
	}
	for i := range 2 {
		submit("batch", fmt.Sprint("batch-", i), string(jobs.TierPaid), jobs.QueuePaid)
	}
	busy := map[string]bool{next(): true, next(): true}
	if !busy["batch-0"] || !busy["batch-1"] {
		t.Fatalf("started %v, want both batch jobs", busy)
	}
	submit("batch", "batch-2", string(jobs.TierPaid), jobs.QueuePaid)
	submit("chat", "chat-0", admission.ClassChat, jobs.QueueChat)
	if id := next(); id != "chat-0" {
		t.Fatalf("with every batch slot busy, %s started; want chat-0", id)
	}
	info, err := s.insp.GetTaskInfo(jobs.QueuePaid, "batch-2")
	if err != nil || info.State != asynq.TaskStateScheduled {
		t.Fatalf("batch-2: %v %v, want still held", info, err)
	}
}

// TestSlotsCountPendingWork: pending work takes slots before it runs;
// chat beyond the chat server's idle slots takes batch slots, and chat may
// use every idle slot while batch may use only the batch server's.
func TestSlotsCountPendingWork(t *testing.T) {
	for _, tc := range []struct {
		name                      string
		batchRunning, chatRunning int
		pendingChat, pendingB     int
		wantBatch, wantChatAll    int
	}{
		{"idle", 0, 0, 0, 0, 4, 6},
		{"every batch slot busy", 4, 0, 0, 0, 0, 2},
		{"chat slots busy", 0, 2, 0, 0, 4, 4},
		{"pending batch", 0, 0, 0, 3, 1, 3},
		{"pending chat beyond the chat slots", 0, 0, 3, 0, 3, 3},
		{"all busy", 4, 2, 0, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newTestServer(t, nil)
			ctx := context.Background()
			for q, n := range map[string]int{jobs.QueueChat: tc.pendingChat, jobs.QueuePaid: tc.pendingB} {
				for i := range n {
					if _, err := s.client.EnqueueContext(ctx, asynq.NewTask("probe", nil), asynq.Queue(q), asynq.TaskID(fmt.Sprint(q, i))); err != nil {
						t.Fatal(err)
					}
				}
			}
			sl := &slots{rdb: s.rdb, batch: 4, chat: 2}
			sl.batchRunning.Store(int64(tc.batchRunning))
			sl.chatRunning.Store(int64(tc.chatRunning))
			if got := sl.batchFree(); got != tc.wantBatch {
				t.Errorf("batch may start %d, want %d", got, tc.wantBatch)
			}
			if got := sl.chatFree(); got != tc.wantChatAll {
				t.Errorf("chat may start %d, want %d", got, tc.wantChatAll)
			}
		})
	}
}

// llens counts the LLENs sent per key (slot accounting pipelines them).
type llens struct{ by map[string]int }

func (l *llens) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (l *llens) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (l *llens) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if c.Name() == "llen" {
				l.by[fmt.Sprint(c.Args()[1])]++
			}
		}
		return next(ctx, cmds)
	}
}

// TestPendingSkipsQueuesKnownEmpty: slot accounting reads no LLEN of a
// queue this process's dispatch gate knows empty (it counts 0), reads
// every other queue, and reads a queue again once a wake names it.
func TestPendingSkipsQueuesKnownEmpty(t *testing.T) {
	s, _ := newTestServer(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := s.gate.Listen(ctx); err != nil {
		t.Fatal(err)
	}
	// asynq's dequeue of paid and chat finds them empty: known empty
	for _, q := range []string{jobs.QueuePaid, jobs.QueueChat} {
		keys := []string{"asynq:{" + q + "}:pending", "asynq:{" + q + "}:paused", "asynq:{" + q + "}:active", "asynq:{" + q + "}:lease"}
		if err := s.rdb.Eval(ctx, "return nil", keys).Err(); err != redis.Nil {
			t.Fatalf("dequeue of %s: %v", q, err)
		}
	}
	// pushes nobody announces: two trial, one paid
	for _, q := range []string{jobs.QueueTrial, jobs.QueueTrial, jobs.QueuePaid} {
		if err := s.rdb.LPush(ctx, "asynq:{"+q+"}:pending", "x").Err(); err != nil {
			t.Fatal(err)
		}
	}
	cnt := &llens{by: map[string]int{}}
	s.rdb.AddHook(cnt)
	sl := &slots{rdb: s.rdb, batch: 4, chat: 2, gate: s.gate}
	if pc, pb := sl.pending(); pc != 0 || pb != 2 {
		t.Errorf("pending chat %d, batch %d; want 0 and 2 (paid known empty, trial read)", pc, pb)
	}
	if n := cnt.by["asynq:{paid}:pending"] + cnt.by["asynq:{chat}:pending"]; n != 0 {
		t.Errorf("%d LLENs of queues known empty", n)
	}
	if cnt.by["asynq:{trial}:pending"] != 1 || cnt.by["asynq:{free}:pending"] != 1 {
		t.Errorf("LLENs %v: want one of trial and one of free", cnt.by)
	}
	s.gate.Wake(jobs.QueuePaid)
	sl.at = time.Time{}
	if _, pb := sl.pending(); pb != 3 {
		t.Errorf("after a wake of paid: pending batch %d, want 3", pb)
	}
}
