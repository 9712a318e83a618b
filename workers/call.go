package workers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/llm"
	"github.com/prq-dev/prq/llmcall"
	"github.com/prq-dev/prq/ratelimit"
)

// Quota is an installation's quotas of tokens and of dollars per period
// (a *ratelimit.Quota), reserved and settled by llmcall's one
// reservation.
type Quota = llmcall.Quotas

// CallerConfig configures a Caller.
type CallerConfig struct {
	// LLM makes the call. Required.
	LLM LLM
	// Ledger settles the model's bucket with what a call used. Required.
	Ledger Ledger
	// Requeue puts a job that must run again back in admission. Required.
	Requeue Requeue
	// Provider takes the provider's rate-limit headers and pauses a model
	// on account problems. Required.
	Provider Provider
	// Quota caps installations' tokens per tier. Defaults to none.
	Quota Quota
	// BatchQuota reserves the quotas of the batch lane's jobs, whose
	// reservations last while they wait for their batch (a Quota with a
	// longer ReservationTTL). Defaults to Quota.
	BatchQuota Quota
	// Tiers give each tier's quota.
	Tiers map[jobs.Tier]TierSpec
	// QuotaPerKind splits each installation's quota per job kind.
	QuotaPerKind bool
	// QuotaSkip skips a summary or review whose tenant's quota is spent
	// (the file is listed as skipped, the check run is not green) instead
	// of waiting for the quota to reset, the default. Chat never waits:
	// a reply days late helps nobody, so it apologises once.
	QuotaSkip bool
	// Backoff is the first retry delay of a transient failure; it doubles.
	// Defaults to 2s.
	Backoff time.Duration
	// PauseFor is how long an account problem pauses a model. Defaults to 5m.
	PauseFor time.Duration
	// Gate, when set, runs before every LLM call and may delay or refuse
	// it (the benchmark's baselines; prq itself gates by admission).
	Gate func(ctx context.Context, t admission.Ticket) error
	// CountFunc, when set, counts LLM calls by model and outcome (metrics).
	CountFunc func(model, outcome string)
	// CostFunc, when set, adds up what priced calls cost, in dollars, by
	// model, tier and lane (prq_llm_cost_dollars_total), and by
	// installation (the month's spend).
	CostFunc func(model, tier, lane string, installation int64, dollars float64)
	// Log defaults to discarding.
	Log *slog.Logger
}

// LaneSync is the lane of a call made on the provider's ordinary,
// synchronous API at its standard price (the lane label of
// prq_llm_cost_dollars_total).
const LaneSync = llmcall.LaneSync

// LaneFlex is the cost lane of calls served by OpenAI's flex processing.
const LaneFlex = llmcall.LaneFlex

// LaneBatch is the cost lane of calls answered through a provider's
// batch API (OpenAI's Batch API, Anthropic's Message Batches).
const LaneBatch = llmcall.LaneBatch

// chatAgent is the quota agent of chat when its tier has a chat quota.
const chatAgent = "chat"

// Caller makes one admitted LLM call under the tenant's quota and
// settles the bucket and the quota with what it really used. The file
// worker and the chat responder share it.
type Caller struct {
	cfg   CallerConfig
	proto *llmcall.Protocol
}

