package workers

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/llm"
	"github.com/prq-dev/prq/llmcall"
	"github.com/prq-dev/prq/ratelimit"
	"github.com/prq-dev/prq/store"
)

// The batch lane. The summaries and reviews of a tier whose lane is
// batch, on a model a provider's batch API serves (Model.Batch), are not
// admitted to the model's synchronous limits: the job's first run builds
// its prompt, reserves its tenant's quota and hands the request to the
// lane (Hand), and its task ends. Every worker process runs the lane
// (BatchLane.Run): one at a time per model, it submits what was handed
// in batches, polls the open ones, and when a batch is over keeps each
// job's result and enqueues the job again (its result run: the task id
// and ":batch"), which records the result as it records a synchronous
// call's. A request the batch did not answer (expired, cancelled, a
// batch refused or failed) or one still in the lane at its tier's
// lane_wait (the batch is cancelled) comes back as such, and its job
// goes to the standard lane through admission.
//
// What is kept in Redis, per model, under one hash tag
// ({prq:batch:<model>}):
//
//	:items   job id -> the handed request and how to run its job again
//	:pending job ids handed and not yet submitted, by when (ms)
//	:open    batch id -> its jobs, when it is due, its input tokens
//	:results job id -> its result (and its quota hold), until recorded
//	:queued  input tokens of the open batches (batch_queue_tokens)
//	:lock    the process submitting and polling now
//
// A crash between a batch's submission and its record leaves its jobs
// pending: they are submitted again (the provider may answer them twice;
// each result is recorded once).

// batchItem is a handed job: its request, how to run its job again, its
// quota hold, and when it is due (its tier's lane_wait after it was
// handed).
type batchItem struct {
	Request llm.Request `json:"request"`
	Type    string      `json:"type"`
	Payload []byte      `json:"payload"`
	Queue   string      `json:"queue"`
	// Timeout is the job's task timeout.
	Timeout time.Duration `json:"timeout"`
	Due     int64         `json:"due"` // unix ms
	// Tokens is the request's input tokens (the provider's enqueued-token
	// limit counts them).
	Tokens int64     `json:"tokens"`
	Hold   heldQuota `json:"hold"`
	Handed int64     `json:"handed"` // unix ms
}

// heldQuota is an llmcall.QuotaHold as the lane keeps it.
type heldQuota struct {
	Tokens  *ratelimit.Grant `json:"tokens,omitempty"`
	Dollars *ratelimit.Grant `json:"dollars,omitempty"`
	MaxOut  int64            `json:"max_out"`
}

func (h heldQuota) hold() llmcall.QuotaHold {
	return llmcall.QuotaHold{Tokens: h.Tokens, Dollars: h.Dollars, Cap: h.MaxOut}
}

// batchOutcome is a job's result from the lane: the provider's answer
// or why there is none (Kind: "expired", "cancelled", "failed",
// "transient", "permanent", "context_length", "account" — llm.Error's
// kinds as words), and the quota hold the job handed.
type batchOutcome struct {
	Response *llm.Response `json:"response,omitempty"`
	Kind     string        `json:"kind,omitempty"`
	Message  string        `json:"message,omitempty"`
	Batch    string        `json:"batch,omitempty"`
	Hold     heldQuota     `json:"hold"`
}

// openBatch is a submitted batch as the lane keeps it.
type openBatch struct {
	Jobs []string `json:"jobs"`
	// IDs maps the batch's custom_ids to job ids.
	IDs       map[string]string `json:"ids"`
	Submitted int64             `json:"submitted"` // unix ms
	Due       int64             `json:"due"`       // unix ms: the earliest job's
	Tokens    int64             `json:"tokens"`
	Cancelled bool              `json:"cancelled,omitempty"`
}

