package workers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/hibiken/asynq"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/llm"
	"github.com/prq-dev/prq/ratelimit"
	"github.com/prq-dev/prq/store"
)

// file summarises or reviews one file of a PR. It runs only once
// admitted; whatever happens, it records a result (or a reason it has
// none) exactly once, and the last file of the head triggers finalize.
func (w *Workers) file(ctx context.Context, t *asynq.Task) error {
	var ref fileRef
	if err := jobs.Unmarshal(t.Type(), t.Payload(), &ref); err != nil {
		return fmt.Errorf("%w: %v", asynq.SkipRetry, err)
	}
	f := ref.File
	ticket := fileTicket(f)
	w.sched.Started(ctx, f.Model, ticket.ID)
	current, err := w.store.Current(ctx, f.PR, f.HeadSHA)
	if err != nil {
		return err
	}
	if !current {
		w.sched.Settle(ctx, f.Model, ticket.ID, ratelimit.Cost{Requests: 1, Tokens: f.Estimate})
		return fmt.Errorf("stale job of a superseded head: %w", asynq.RevokeTask)
	}
	fd, err := w.store.File(ctx, f.PR, f.HeadSHA, ref.FileIndex)
	if err != nil {
		return err
	}
	res := store.Result{Kind: f.Kind, Path: fd.Path, Index: f.Index}
	run, _ := w.store.GetRun(ctx, f.PR)
	m := w.cfg.Models[f.Model]
	pm, perr := buildFilePrompt(f.Kind, run.PR.String(), fd, m, w.tok[f.Model])
	if perr != nil {
		w.sched.Settle(ctx, f.Model, ticket.ID, ratelimit.Cost{Requests: 1, Tokens: f.Estimate})
		res.Skipped = "too large for " + f.Model
		if !errors.Is(perr, errTooLarge) {
			res.Skipped = "patch could not be read: " + perr.Error()
		}
		return w.complete(ctx, f, res)
	}
	out, err := w.call(ctx, callSpec{ticket: ticket, kind: f.Kind, tier: f.Tier, inst: f.PR.Installation, prompt: pm, model: m, retried: retried(ctx), maxRetry: maxRetry(ctx)})
	if err != nil {
		var skip *skipError
		if errors.As(err, &skip) {
			res.Skipped = skip.reason
			return w.complete(ctx, f, res)
		}
		return err
	}
	res.Tokens = out.PromptTokens + out.OutputTokens
	if pm.truncated > 0 {
		res.Skipped = fmt.Sprintf("partial: %d hunks did not fit the model", pm.truncated)
	}
	switch f.Kind {
	case jobs.KindReview:
		summary, comments, perr := parseReview(out.Text, fd)
		if perr != nil {
			w.log.WarnContext(ctx, "review reply unusable; recorded without comments", "pr", f.PR.String(), "path", fd.Path, "err", perr)
			res.Skipped = "the model's review could not be read"
		}
		res.Text, res.Comments = summary, comments
	default:
		res.Text = out.Text
	}
	return w.complete(ctx, f, res)
}

func (w *Workers) complete(ctx context.Context, f jobs.File, res store.Result) error {
	last, err := w.store.CompleteFile(ctx, f.PR, f.HeadSHA, res)
	if err != nil {
		return err
	}
	if last {
		return w.enqueueFinalize(ctx, jobs.Finalize{PR: f.PR, HeadSHA: f.HeadSHA, Tier: f.Tier})
	}
	return nil
}

type callSpec struct {
	ticket   admission.Ticket
	kind     jobs.Kind
	tier     jobs.Tier
	inst     int64
	prompt   prompt
	model    Model
	retried  int
	maxRetry int
}

// skipError ends a job with a recorded reason instead of a result.
type skipError struct{ reason string }

func (e *skipError) Error() string { return e.reason }

func retried(ctx context.Context) int  { n, _ := asynq.GetRetryCount(ctx); return n }
func maxRetry(ctx context.Context) int { n, _ := asynq.GetMaxRetry(ctx); return n }