// NewCaller returns a Caller.
func NewCaller(cfg CallerConfig) (*Caller, error) {
	switch {
	case cfg.LLM == nil:
		return nil, errors.New("workers: caller: LLM is required")
	case cfg.Ledger == nil:
		return nil, errors.New("workers: caller: Ledger is required")
	case cfg.Requeue == nil:
		return nil, errors.New("workers: caller: Requeue is required")
	case cfg.Provider == nil:
		return nil, errors.New("workers: caller: Provider is required")
	case cfg.Backoff < 0:
		return nil, errors.New("workers: caller: Backoff must not be negative")
	case cfg.PauseFor < 0:
		return nil, errors.New("workers: caller: PauseFor must not be negative")
	}
	if cfg.Backoff == 0 {
		cfg.Backoff = 2 * time.Second
	}
	if cfg.PauseFor == 0 {
		cfg.PauseFor = 5 * time.Minute
	}
	if cfg.BatchQuota == nil {
		cfg.BatchQuota = cfg.Quota
	}
	cfg.Log = logOrDiscard(cfg.Log)
	return &Caller{cfg: cfg, proto: llmcall.New(callAdmission(cfg.Ledger, cfg.Provider), cfg.Log, cfg.PauseFor)}, nil
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
	// attempt counts the job's runs against its retry budget.
	attempt attempt
	// fallback: another model may take the job when this one fails it
	// (the provider failing, the model paused); the caller then gets a
	// fallback ending instead of a retry.
	fallback bool
	// flex: the job may be called at flex processing (its tier's lane is
	// flex and the model serves it); a refusal is a flex ending.
	flex bool
	// lane is LaneBatch for a job of the batch lane (priced at batch
	// prices), else "".
	lane string
}

// flexFor says whether a job of tier on model m may be called at flex.
func (c *Caller) flexFor(tier jobs.Tier, m Model) bool {
	return c.cfg.Tiers[tier].Flex && m.Flex
}

// ended is how a job's call ended when it brought no answer, as a value
// the handler switches on (by step); its Error is what asynq or the log
// reads.
type ended struct {
	step step
	// err is the provider's failure (a skip or a wait has none).
	err error
	// endSkip: the job ends with reason recorded instead of a result;
	// failed: the call failed (shown as a failure), rather than a file
	// skipped for a reason of its own (quota, size); gaveUp, when set,
	// is why it spent its retry budget (GaveUpRateLimited ...).
	reason string
	failed bool
	gaveUp string
	// endWait: the tenant's quota is spent until it resets at until.
	until time.Time
	// endFallback: another model may serve the job (why: FallbackPaused,
	// FallbackProvider); otherwise ends the call as it would have ended
	// without fallbacks, when none takes it.
	fallback  string
	otherwise func() error
}

// step is what a job does after a call that brought no answer.
type step int

const (
	// endSkip: recorded skipped (or failed); no retry.
	endSkip step = iota + 1
	// endWait: waits for the tenant's quota to reset (nothing was
	// called, the bucket refunded).
	endWait
	// endFallback: moves to a fallback model, if one can take it.
	endFallback
	// endFlex: flex processing refused the call (nothing billed); back to
	// admission for the standard lane.
	endFlex
	// endStandardLane: the batch lane did not answer (its batch expired,
	// was cancelled or failed); nothing billed; to the standard lane.
	endStandardLane
)

func (e *ended) Error() string {
	switch e.step {
	case endSkip:
		return e.reason
	case endWait:
		return "the tenant's quota is spent; waiting until it resets at " + e.until.UTC().Format(time.RFC3339)
	}
	return e.err.Error()
}

func (e *ended) Unwrap() error { return e.err }

// publicFailure is what a pull request may read of a provider failure:
// a generic sentence and a reference; the details (which can carry
// project ids or internal URLs) go to the log under the same reference.
func publicFailure(ctx context.Context, log *slog.Logger, what string, err error) string {
	ref := newRef()
	log.WarnContext(ctx, "provider failure", "ref", ref, "what", what, "err", err)
	return fmt.Sprintf("%s (ref %s)", what, ref)
}

func newRef() string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "unknown"
	}
	return hex.EncodeToString(b[:])
}

