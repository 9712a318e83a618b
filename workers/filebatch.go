package workers

import (
	"context"
	"errors"
	"fmt"

	"github.com/hibiken/asynq"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/llm"
	"github.com/prq-dev/prq/llmcall"
	"github.com/prq-dev/prq/ratelimit"
)

// A file job's side of the batch lane (batch.go): its first run hands its
// request over, its result run books and records the answer, and a job
// the lane did not answer goes to the standard lane.

// errHanded: the job's request waits in the batch lane; its result run
// records it.
var errHanded = errors.New("handed to the batch lane")

// batchFor says whether a job of tier on model m goes through the batch
// lane.
func (w *FileWorker) batchFor(tier jobs.Tier, m Model) bool {
	return m.Batch && w.cfg.Batch.Serves(m.Name) && w.cfg.Caller.cfg.Tiers[tier].Batch
}

// viaBatch is a batch-lane job's call: the answer its batch brought back
// (booked as a synchronous reply is), or, on its first run, its request
// handed to the lane (errHanded) with its quotas reserved for as long as
// it may wait.
func (w *FileWorker) viaBatch(ctx context.Context, t *asynq.Task, f jobs.File, s callSpec) (llm.Response, error) {
	cfg, lane, id := &w.cfg, w.cfg.Batch, s.ticket.ID
	if o, ok, err := lane.outcome(ctx, s.model.Name, id); err != nil {
		return llm.Response{}, err
	} else if ok {
		return cfg.Caller.fromBatch(ctx, s, o)
	}
	if handed, err := lane.handed(ctx, s.model.Name, id); err != nil {
		return llm.Response{}, err
	} else if handed {
		return llm.Response{}, errHanded // a run again of its first run
	}
	// a job that waited in admission (a spent quota's reset) gives its
	// reservation back: the lane is not the synchronous limits'
	settle(ctx, cfg.Ledger, cfg.Log, s.ticket, ratelimit.Cost{})
	caller := cfg.Caller
	hold, err := caller.reserveQuota(ctx, s, caller.cfg.BatchQuota)
	if err != nil {
		return llm.Response{}, err
	}
	tier := caller.cfg.Tiers[f.Tier]
	now := cfg.NowFunc()
	due := now.Add(tier.laneWait())
	req := s.prompt.request(s.model, hold.Cap)
	req.CacheLong = true // a batch runs later than 5 minutes' cache
	it := batchItem{Request: req, Type: t.Type(), Payload: t.Payload(), Queue: s.ticket.Queue, Timeout: fileTaskTimeout(tier),
		Due: due.UnixMilli(), Tokens: s.prompt.input, Hold: heldQuota{Tokens: hold.Tokens, Dollars: hold.Dollars, MaxOut: hold.Cap}, Handed: now.UnixMilli()}
	handed, err := lane.hand(ctx, s.model.Name, id, it)
	if err != nil || !handed {
		caller.settleQuota(ctx, s, caller.cfg.BatchQuota, hold, llmcall.Settlement{})
		if err != nil {
			return llm.Response{}, err
		}
		return llm.Response{}, errHanded
	}
	// the head waits for the lane: its life's bound and the job's retry
	// budget count from when the lane is due
	if err := cfg.Store.SetWaiting(ctx, f.PR, f.HeadSHA, due); err != nil {
		cfg.Log.WarnContext(ctx, "could not mark the head waiting for the batch lane; the run reconciler may take it for stuck", "pr", f.PR.String(), "err", err)
	}
	if err := cfg.Attempts.Rebase(ctx, id, due, moveKeep(cfg.Budget)+tier.laneWait()); err != nil {
		cfg.Log.WarnContext(ctx, "could not restart the job's retry budget at its lane's due time", "task", id, "err", err)
	}
	cfg.Log.DebugContext(ctx, "handed to the batch lane", "pr", f.PR.String(), "task", id, "model", s.model.Name, "due", due.UTC())
	return llm.Response{}, errHanded
}

// toStandard sends a job of the batch lane to the standard lane: kept
// so in its attempts record, its task held again with its ticket (the
// task that ran may be its result run, which admission cannot release),
// its outcome in the lane dropped.
func (w *FileWorker) toStandard(ctx context.Context, t *asynq.Task, f jobs.File, ticket admission.Ticket, cause error) error {
	cfg := &w.cfg
	if err := cfg.Attempts.SetStandard(ctx, ticket.ID, moveKeep(cfg.Budget)); err != nil {
		return fmt.Errorf("%w (and recording the standard lane failed: %v)", cause, err)
	}
	tier := cfg.Caller.cfg.Tiers[f.Tier]
	held, err := cfg.Tickets.Submit(ctx, asynq.NewTask(t.Type(), t.Payload()), ticket, asynq.MaxRetry(8), asynq.Timeout(fileTaskTimeout(tier)))
	if err != nil {
		return fmt.Errorf("%w (and holding it for the standard lane failed: %v)", cause, err)
	}
	if !held {
		// its task is still there (a first run not yet over): wait for
		// it to end, then hold it again
		return fmt.Errorf("%w: the job's task still runs; holding it for the standard lane later", cause)
	}
	cfg.Batch.forget(ctx, f.Model, ticket.ID)
	cfg.Log.InfoContext(ctx, "the batch lane did not answer the job: to the standard lane, through admission", "pr", f.PR.String(), "task", ticket.ID, "model", f.Model, "err", cause)
	return nil
}

// leftover books the outcome of a batch-lane job that ends without
// recording it (its head superseded, its result recorded already or
// reused): an answer the provider billed is counted (book), then the
// outcome is dropped.
func (w *FileWorker) leftover(ctx context.Context, inBatch bool, f jobs.File, ticket admission.Ticket, book bool) {
	if !inBatch {
		return
	}
	cfg := &w.cfg
	o, ok, err := cfg.Batch.outcome(ctx, f.Model, ticket.ID)
	if err != nil || !ok {
		return
	}
	if book {
		s := callSpec{ticket: ticket, kind: f.Kind, tier: f.Tier, inst: f.PR.Installation, model: cfg.Models[f.Model], lane: LaneBatch}
		_, _ = cfg.Caller.fromBatch(ctx, s, o) // counts what was billed, releases the rest
	}
	cfg.Batch.forget(ctx, f.Model, ticket.ID)
}