// call makes one admitted LLM call under the tenant's quota and settles
// the bucket and the quota with what it really used. Failures come back
// classified: a skip (quota, too large, permanent), a return to
// admission (429, account problems, transient failures with backoff).
func (w *Workers) call(ctx context.Context, c callSpec) (llm.Response, error) {
	model := c.model.Name
	maxOut := c.model.MaxOutput
	if w.cfg.Gate != nil {
		if err := w.cfg.Gate(ctx, c.ticket); err != nil {
			return llm.Response{}, err
		}
	}
	var grant *ratelimit.Grant
	if limit := w.cfg.Tiers[c.tier].QuotaTokens; limit > 0 && w.quota != nil {
		agent := ""
		if w.cfg.QuotaPerKind {
			agent = string(c.kind)
		}
		g, err := w.quota.Reserve(ctx, strconv.FormatInt(c.inst, 10), agent, c.ticket.ID, limit, c.prompt.input, maxOut)
		var qe *ratelimit.QuotaError
		if errors.As(err, &qe) {
			w.sched.Settle(ctx, model, c.ticket.ID, ratelimit.Cost{Requests: 1, Tokens: c.ticket.Tokens})
			w.count(model, "quota")
			return llm.Response{}, &skipError{reason: "skipped: quota reached, resets at " + qe.Reset.UTC().Format("2006-01-02 15:04 UTC")}
		}
		if err != nil {
			return llm.Response{}, err
		}
		grant = &g
		maxOut = g.Cap
	}
	callStart := time.Now()
	resp, err := w.llm.Complete(ctx, llm.Request{Model: model, System: c.prompt.system, User: c.prompt.user, MaxOutput: maxOut, Reasoning: c.model.Reasoning})
	bucket, _ := w.sched.Bucket(model)
	var le *llm.Error
	if err == nil {
		if bucket != nil {
			bucket.Sync(ctx, http.StatusOK, resp.Header, time.Since(callStart))
		}
		used := resp.PromptTokens + resp.OutputTokens
		w.sched.Settle(ctx, model, c.ticket.ID, ratelimit.Cost{Requests: 1, Tokens: max(used, 0)})
		if grant != nil {
			w.quota.Settle(ctx, *grant, used)
		}
		w.count(model, "ok")
		return resp, nil
	}
	if errors.As(err, &le) && bucket != nil && le.Header != nil {
		bucket.Sync(ctx, le.Status, le.Header, time.Since(callStart))
	}
	settleQuota := func(spent bool) {
		if grant == nil {
			return
		}
		if spent { // the provider may have run it: count it all, never overshoot
			w.quota.Settle(ctx, *grant, grant.Input+grant.Cap)
		} else {
			w.quota.Settle(ctx, *grant, 0)
		}
	}
	switch {
	case errors.Is(err, llm.ErrRateLimited):
		settleQuota(false)
		w.count(model, "rate_limited")
		// the bucket is empty until the provider's retry time: wait there
		return llm.Response{}, w.backToAdmission(ctx, c.ticket, 0, err)
	case errors.Is(err, llm.ErrAccount):
		settleQuota(false)
		w.count(model, "account")
		w.log.ErrorContext(ctx, "provider account problem: pausing the model's admissions", "model", model, "pause", w.cfg.PauseFor, "err", err)
		w.sched.Pause(ctx, model, err.Error(), w.cfg.PauseFor)
		return llm.Response{}, w.backToAdmission(ctx, c.ticket, 0, err)
	case errors.Is(err, llm.ErrContextLength):
		settleQuota(false)
		w.count(model, "context_length")
		return llm.Response{}, &skipError{reason: "too large for " + model}
	case errors.Is(err, llm.ErrPermanent):
		settleQuota(false)
		w.count(model, "failed")
		return llm.Response{}, &skipError{reason: "failed: " + err.Error()}
	default: // transient: retry with backoff, through admission, bounded
		settleQuota(true)
		w.count(model, "transient")
		if c.retried >= c.maxRetry {
			return llm.Response{}, &skipError{reason: fmt.Sprintf("failed after %d attempts: %v", c.retried+1, err)}
		}
		delay := w.cfg.Backoff * time.Duration(1<<min(c.retried, 8))
		if err := w.backToAdmission(ctx, c.ticket, delay, err); !errors.Is(err, errBackToAdmission) {
			return llm.Response{}, err
		}
		return llm.Response{}, fmt.Errorf("transient provider failure, retrying in %s through admission: %w", delay, err)
	}
}

func (w *Workers) count(model, outcome string) {
	if w.Calls != nil {
		w.Calls(model, outcome)
	}
}