// reserveQuota reserves the call's tokens and dollars in its tenant's
// quotas (q: the Caller's, or a longer-lived one for the batch lane) by
// llmcall's one reservation, the output cap cut to what they leave. A
// spent quota refunds the job's admission and comes back as a wait or a
// skip.
func (c *Caller) reserveQuota(ctx context.Context, s callSpec, q Quota) (llmcall.QuotaHold, error) {
	cfg := &c.cfg
	ask := llmcall.QuotaAsk{Tenant: strconv.FormatInt(s.inst, 10), ID: s.ticket.ID, Input: s.prompt.input, Output: s.model.MaxOutput}
	if q == nil {
		return llmcall.QuotaHold{Cap: ask.Output}, nil
	}
	ask.Tokens = cfg.Tiers[s.tier].QuotaTokens
	if cfg.QuotaPerKind {
		ask.Agent, ask.DollarAgent = string(s.kind), string(s.kind)
	}
	if cq := cfg.Tiers[s.tier].ChatQuotaTokens; s.kind == jobs.KindChat && cq > 0 {
		// chat draws on its own quota, so commenters cannot spend the
		// reviews' tokens (nor reviews chat's)
		ask.Tokens, ask.Agent = cq, chatAgent
	}
	// a quota in dollars: the input and the output cap at the model's
	// prices, the cap cut to what is left
	if dl := cfg.Tiers[s.tier].QuotaDollars; dl > 0 {
		ask.Nano = ratelimit.Nano(dl)
		if ask.InPrice, ask.OutPrice = s.model.QuotaPrices(s.lane == LaneBatch); ask.OutPrice <= 0 {
			settle(ctx, cfg.Ledger, cfg.Log, s.ticket, ratelimit.Cost{})
			return llmcall.QuotaHold{}, &ended{step: endSkip, reason: "model " + s.model.Name + " has no prices for the tier's dollar quota", failed: true}
		}
	}
	h, err := llmcall.ReserveQuota(ctx, q, ask)
	var short *llmcall.QuotaShort
	if !errors.As(err, &short) || short.Refused == nil {
		return h, err
	}
	if err != error(short) {
		cfg.Log.WarnContext(ctx, "could not give a quota reservation back", "task", s.ticket.ID, "err", err)
	}
	// no call is made: the bucket gets the whole reservation back
	settle(ctx, cfg.Ledger, cfg.Log, s.ticket, ratelimit.Cost{})
	c.count(s.model.Name, "quota")
	qe := short.Refused
	if !cfg.QuotaSkip && s.kind != jobs.KindChat {
		if qe.Never() {
			// no reset lets it through: waiting would last for ever
			return llmcall.QuotaHold{}, &ended{step: endSkip, reason: "too large for the tier's quota (its call needs more than a whole period's)", failed: true}
		}
		return llmcall.QuotaHold{}, &ended{step: endWait, until: qe.Reset}
	}
	return llmcall.QuotaHold{}, &ended{step: endSkip, reason: quotaSkip + ", resets at " + qe.Reset.UTC().Format("2006-01-02 15:04 UTC")}
}

// settleQuota settles a call's quotas as st says (the zero Settlement:
// all given back), by llmcall's one rule.
func (c *Caller) settleQuota(ctx context.Context, s callSpec, q Quota, h llmcall.QuotaHold, st llmcall.Settlement) {
	if q == nil {
		return
	}
	if err := llmcall.SettleQuotas(ctx, q, h, st); err != nil {
		c.cfg.Log.WarnContext(ctx, "could not settle the quota; the reservation counts in full until it expires", "task", s.ticket.ID, "err", err)
	}
}

// booked books a call's settlement: its quotas settled, the call
// counted by its outcome, a priced answer's cost added up by its lane.
func (c *Caller) booked(ctx context.Context, s callSpec, q Quota, h llmcall.QuotaHold, o llmcall.Outcome, st llmcall.Settlement) {
	c.settleQuota(ctx, s, q, h, st)
	c.count(s.model.Name, o.String())
	if c.cfg.CostFunc != nil && st.Dollars > 0 {
		c.cfg.CostFunc(s.model.Name, string(s.tier), st.Lane, s.inst, st.Dollars)
	}
}