// BatchLaneConfig configures a BatchLane.
type BatchLaneConfig struct {
	// Redis keeps the lane. Required.
	Redis redis.UniversalClient
	// Batchers gives the batch client of each model the lane serves
	// (llm.Router.Batcher with the model's first key). Required.
	Batchers map[string]llm.Batcher
	// Queue enqueues the jobs' result runs. Required.
	Queue TaskQueue
	// Every is how often the lane submits and polls. Defaults to 1m.
	Every time.Duration
	// Collect is how long handed jobs gather before they are submitted
	// (unless MaxItems are waiting). Defaults to Every.
	Collect time.Duration
	// MaxItems caps a batch's requests. Defaults to 5,000.
	MaxItems int
	// QueueTokens caps, per model, the input tokens of the lane's open
	// batches (OpenAI's enqueued-token limit; 0: the provider's refusal
	// alone bounds them).
	QueueTokens map[string]int64
	// CountFunc, when set, counts the lane's outcomes by model
	// (prq_llm_calls_total: batch_expired, batch_cancelled, batch_failed).
	CountFunc func(model, outcome string)
	// NowFunc is the lane's clock. Defaults to time.Now.
	NowFunc func() time.Time
	// Log defaults to discarding.
	Log *slog.Logger
}

// BatchLane submits handed jobs in batches and brings their results
// back (see the batch lane above).
type BatchLane struct {
	cfg BatchLaneConfig
	// owner names this process's hold of a model's lock
	owner string
}

// NewBatchLane returns a BatchLane.
func NewBatchLane(cfg BatchLaneConfig) (*BatchLane, error) {
	switch {
	case cfg.Redis == nil:
		return nil, errors.New("workers: batch lane: Redis is required")
	case len(cfg.Batchers) == 0:
		return nil, errors.New("workers: batch lane: Batchers is required")
	case cfg.Queue == nil:
		return nil, errors.New("workers: batch lane: Queue is required")
	case cfg.Every < 0 || cfg.Collect < 0 || cfg.MaxItems < 0:
		return nil, errors.New("workers: batch lane: Every, Collect and MaxItems must not be negative")
	}
	if cfg.Every == 0 {
		cfg.Every = time.Minute
	}
	if cfg.Collect == 0 {
		cfg.Collect = cfg.Every
	}
	if cfg.MaxItems == 0 {
		cfg.MaxItems = 5000
	}
	if cfg.NowFunc == nil {
		cfg.NowFunc = time.Now
	}
	cfg.Log = logOrDiscard(cfg.Log)
	return &BatchLane{cfg: cfg, owner: newRef()}, nil
}

// Serves reports whether the lane serves model.
func (l *BatchLane) Serves(model string) bool {
	if l == nil {
		return false
	}
	_, ok := l.cfg.Batchers[model]
	return ok
}

func batchTag(model string) string { return "{prq:batch:" + model + "}" }

type batchKeys struct{ items, pending, open, results, queued, lock string }

func keysOf(model string) batchKeys {
	t := batchTag(model)
	return batchKeys{items: t + ":items", pending: t + ":pending", open: t + ":open", results: t + ":results", queued: t + ":queued", lock: t + ":lock"}
}

// batchKeep is how long the lane's keys outlive their last write: a
// day's completion window and a margin.
const batchKeep = 48 * time.Hour

//go:embed batch_hand.lua
var batchHandLua string

var batchHand = redis.NewScript(batchHandLua)

// hand adds a job to the lane once: false when it was handed already
// (a run again of its first run).
func (l *BatchLane) hand(ctx context.Context, model, id string, it batchItem) (bool, error) {
	k := keysOf(model)
	b, err := json.Marshal(it)
	if err != nil {
		return false, err
	}
	n, err := batchHand.Run(ctx, l.cfg.Redis, []string{k.items, k.pending, k.results}, id, b, it.Handed, batchKeep.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("workers: batch lane: hand %s: %w", id, err)
	}
	return n == 1, nil
}

// outcome returns a job's result from the lane; ok is false while it
// has none.
func (l *BatchLane) outcome(ctx context.Context, model, id string) (batchOutcome, bool, error) {
	b, err := l.cfg.Redis.HGet(ctx, keysOf(model).results, id).Bytes()
	if errors.Is(err, redis.Nil) {
		return batchOutcome{}, false, nil
	}
	if err != nil {
		return batchOutcome{}, false, fmt.Errorf("workers: batch lane: result of %s: %w", id, err)
	}
	var o batchOutcome
	if err := json.Unmarshal(b, &o); err != nil {
		return batchOutcome{}, false, fmt.Errorf("workers: batch lane: result of %s: %w", id, err)
	}
	return o, true, nil
}