// call makes the call: the tenant's quota reserved, the call sent and
// settled by llmcall's protocol, its outcome concluded (conclude).
func (c *Caller) call(ctx context.Context, s callSpec) (llm.Response, error) {
	if c.cfg.Gate != nil {
		if err := c.cfg.Gate(ctx, s.ticket); err != nil {
			return llm.Response{}, err
		}
	}
	hold, err := c.reserveQuota(ctx, s, c.cfg.Quota)
	if err != nil {
		return llm.Response{}, err
	}
	resp, o, err := c.send(ctx, s, hold.Cap)
	var r *llm.Response
	if o == llmcall.OK {
		r = &resp
	}
	c.booked(ctx, s, c.cfg.Quota, hold, o, s.model.Model.Settle(o, r, s.ticket.Tokens, false))
	return resp, c.conclude(ctx, s, o, err)
}

// send makes the admitted call in llmcall's steps (the key, the charge
// moved to the call, the reply observed, the pause policy) and settles
// its bucket; the outcome is what the handler goes by.
func (c *Caller) send(ctx context.Context, s callSpec, maxOut int64) (llm.Response, llmcall.Outcome, error) {
	m := s.model.Model
	call := c.proto.Begin(ctx, m, s.ticket.ID)
	req := s.prompt.request(s.model, maxOut)
	req.Key, req.FirstByte = call.Key(), s.model.FirstByte // a flex call has none (llm)
	if s.flex {
		req.ServiceTier = llm.ServiceTierFlex
	}
	resp, err := c.cfg.LLM.Complete(call.Calling(ctx, ctx), req)
	o := llmcall.OutcomeOf(err)
	// the reply observed (its way, its rate-limit headers) with the
	// settle, in one script
	status, h := 0, http.Header(nil)
	var le *llm.Error
	switch {
	case err == nil:
		status, h = http.StatusOK, resp.Header
	case o != llmcall.FlexRefused && errors.As(err, &le):
		status, h = le.Status, le.Header
	}
	o = call.Resolve(ctx, o, err)
	var r *llm.Response
	if o == llmcall.OK {
		r = &resp
	}
	call.ObserveSettle(ctx, status, h, m.Settle(o, r, s.ticket.Tokens, false).Bucket)
	return resp, o, err
}

// conclude turns a call's outcome into the job's next step: done, a
// skip (too large, permanent), a return to admission (429, account
// problems, transient failures with backoff), a fallback, the standard
// lane (a flex refusal), or giving up past the retry budget.
func (c *Caller) conclude(ctx context.Context, s callSpec, o llmcall.Outcome, err error) error {
	switch o {
	case llmcall.OK:
		return nil
	case llmcall.FlexRefused:
		return &ended{step: endFlex, err: err}
	case llmcall.RateLimited:
		if s.attempt.spent() {
			return c.giveUp(ctx, s, GaveUpRateLimited, err)
		}
		// the bucket is empty until the provider's retry time: wait there
		return backToAdmission(ctx, c.cfg.Requeue, s.ticket, 0, err)
	case llmcall.AccountModel, llmcall.AccountKey:
		if o == llmcall.AccountModel && s.fallback && !s.attempt.spent() {
			// the model serves nobody until the pause ends
			return &ended{step: endFallback, fallback: FallbackPaused, err: err,
				otherwise: func() error { return backToAdmission(ctx, c.cfg.Requeue, s.ticket, 0, err) }}
		}
		if s.attempt.spent() {
			return c.giveUp(ctx, s, GaveUpAccount, err)
		}
		return backToAdmission(ctx, c.cfg.Requeue, s.ticket, 0, err)
	case llmcall.ContextLength:
		return &ended{step: endSkip, reason: "too large for " + s.model.Name}
	case llmcall.Permanent:
		return &ended{step: endSkip, reason: publicFailure(ctx, c.cfg.Log, "the model provider refused the request", err), failed: true}
	}
	// transient: retry with backoff, through admission, bounded
	if s.fallback && !s.attempt.spent() {
		return &ended{step: endFallback, fallback: FallbackProvider, err: err, otherwise: func() error { return c.retryTransient(ctx, s, err) }}
	}
	return c.retryTransient(ctx, s, err)
}

// fromBatch books a job's outcome in the batch lane as call books a
// synchronous reply: an answer settles the quotas with its usage and
// its cost at the batch prices; a request the batch did not answer is
// a standard-lane ending (its quotas released: not billed); one the
// provider refused is a skip.
func (c *Caller) fromBatch(ctx context.Context, s callSpec, o batchOutcome) (llm.Response, error) {
	h := o.Hold.hold()
	if o.Response != nil {
		c.booked(ctx, s, c.cfg.BatchQuota, h, llmcall.OK, s.model.Model.Settle(llmcall.OK, o.Response, s.ticket.Tokens, true))
		return *o.Response, nil
	}
	c.settleQuota(ctx, s, c.cfg.BatchQuota, h, llmcall.Settlement{})
	err := fmt.Errorf("batch %s: %s", o.Batch, o.Message)
	switch o.Kind {
	case "context_length":
		c.count(s.model.Name, "context_length")
		return llm.Response{}, &ended{step: endSkip, reason: "too large for " + s.model.Name}
	case "permanent":
		c.count(s.model.Name, "failed")
		return llm.Response{}, &ended{step: endSkip, reason: publicFailure(ctx, c.cfg.Log, "the model provider refused the request", err), failed: true}
	}
	return llm.Response{}, &ended{step: endStandardLane, err: err}
}

// retryTransient ends a call the provider failed: retried with backoff
// through admission, recorded as failed past its retries, given up past
// its budget.
func (c *Caller) retryTransient(ctx context.Context, s callSpec, err error) error {
	if s.retried >= s.maxRetry {
		return &ended{step: endSkip, reason: publicFailure(ctx, c.cfg.Log, fmt.Sprintf("the model provider failed %d times", s.retried+1), err), failed: true}
	}
	if s.attempt.spent() {
		return c.giveUp(ctx, s, GaveUpTransient, err)
	}
	delay := c.cfg.Backoff * time.Duration(1<<min(s.retried, 8))
	if le := (*llm.Error)(nil); errors.As(err, &le) && le.Code == llm.CodeFirstByte {
		delay = 0 // the call waited out its first-byte limit already
	}
	if err := backToAdmission(ctx, c.cfg.Requeue, s.ticket, delay, err); !errors.Is(err, errBackToAdmission) {
		return err
	}
	return fmt.Errorf("transient provider failure, retrying in %s through admission: %w", delay, err)
}

// giveUp ends a job whose retry budget is spent: a failed result with a
// generic public reason; the provider's words go to the log only.
func (c *Caller) giveUp(ctx context.Context, s callSpec, reason string, err error) error {
	text := s.attempt.gaveUp(whyPublic(reason))
	c.cfg.Log.WarnContext(ctx, "job gave up: its retry budget is spent", "task", s.ticket.ID, "model", s.model.Name,
		"reason", reason, "attempts", s.attempt.n, "since", s.attempt.since, "err", err)
	return &ended{step: endSkip, reason: text, failed: true, gaveUp: reason}
}

func (c *Caller) count(model, outcome string) {
	if c.cfg.CountFunc != nil {
		c.cfg.CountFunc(model, outcome)
	}
}

// ledgerAdmission is admission as llmcall sees it, from the Caller's
// Ledger and Provider.
type ledgerAdmission struct {
	Ledger
	Provider
}

// moverAdmission is one whose Ledger also moves a charge to its call
// (admission's Scheduler).
type moverAdmission struct {
	ledgerAdmission
	llmcall.Mover
}

// callAdmission is l and p as one llmcall.Admission, a Mover when l is.
func callAdmission(l Ledger, p Provider) llmcall.Admission {
	a := ledgerAdmission{Ledger: l, Provider: p}
	if mv, ok := l.(llmcall.Mover); ok {
		return moverAdmission{ledgerAdmission: a, Mover: mv}
	}
	return a
}