// handed reports whether a job waits in the lane (handed, its result
// not yet back).
func (l *BatchLane) handed(ctx context.Context, model, id string) (bool, error) {
	n, err := l.cfg.Redis.HExists(ctx, keysOf(model).items, id).Result()
	if err != nil {
		return false, fmt.Errorf("workers: batch lane: %s: %w", id, err)
	}
	return n, nil
}

// forget drops a job's recorded result.
func (l *BatchLane) forget(ctx context.Context, model, id string) {
	if err := l.cfg.Redis.HDel(ctx, keysOf(model).results, id).Err(); err != nil {
		l.cfg.Log.WarnContext(ctx, "could not drop a recorded batch result; it expires with the lane's keys", "task", id, "err", err)
	}
}

// Run submits and polls every Every until ctx ends.
func (l *BatchLane) Run(ctx context.Context) {
	t := time.NewTicker(l.cfg.Every)
	defer t.Stop()
	for {
		l.Pass(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Pass runs one pass over every model: where this process gets the
// model's lock, it polls the open batches, then submits what waits.
func (l *BatchLane) Pass(ctx context.Context) {
	models := make([]string, 0, len(l.cfg.Batchers))
	for m := range l.cfg.Batchers {
		models = append(models, m)
	}
	sort.Strings(models)
	for _, m := range models {
		if ctx.Err() != nil {
			return
		}
		k := keysOf(m)
		ok, err := l.cfg.Redis.SetNX(ctx, k.lock, l.owner, 10*l.cfg.Every+time.Minute).Result()
		if err != nil || !ok {
			if err != nil {
				l.cfg.Log.WarnContext(ctx, "batch lane: could not take the model's lock", "model", m, "err", err)
			}
			continue
		}
		if err := l.poll(ctx, m); err != nil {
			l.cfg.Log.WarnContext(ctx, "batch lane: poll failed", "model", m, "err", err)
		}
		if err := l.submit(ctx, m); err != nil {
			l.cfg.Log.WarnContext(ctx, "batch lane: submit failed", "model", m, "err", err)
		}
		if _, err := store.Unlock(ctx, l.cfg.Redis, k.lock, l.owner); err != nil {
			l.cfg.Log.WarnContext(ctx, "batch lane: could not release the model's lock; it expires", "model", m, "err", err)
		}
	}
}

// items reads handed jobs (a job no longer there is left out).
func (l *BatchLane) items(ctx context.Context, model string, ids []string) (map[string]batchItem, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	vals, err := l.cfg.Redis.HMGet(ctx, keysOf(model).items, ids...).Result()
	if err != nil {
		return nil, err
	}
	out := make(map[string]batchItem, len(ids))
	for i, v := range vals {
		s, ok := v.(string)
		if !ok {
			continue
		}
		var it batchItem
		if err := json.Unmarshal([]byte(s), &it); err != nil {
			l.cfg.Log.WarnContext(ctx, "batch lane: a handed job cannot be read; it goes to the standard lane", "task", ids[i], "err", err)
			it = batchItem{}
		}
		out[ids[i]] = it
	}
	return out, nil
}

// submit sends the model's pending jobs as one batch, when the oldest
// has gathered Collect or MaxItems wait, within the queue's room; jobs
// past their due time go to the standard lane instead.
func (l *BatchLane) submit(ctx context.Context, model string) error {
	k := keysOf(model)
	now := l.cfg.NowFunc()
	pending, err := l.cfg.Redis.ZRangeWithScores(ctx, k.pending, 0, int64(l.cfg.MaxItems)-1).Result()
	if err != nil || len(pending) == 0 {
		return err
	}
	if oldest := time.UnixMilli(int64(pending[0].Score)); now.Sub(oldest) < l.cfg.Collect && len(pending) < l.cfg.MaxItems {
		return nil
	}
	ids := make([]string, len(pending))
	for i, z := range pending {
		ids[i], _ = z.Member.(string)
	}
	items, err := l.items(ctx, model, ids)
	if err != nil {
		return err
	}
	room := int64(-1)
	if limit := l.cfg.QueueTokens[model]; limit > 0 {
		queued, err := l.cfg.Redis.Get(ctx, k.queued).Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		room = max(limit-queued, 0)
	}
	var batch []llm.BatchItem
	var jobs []string
	ob := openBatch{IDs: map[string]string{}, Submitted: now.UnixMilli()}
	late := map[string]batchOutcome{}
	for _, id := range ids {
		it, ok := items[id]
		switch {
		case !ok:
			// gone (its result run recorded it some other way): drop it
			l.cfg.Redis.ZRem(ctx, k.pending, id)
			continue
		case it.Type == "":
			late[id] = batchOutcome{Kind: "failed", Message: "the handed request could not be read"}
			continue
		case now.UnixMilli() >= it.Due:
			late[id] = batchOutcome{Kind: "expired", Message: "its lane's wait ran out before a batch took it", Hold: it.Hold}
			continue
		case room >= 0 && ob.Tokens+it.Tokens > room:
			continue // the queue has no room for it yet
		}
		cid := llm.CustomID(id)
		batch = append(batch, llm.BatchItem{ID: cid, Request: it.Request})
		jobs = append(jobs, id)
		ob.IDs[cid] = id
		ob.Tokens += it.Tokens
		if ob.Due == 0 || it.Due < ob.Due {
			ob.Due = it.Due
		}
	}
	if err := l.deliver(ctx, model, late, items); err != nil {
		return err
	}
	if len(batch) == 0 {
		return nil
	}
	b, err := l.cfg.Batchers[model].SubmitBatch(ctx, batch)
	switch {
	case errors.Is(err, llm.ErrBatchQueueFull):
		l.cfg.Log.InfoContext(ctx, "batch lane: the provider's batch queue is full; the jobs wait for an earlier batch to end", "model", model, "jobs", len(jobs))
		return nil
	case errors.Is(err, llm.ErrPermanent):
		// the provider would take none of it as it is: the standard lane
		out := map[string]batchOutcome{}
		for _, id := range jobs {
			out[id] = batchOutcome{Kind: "failed", Message: err.Error(), Hold: items[id].Hold}
		}
		l.cfg.Log.WarnContext(ctx, "batch lane: the provider refused the batch; its jobs go to the standard lane", "model", model, "jobs", len(jobs), "err", err)
		return l.deliver(ctx, model, out, items)
	case err != nil:
		return err
	}
	ob.Jobs = jobs
	rec, _ := json.Marshal(ob)
	if err := batchOpen.Run(ctx, l.cfg.Redis, []string{k.open, k.pending, k.queued}, append([]any{b.ID, rec, ob.Tokens, batchKeep.Milliseconds()}, toAnys(jobs)...)...).Err(); err != nil {
		return fmt.Errorf("workers: batch lane: record batch %s: %w", b.ID, err)
	}
	l.cfg.Log.InfoContext(ctx, "batch lane: batch submitted", "model", model, "batch", b.ID, "jobs", len(jobs), "input_tokens", ob.Tokens)
	return nil
}

//go:embed batch_open.lua
var batchOpenLua string

var batchOpen = redis.NewScript(batchOpenLua)

func toAnys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// poll reads the model's open batches: one over has its results kept
// and its jobs enqueued again; one past its due time is cancelled (its
// unanswered jobs then come back cancelled).
func (l *BatchLane) poll(ctx context.Context, model string) error {
	k := keysOf(model)
	open, err := l.cfg.Redis.HGetAll(ctx, k.open).Result()
	if err != nil {
		return err
	}
	bt := l.cfg.Batchers[model]
	now := l.cfg.NowFunc()
	for id, raw := range open {
		var ob openBatch
		if err := json.Unmarshal([]byte(raw), &ob); err != nil {
			l.cfg.Log.ErrorContext(ctx, "batch lane: an open batch's record cannot be read; dropped (its jobs stay handed until their runs give up)", "model", model, "batch", id, "err", err)
			l.cfg.Redis.HDel(ctx, k.open, id)
			continue
		}
		b, err := bt.Batch(ctx, id)
		if err != nil {
			l.cfg.Log.WarnContext(ctx, "batch lane: could not read a batch; polled again next pass", "model", model, "batch", id, "err", err)
			continue
		}
		if !b.State.Over() {
			if now.UnixMilli() >= ob.Due && !ob.Cancelled {
				if _, err := bt.CancelBatch(ctx, id); err != nil {
					l.cfg.Log.WarnContext(ctx, "batch lane: could not cancel a batch past its lane's wait", "model", model, "batch", id, "err", err)
					continue
				}
				ob.Cancelled = true
				rec, _ := json.Marshal(ob)
				l.cfg.Redis.HSet(ctx, k.open, id, rec)
				l.cfg.Log.InfoContext(ctx, "batch lane: batch cancelled at its lane's wait; its unanswered jobs go to the standard lane", "model", model, "batch", id)
			}
			continue
		}
		if err := l.collect(ctx, model, id, ob, b); err != nil {
			l.cfg.Log.WarnContext(ctx, "batch lane: could not collect a batch's results; tried again next pass", "model", model, "batch", id, "err", err)
		}
	}
	return nil
}

// collect keeps the results of a batch that is over, enqueues its jobs'
// result runs, and closes it.
func (l *BatchLane) collect(ctx context.Context, model, id string, ob openBatch, b llm.Batch) error {
	k := keysOf(model)
	items, err := l.items(ctx, model, ob.Jobs)
	if err != nil {
		return err
	}
	out := make(map[string]batchOutcome, len(ob.Jobs))
	if b.State == llm.BatchFailed && errors.Is(b.Err, llm.ErrBatchQueueFull) {
		// refused for want of room (OpenAI's enqueued-token limit): its
		// jobs are submitted again, in a later batch
		if err := batchReopen.Run(ctx, l.cfg.Redis, []string{k.open, k.pending, k.queued}, append([]any{id, ob.Tokens, ob.Submitted}, toAnys(ob.Jobs)...)...).Err(); err != nil {
			return err
		}
		l.cfg.Log.InfoContext(ctx, "batch lane: the provider's batch queue was full; the batch's jobs wait for another", "model", model, "batch", id)
		return nil
	}
	results, err := l.cfg.Batchers[model].BatchResults(ctx, id)
	if err != nil {
		return err
	}
	for _, r := range results {
		job, ok := ob.IDs[r.ID]
		if !ok {
			continue // not one of ours: read tolerantly, nothing to do
		}
		o := batchOutcome{Batch: id, Hold: items[job].Hold}
		if r.Err == nil {
			resp := r.Response
			resp.Header = nil
			o.Response = &resp
		} else {
			o.Kind, o.Message = batchKind(r.Err), r.Err.Error()
		}
		out[job] = o
	}
	for _, job := range ob.Jobs {
		if _, ok := out[job]; !ok {
			// the provider reports no result for it: the standard lane
			out[job] = batchOutcome{Batch: id, Kind: "failed", Message: fmt.Sprintf("batch %s is %s and reports no result for the job", id, b.State), Hold: items[job].Hold}
		}
	}
	if err := l.deliver(ctx, model, out, items); err != nil {
		return err
	}
	if err := batchClose.Run(ctx, l.cfg.Redis, []string{k.open, k.queued}, id, ob.Tokens).Err(); err != nil {
		return err
	}
	l.cfg.Log.InfoContext(ctx, "batch lane: batch collected", "model", model, "batch", id, "state", string(b.State), "jobs", len(ob.Jobs))
	return nil
}

//go:embed batch_reopen.lua
var batchReopenLua string

var batchReopen = redis.NewScript(batchReopenLua)

//go:embed batch_close.lua
var batchCloseLua string

var batchClose = redis.NewScript(batchCloseLua)

// deliver keeps jobs' outcomes, enqueues each job's result run (once:
// its task id), then drops the jobs from the lane's waiting sets; a
// crash between leaves them to be delivered again.
func (l *BatchLane) deliver(ctx context.Context, model string, out map[string]batchOutcome, items map[string]batchItem) error {
	if len(out) == 0 {
		return nil
	}
	k := keysOf(model)
	keep := []any{batchKeep.Milliseconds()}
	jobs := make([]any, 0, len(out))
	for job, o := range out {
		b, err := json.Marshal(o)
		if err != nil {
			return err
		}
		keep = append(keep, job, b)
		jobs = append(jobs, job)
	}
	if err := batchKeepResults.Run(ctx, l.cfg.Redis, []string{k.results}, keep...).Err(); err != nil {
		return fmt.Errorf("workers: batch lane: keep results: %w", err)
	}
	for job, o := range out {
		it := items[job]
		if it.Type == "" {
			// nothing to run again with: its first run's retry, or the
			// next run of its task, finds the result
			l.cfg.Log.WarnContext(ctx, "batch lane: a result whose job cannot be enqueued again", "task", job)
			continue
		}
		opts := []asynq.Option{asynq.TaskID(resultRunID(job)), asynq.Queue(it.Queue), asynq.MaxRetry(8)}
		if it.Timeout > 0 {
			opts = append(opts, asynq.Timeout(it.Timeout))
		}
		if _, err := l.cfg.Queue.EnqueueContext(ctx, asynq.NewTask(it.Type, it.Payload), opts...); err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) {
			return fmt.Errorf("workers: batch lane: enqueue the result run of %s: %w", job, err)
		}
		if o.Kind != "" && l.cfg.CountFunc != nil {
			l.cfg.CountFunc(model, "batch_"+o.Kind)
		}
	}
	if err := batchDrop.Run(ctx, l.cfg.Redis, []string{k.items, k.pending}, jobs...).Err(); err != nil {
		return fmt.Errorf("workers: batch lane: drop delivered jobs: %w", err)
	}
	return nil
}

//go:embed batch_keep.lua
var batchKeepLua string

var batchKeepResults = redis.NewScript(batchKeepLua)

// batchDrop drops jobs from the lane's waiting sets.
var batchDrop = redis.NewScript(`for i = 1, #ARGV do
  redis.call('HDEL', KEYS[1], ARGV[i])
  redis.call('ZREM', KEYS[2], ARGV[i])
end
return #ARGV`)

// resultRunID is the task id of a job's result run.
func resultRunID(job string) string { return job + ":batch" }

// batchKind names a request's failure in a batch.
func batchKind(err error) string {
	for _, k := range []struct {
		kind error
		name string
	}{{llm.ErrBatchExpired, "expired"}, {llm.ErrBatchCancelled, "cancelled"}, {llm.ErrContextLength, "context_length"},
		{llm.ErrAccount, "account"}, {llm.ErrPermanent, "permanent"}, {llm.ErrBatchQueueFull, "failed"}} {
		if errors.Is(err, k.kind) {
			return k.name
		}
	}
	return "transient"
}

// Stats are the lane's counts for one model: jobs handed and waiting
// for a batch, jobs in open batches, open batches.
func (l *BatchLane) Stats(ctx context.Context, model string) (pending, inBatches, batches int64, err error) {
	k := keysOf(model)
	pending, err = l.cfg.Redis.ZCard(ctx, k.pending).Result()
	if err != nil {
		return 0, 0, 0, err
	}
	open, err := l.cfg.Redis.HGetAll(ctx, k.open).Result()
	if err != nil {
		return 0, 0, 0, err
	}
	for _, raw := range open {
		var ob openBatch
		if json.Unmarshal([]byte(raw), &ob) == nil {
			inBatches += int64(len(ob.Jobs))
		}
	}
	return pending, inBatches, int64(len(open)), nil
}
