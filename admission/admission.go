package admission

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/ratelimit"
)

// Config configures admission.
type Config struct {
	// Strict admits paid before trial before free with no sharing.
	// Defaults to false: weighted.
	Strict bool
	// Weights of the batch tiers. Default paid 8, trial 2, free 1.
	Weights map[jobs.Tier]int64
	// ChatShare of each bucket batch work may not use (chat's reserve,
	// with ChatReserve). Defaults to 0.05. It is kept while chat uses the
	// model and decays into batch after ChatIdle without chat; a window
	// limiter keeps it only from the first admission of the ChatModels
	// (then now: room batch loses while chat is active, with the window's
	// look-ahead) or the first chat of another model (then over a
	// horizon, which chat finds it within).
	ChatShare float64
	// ChatReserve is, per model, the least a token dimension keeps for
	// chat (batch may not use it): the reserve is ChatShare of each
	// burst, at least this, at most half the burst. Unset for one of the
	// ChatModels: a tenth of its tokens' burst.
	ChatReserve map[string]int64
	// ChatIdle is how long the reserve is kept whole after the last chat
	// waited or arrived; over as long again it decays into batch.
	// Defaults to 10m; negative: it never decays.
	ChatIdle time.Duration
	// ChatModels are the models chat always uses (the chat model).
	ChatModels []string
	// ChatCap is the largest share of the admitted tokens chat takes
	// while batch work waits: the two classes are served by start-time
	// fair queuing with weights ChatCap and 1-ChatCap, so over any
	// stretch in which both wait, chat's tokens are at most
	// ChatCap/(1-ChatCap) times batch's plus one ticket. A chat that
	// arrives while chat is idle goes first. 1 lets chat always go first
	// (batch then moves only by the aging bound). Defaults to 0.5.
	ChatCap float64
	// Aging bounds how long a batch ticket waits before it goes first,
	// ahead of chat too. Chat does not age: it is fair across tenants
	// and always has its cap. Defaults to 10m.
	Aging time.Duration
	// ReleaseTimeout is how long a released task may take to reach a
	// handler before the reconciler releases it again. Defaults to 30s.
	ReleaseTimeout time.Duration
	// ReservationTTL bounds how long an unsettled reservation is kept.
	// Defaults to 30m.
	ReservationTTL time.Duration
	// Hold is how far in the future a held task is scheduled. Defaults to
	// jobs.Hold (ten years); every writer of held tasks must agree on it.
	Hold time.Duration
	// SendLag is how long a call takes from Calling to its arrival at the
	// provider (the script's reply, encoding the request, the network).
	// A provider's bucket that is full meanwhile wastes that refill and
	// ours, already charged, counts it, so at a start and a call a token
	// bucket is held this much refill below full (nothing changes at
	// saturation, where the bucket is far from full). Defaults to 250ms
	// (0.4% of a one-minute limit); negative: none.
	SendLag time.Duration
	// NowFunc replaces Redis TIME (deterministic tests only).
	NowFunc func() time.Time
}

func (c *Config) setDefaults() error {
	if c.Weights == nil {
		c.Weights = map[jobs.Tier]int64{jobs.TierPaid: 8, jobs.TierTrial: 2, jobs.TierFree: 1}
	}
	for _, t := range jobs.Tiers {
		if c.Weights[t] <= 0 {
			return fmt.Errorf("admission: weight of %s must be positive", t)
		}
	}
	if c.ChatShare < 0 || c.ChatShare >= 1 {
		return fmt.Errorf("admission: chat share must be in [0, 1), got %v", c.ChatShare)
	}
	for m, n := range c.ChatReserve {
		if n < 0 {
			return fmt.Errorf("admission: chat reserve of %s must not be negative, got %d", m, n)
		}
	}
	switch {
	case c.ChatIdle == 0:
		c.ChatIdle = 10 * time.Minute
	case c.ChatIdle < 0:
		c.ChatIdle = 0
	}
	if c.ChatCap == 0 {
		c.ChatCap = 0.5
	}
	if c.ChatCap < 0 || c.ChatCap > 1 {
		return fmt.Errorf("admission: chat cap must be in (0, 1], got %v", c.ChatCap)
	}
	if c.Aging == 0 {
		c.Aging = 10 * time.Minute
	}
	switch {
	case c.SendLag == 0:
		c.SendLag = 250 * time.Millisecond
	case c.SendLag < 0:
		c.SendLag = 0
	}
	if c.ReleaseTimeout == 0 {
		c.ReleaseTimeout = 30 * time.Second
	}
	if c.ReservationTTL == 0 {
		c.ReservationTTL = 30 * time.Minute
	}
	if c.Hold == 0 {
		c.Hold = jobs.Hold
	}
	return nil
}

// Scheduler admits held jobs.
type Scheduler struct {
	rdb     redis.UniversalClient
	cfg     Config
	log     *slog.Logger
	buckets map[string]*ratelimit.Bucket
	client  *asynq.Client
	insp    *asynq.Inspector

	// Observe, when set, is told of every admission (for metrics).
	Observe func(Admitted)

	orphansMu sync.Mutex
	orphans   map[string]time.Time // held tasks of a paused model seen without a ticket, when first seen
}

// New returns a scheduler for the models' buckets. client and insp may be
// nil for a scheduler that only orders (tests of the order itself).
func New(rdb redis.UniversalClient, buckets map[string]*ratelimit.Bucket, client *asynq.Client, insp *asynq.Inspector, cfg Config, log *slog.Logger) (*Scheduler, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if len(buckets) == 0 {
		return nil, errors.New("admission: at least one model bucket is required")
	}
	cfg.ChatReserve = chatReserves(cfg, buckets)
	return &Scheduler{rdb: rdb, cfg: cfg, log: log, buckets: buckets, client: client, insp: insp}, nil
}

// chatReserves is cfg.ChatReserve with its default: a chat model keeps at
// least a tenth of its tokens' burst for chat, room for a burst of chats
// at once. A bucket's reserve costs batch no throughput; a window keeps
// the chat model's now, room batch loses while chat is active (ChatIdle),
// so a chat never waits for the window to free its room.
func chatReserves(cfg Config, buckets map[string]*ratelimit.Bucket) map[string]int64 {
	out := map[string]int64{}
	for m, n := range cfg.ChatReserve {
		out[m] = n
	}
	for _, m := range cfg.ChatModels {
		b, ok := buckets[m]
		if _, set := out[m]; set || !ok {
			continue
		}
		l := b.Limits()
		burst := l.BurstTokens
		if burst <= 0 {
			burst = l.TokensPerPeriod
		}
		out[m] = burst / 10
	}
	return out
}

func (s *Scheduler) keys(model string) (keySet, *ratelimit.Bucket, error) {
	b, ok := s.buckets[model]
	if !ok {
		return keySet{}, nil, fmt.Errorf("admission: unknown model %q", model)
	}
	return newKeySet(b), b, nil
}

func (s *Scheduler) now() string {
	if s.cfg.NowFunc == nil {
		return ""
	}
	return strconv.FormatInt(s.cfg.NowFunc().UnixMicro(), 10)
}

// Register adds a ticket; a ticket already waiting or released is not
// added twice (registered=false).
func (s *Scheduler) Register(ctx context.Context, t Ticket) (registered bool, err error) {
	reg, err := s.RegisterMany(ctx, []Ticket{t})
	if err != nil {
		return false, err
	}
	return reg[0], nil
}

// registerBatch bounds the tickets of one register script call.
const registerBatch = 256

// RegisterMany adds tickets as Register does one after the other, in
// their order, and reports for each whether it was added: a model's
// tickets in one script call (up to registerBatch), so the reads of its
// flows' heads and the writes of each key are paid once. A ticket that
// does not validate registers none.
func (s *Scheduler) RegisterMany(ctx context.Context, ts []Ticket) ([]bool, error) {
	type batch struct {
		keys keySet
		at   []int // indices into ts
	}
	var models []string
	byModel := map[string]*batch{}
	for i, t := range ts {
		if err := t.validate(); err != nil {
			return nil, err
		}
		b := byModel[t.Model]
		if b == nil {
			keys, _, err := s.keys(t.Model)
			if err != nil {
				return nil, err
			}
			b = &batch{keys: keys}
			byModel[t.Model] = b
			models = append(models, t.Model)
		}
		b.at = append(b.at, i)
	}
	out := make([]bool, len(ts))
	for _, m := range models {
		b := byModel[m]
		for len(b.at) > 0 {
			at := b.at[:min(len(b.at), registerBatch)]
			b.at = b.at[len(at):]
			args := make([]any, 0, 2+2*len(at))
			args = append(args, s.now(), b.keys.wake())
			for _, i := range at {
				args = append(args, ts[i].ID, encodeTicket(ts[i].stored()))
			}
			n, err := registerScript.Run(ctx, s.rdb, b.keys.list(), args...).Int64Slice()
			if err == nil && len(n) != len(at) {
				err = fmt.Errorf("%d replies for %d tickets", len(n), len(at))
			}
			if err != nil {
				return out, fmt.Errorf("admission: register %s (%d tickets of %s): %w", ts[at[0]].ID, len(at), m, err)
			}
			for j, i := range at {
				out[i] = n[j] == 1
			}
		}
	}
	return out, nil
}

// RegisterAt registers a ticket when at comes (a retry with backoff goes
// back through admission no earlier than that).
func (s *Scheduler) RegisterAt(ctx context.Context, t Ticket, at time.Time) error {
	if err := t.validate(); err != nil {
		return err
	}
	keys, _, err := s.keys(t.Model)
	if err != nil {
		return err
	}
	if err := delayScript.Run(ctx, s.rdb, keys.list(), s.now(), t.ID, encodeTicket(t.stored()), at.UnixMicro()).Err(); err != nil {
		return fmt.Errorf("admission: delay %s: %w", t.ID, err)
	}
	// the loops sleep long while no ticket waits: tell them when to look
	if err := s.rdb.Publish(ctx, keys.wake(), "d|"+strconv.FormatInt(at.UnixMicro(), 10)).Err(); err != nil {
		s.log.WarnContext(ctx, "admission: delayed ticket's wake failed; the loops find it within their idle sleep", "task", t.ID, "err", err)
	}
	return nil
}

// Submit enqueues task held (far in the future, under the ticket's id) in
// the ticket's queue, then registers the ticket. Submitting the same id
// again is harmless. A crash between the two leaves a held task without a
// ticket, which Reconcile repairs from the task's payload.
//
// It reports false, registering nothing, when a task with the id exists
// already (a redelivered event, a retried plan).
func (s *Scheduler) Submit(ctx context.Context, task *asynq.Task, t Ticket, opts ...asynq.Option) (bool, error) {
	held, err := s.SubmitMany(ctx, []Submission{{Task: task, Ticket: t, Opts: opts}})
	if err != nil {
		return false, err
	}
	return held[0], nil
}

// Submission is a task to submit with its ticket and its options.
type Submission struct {
	Task   *asynq.Task
	Ticket Ticket
	Opts   []asynq.Option
}

// SubmitMany submits tasks as Submit does each, in order: every task is
// enqueued held first, then the tickets of those held are registered
// together (RegisterMany: one script call per model). A crash between
// the two leaves held tasks without tickets, which Reconcile repairs.
// It reports for each whether its task was held (false: a task with
// the id exists already, its ticket not registered). An enqueue that
// fails stops the submission: the tasks held before it are registered,
// and the error returned.
func (s *Scheduler) SubmitMany(ctx context.Context, subs []Submission) ([]bool, error) {
	if s.client == nil {
		return nil, errors.New("admission: submit needs an asynq client")
	}
	for _, sub := range subs {
		if err := sub.Ticket.validate(); err != nil {
			return nil, err
		}
	}
	held := make([]bool, len(subs))
	var tickets []Ticket
	var holdErr error
	for i, sub := range subs {
		t := sub.Ticket
		opts := append(slices.Clip(sub.Opts), asynq.TaskID(t.ID), asynq.Queue(t.Queue), asynq.ProcessIn(s.cfg.Hold))
		if _, err := s.client.EnqueueContext(ctx, sub.Task, opts...); err != nil {
			if errors.Is(err, asynq.ErrTaskIDConflict) {
				continue
			}
			holdErr = fmt.Errorf("admission: hold %s: %w", t.ID, err)
			break
		}
		held[i] = true
		tickets = append(tickets, t)
	}
	if len(tickets) > 0 {
		if _, err := s.RegisterMany(ctx, tickets); err != nil {
			return held, errors.Join(holdErr, err)
		}
	}
	return held, holdErr
}

// Admitted is one admission decision.
type Admitted struct {
	ID, Queue, Class, Tenant string
	Model                    string
	Tokens                   int64
	// Via is chat (the chat class's turn), fair (the weighted order of
	// batch), aged (a batch ticket past the aging bound), reserve (a chat
	// through the reserve while batch waits), backfill (a window's room a
	// later ticket takes without delaying the next, or, where chat does
	// not go, delaying it by at most a tenth of the window), same_pr (a window:
	// another file of the next ticket's run, which fits now while the
	// next does not) or reject (can never fit the bucket: dropped).
	Via      string
	Waited   time.Duration
	Enqueued time.Time
	// Dim names the bucket dimension a rejected ticket exceeds.
	Dim string
	// Key is the index of the model's API key whose bucket was charged
	// (0 with one key): the call must be made with that key.
	Key int
}

// Admit takes up to budget tickets of a model in global order while its
// bucket admits them. It returns the admitted tickets, and when it
// stopped for lack of room, the exact wait until the next one fits.
func (s *Scheduler) Admit(ctx context.Context, model string, budget int) ([]Admitted, time.Duration, error) {
	return s.admit(ctx, model, budget, budget)
}

// admit takes up to budget tickets, at most batch of them batch work.
func (s *Scheduler) admit(ctx context.Context, model string, budget, batch int) ([]Admitted, time.Duration, error) {
	adm, wait, _, err := s.attempt(ctx, model, budget, batch)
	return adm, wait, err
}

// attempt is admit that also returns the attempt's time (µs, the
// script's clock; 0 when it did not run or the model is paused).
func (s *Scheduler) attempt(ctx context.Context, model string, budget, batch int) ([]Admitted, time.Duration, int64, error) {
	keys, b, err := s.keys(model)
	if err != nil {
		return nil, 0, 0, err
	}
	if budget <= 0 {
		return nil, 0, 0, nil
	}
	mode := "weighted"
	if s.cfg.Strict {
		mode = "strict"
	}
	share := strconv.FormatFloat(s.cfg.ChatShare, 'f', 6, 64) + ":" + strconv.FormatInt(s.cfg.ChatReserve[model], 10) + ":" + strconv.FormatInt(s.cfg.ChatIdle.Microseconds(), 10)
	if slices.Contains(s.cfg.ChatModels, model) {
		share += "c"
	}
	args := []any{s.now(), strconv.Itoa(budget) + ":" + strconv.Itoa(min(max(batch, 0), budget)), mode, share, s.cfg.Aging.Microseconds(),
		s.cfg.ReleaseTimeout.Microseconds(), s.cfg.Weights[jobs.TierPaid], s.cfg.Weights[jobs.TierTrial], s.cfg.Weights[jobs.TierFree],
		strconv.FormatFloat(s.cfg.ChatCap, 'f', 6, 64)}
	args = append(args, b.ScriptArgs(ratelimit.Marks)...)
	res, err := admitScript.Run(ctx, s.rdb, keys.list(), args...).Slice()
	if err != nil {
		return nil, 0, 0, fmt.Errorf("admission: admit %s: %w", model, err)
	}
	if len(res) == 4 { // paused
		return nil, 0, 0, nil
	}
	if len(res) != 3 {
		return nil, 0, 0, fmt.Errorf("admission: admit %s: unexpected reply", model)
	}
	nowUS, _ := strconv.ParseInt(fmt.Sprint(res[0]), 10, 64)
	waitUS, _ := strconv.ParseInt(fmt.Sprint(res[1]), 10, 64)
	items, _ := res[2].([]any)
	now := time.UnixMicro(nowUS)
	var out []Admitted
	for i := 0; i+1 < len(items); i += 2 {
		id, _ := items[i].(string)
		desc, _ := items[i+1].(string)
		if a, ok := decodeAdmitted(id, desc, model, now); ok {
			out = append(out, a)
		}
	}
	return out, time.Duration(waitUS) * time.Microsecond, nowUS, nil
}

// Release moves admitted tasks from held to pending so a worker runs
// them. A task that no longer exists (superseded, deleted) is dropped.
func (s *Scheduler) Release(ctx context.Context, adm []Admitted) {
	var byQueue map[string][]Admitted
	for _, a := range adm {
		if a.Via == "reject" && a.Queue == NotifyQueue {
			s.notify(ctx, a) // its caller sees the ticket gone unreserved
			continue
		}
		if a.Via == "reject" {
			s.log.ErrorContext(ctx, "job can never fit the model's bucket; dropped", "task", a.ID, "model", a.Model, "tokens", a.Tokens, "dimension", a.Dim)
			if s.insp != nil {
				if err := s.insp.ArchiveTask(a.Queue, a.ID); err != nil && !errors.Is(err, asynq.ErrTaskNotFound) {
					s.log.WarnContext(ctx, "archiving a rejected task failed", "task", a.ID, "err", err)
				}
			}
			continue
		}
		if s.Observe != nil {
			s.Observe(a)
		}
		if a.Queue == NotifyQueue {
			s.notify(ctx, a)
			continue
		}
		if s.insp == nil {
			continue
		}
		if byQueue == nil {
			byQueue = map[string][]Admitted{}
		}
		byQueue[a.Queue] = append(byQueue[a.Queue], a)
	}
	for q, as := range byQueue {
		s.release(ctx, q, as)
	}
}

// release moves admitted tasks of queue q to its pending list, in one
// script (lua/release.lua; what Inspector.RunTask does for each, less
// its queue check).
func (s *Scheduler) release(ctx context.Context, q string, adm []Admitted) {
	p := "asynq:{" + q + "}:"
	keys := []string{p + "pending", p + "scheduled", p + "retry", p + "archived", p + "completed"}
	ids := make([]any, len(adm))
	for i, a := range adm {
		keys = append(keys, p+"t:"+a.ID)
		ids[i] = a.ID
	}
	codes, err := releaseScript.Run(ctx, s.rdb, keys, ids...).Int64Slice()
	if err == nil && len(codes) != len(adm) {
		err = fmt.Errorf("admission: release: %d codes for %d tasks", len(codes), len(adm))
	}
	for i, a := range adm {
		code := int64(-5)
		if err == nil {
			code = codes[i]
		}
		switch code {
		case 1, -2: // released; pending already: fine
		case 0:
			s.log.InfoContext(ctx, "admitted task is gone (superseded or deleted)", "task", a.ID, "queue", a.Queue)
			s.forget(ctx, a.Model, a.ID)
		case -1:
			// active: its handler put it back into admission and has not
			// returned yet (release it when it has)
			s.releaseWhenHeld(ctx, a)
		default:
			// anything else the reconciler retries (a release the
			// process's own shutdown cut short needs no warning)
			if ctx.Err() == nil {
				s.log.WarnContext(ctx, "release failed; the reconciler will retry", "task", a.ID, "code", code, "err", err)
			}
		}
	}
}

// stateOf is a task's state, 0 when it cannot be read: RunTask refuses
// pending and active tasks, and asynq exports no error value to tell that
// refusal from others, so ask for the state.
func (s *Scheduler) stateOf(queue, id string) asynq.TaskState {
	info, err := s.insp.GetTaskInfo(queue, id)
	if err != nil {
		return 0
	}
	return info.State
}

// heldAgainWithin bounds how long releaseWhenHeld waits for a handler
// that put its job back into admission (a 429, a review's repair call)
// to return; past it, the reconciler releases the task after
// ReleaseTimeout as for any release that did not reach a handler.
const heldAgainWithin = 10 * time.Second

// releaseWhenHeld releases a task admitted while its previous run was
// still active: the handler registered the ticket again and asynq holds
// the task once the handler returns. Without this the task would wait for
// the reconciler (ReleaseTimeout, 30 s by default) although its charge
// is taken and room is kept for it.
func (s *Scheduler) releaseWhenHeld(ctx context.Context, a Admitted) {
	go func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		deadline := time.Now().Add(heldAgainWithin)
		for time.Now().Before(deadline) {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			switch s.stateOf(a.Queue, a.ID) {
			case asynq.TaskStateActive:
				continue
			case asynq.TaskStateScheduled, asynq.TaskStateRetry:
				if err := s.insp.RunTask(a.Queue, a.ID); err != nil && s.stateOf(a.Queue, a.ID) != asynq.TaskStatePending {
					s.log.WarnContext(ctx, "release after the previous run failed; the reconciler will retry", "task", a.ID, "err", err)
				}
				return
			default: // pending (released by another), done or gone
				return
			}
		}
		s.log.InfoContext(ctx, "admitted task still running its previous attempt; the reconciler releases it", "task", a.ID)
	}()
}

// Started records that an admitted task reached its handler: its ticket
// is no longer released (the reconciler leaves it alone). With a window
// limiter it also moves the job's charge to now, if the room is there:
// admission looks ahead by the time its jobs take to be ready to call,
// so a job may start before the room it was admitted for; then its call
// waits for it (see Calling), and the handler prepares meanwhile. A
// token bucket's charge is corrected at the call (Calling), which counts
// every charge not called yet, this one's included: a correction at the
// start as well would change nothing the call's does not (an auto
// limiter counting in a bucket makes none either).
func (s *Scheduler) Started(ctx context.Context, model, id string) error {
	keys, b, err := s.keys(model)
	if err != nil {
		return err
	}
	if !b.Limits().Windowed() {
		// two deletes, no script: the ticket first, so a lost second
		// command leaves a released entry with no ticket, which the
		// reconciler drops (not a ticket nothing releases again)
		pipe := s.rdb.Pipeline()
		pipe.HDel(ctx, keys.Tickets, id)
		pipe.ZRem(ctx, keys.Released, id)
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("admission: started %s: %w", id, err)
		}
		return nil
	}
	args := []any{s.now(), id}
	args = append(args, b.ScriptArgs(ratelimit.Values{})...)
	args = append(args, s.cfg.SendLag.Microseconds())
	if err := startedScript.Run(ctx, s.rdb, keys.list(), args...).Err(); err != nil {
		return fmt.Errorf("admission: started %s: %w", id, err)
	}
	return nil
}

// Calling moves a started job's charge to now, when its call is about to
// be sent: with a window limiter the provider counts the call from its
// arrival, and the handler's work between its start and the call (Redis
// reads, building the prompt; tens of ms, more on a loaded machine)
// would otherwise be left to the window margin. It needs no room while
// the start's charge still counts; a job that started before the room
// it was admitted for (admission looks ahead), or calls more than a
// window after its start, waits here for room. A window's first call
// tells admission how long its jobs prepare (part of the look-ahead). A
// token bucket that was full at admission is lowered to what the
// provider's holds less what it has not seen yet: every charge of the
// key not called yet, this one's included (running sums per key and
// dimension that admit, the call, the settle and the reconciler's expiry
// keep: lua/reservation.lua). The provider's bucket, capped
// at full, did not refill while those jobs waited for a worker and their
// handlers prepared their calls, and ours did.
func (s *Scheduler) Calling(ctx context.Context, model, id string) error {
	for {
		wait, err := s.TryCalling(ctx, model, id)
		if err != nil || wait <= 0 {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// TryCalling records a call as Calling does, once: with a window limiter
// whose room for the job is not there yet, nothing moves and it returns
// how long to wait before trying again.
func (s *Scheduler) TryCalling(ctx context.Context, model, id string) (time.Duration, error) {
	keys, b, err := s.keys(model)
	if err != nil {
		return 0, err
	}
	args := []any{s.now(), id}
	args = append(args, b.ScriptArgs(ratelimit.Values{})...)
	args = append(args, s.cfg.SendLag.Microseconds())
	us, err := callingScript.Run(ctx, s.rdb, keys.list(), args...).Int64()
	if err != nil {
		return 0, fmt.Errorf("admission: calling %s: %w", id, err)
	}
	return time.Duration(us) * time.Microsecond, nil
}

// Sent records that a job's request was written to the provider's
// connection, at most after past the start of its Calling (the caller's
// clock): with a window limiter the charge moves from the call to then
// (no later than now), so the process's part of the call's way — the
// reply from Redis, encoding the request, a loaded scheduler's delay — is
// measured instead of left to the window margin, which then covers the
// network alone. A bound, never early: after is measured from before
// Calling was sent. Nothing to do for a token bucket, or for a job whose
// reservation is settled already (a fast reply). A caller may hold it
// and give the write to the settle instead (SettleCall: llmcall does,
// for a tenth of the window).
func (s *Scheduler) Sent(ctx context.Context, model, id string, after time.Duration) error {
	keys, b, err := s.keys(model)
	if err != nil {
		return err
	}
	if !b.Limits().Windowed() || after < 0 {
		return nil
	}
	args := []any{s.now(), id}
	args = append(args, b.ScriptArgs(ratelimit.Values{})...)
	args = append(args, after.Microseconds())
	if err := sentScript.Run(ctx, s.rdb, keys.list(), args...).Err(); err != nil {
		return fmt.Errorf("admission: sent %s: %w", id, err)
	}
	return nil
}

// forget drops the ticket of a task that is gone, so nothing waits on it;
// a failure is logged (the reconciler meets the ticket again).
func (s *Scheduler) forget(ctx context.Context, model, id string) {
	keys, _, err := s.keys(model)
	if err == nil {
		err = startedScript.Run(ctx, s.rdb, keys.list(), s.now(), id).Err()
	}
	if err != nil {
		s.log.WarnContext(ctx, "dropping the ticket of a gone task failed", "task", id, "err", err)
	}
}

// Settle replaces an admitted job's estimate with its actual usage, once.
// A zero cost means no call was made (a quota refusal, a stale head, a
// job that ended before its call): the whole reservation comes back,
// whatever the bucket's policy — the provider counted nothing.
func (s *Scheduler) Settle(ctx context.Context, model, id string, actual ratelimit.Cost) error {
	return s.SettleCall(ctx, model, id, actual, NoWay)
}

// CallWay is what a call's settle tells admission of the call's way to
// the provider (a window limiter's business; a token bucket's ignores
// it).
type CallWay struct {
	// Written: the request was written at most this long after the start
	// of its Calling (the caller's clock), and Sent has not recorded it:
	// the charge moves to then as Sent moves it. Negative: not written,
	// or recorded by Sent.
	Written time.Duration
	// Arrival: the reply bounds the way from the write to the provider by
	// this (the reply's first byte less the write and the provider's
	// processing: see CallTrace.Way). Negative: no reply bounded it.
	Arrival time.Duration
	// Sync, when not nil: the reply's rate-limit headers, lowered to in
	// the settle's script (the bucket's sync, one script instead of two).
	Sync *ratelimit.Report
}

// NoWay is a CallWay that says nothing.
var NoWay = CallWay{Written: -1, Arrival: -1}

// SettleCall is Settle for a call whose way the caller knows. With a
// window limiter, the write moves the charge as Sent does (most calls
// settle before a held Sent would go out: one script instead of two);
// and when the margin is measured, what stays charged at the write stops
// counting a window after write + arrival (when the provider counted it
// at the latest) + ratelimit.MinWindowMargin, instead of the margin after
// the write. The arrival counts only for a job whose write is recorded
// (by Sent or by this write).
func (s *Scheduler) SettleCall(ctx context.Context, model, id string, actual ratelimit.Cost, way CallWay) error {
	var policy ratelimit.Policy // the bucket's own
	if actual == (ratelimit.Cost{}) {
		policy = ratelimit.PolicyRefund
	}
	return s.settle(ctx, model, id, actual, policy, way)
}

// settle settles under policy ("": the bucket's own), with what is known
// of the call's way.
func (s *Scheduler) settle(ctx context.Context, model, id string, actual ratelimit.Cost, policy ratelimit.Policy, way CallWay) error {
	keys, b, err := s.keys(model)
	if err != nil {
		return err
	}
	if policy == "" {
		policy = b.Limits().Policy
	}
	args := []any{s.now(), id, string(policy)}
	args = append(args, b.ScriptArgs(actual.Usage())...)
	windowed := (way.Arrival >= 0 || way.Written >= 0) && b.Limits().Windowed()
	if windowed || way.Sync != nil {
		// the bound keeps the least margin past the way (the provider's
		// whole milliseconds, a count taken shortly after arrival)
		arrival, written := int64(-1), int64(-1)
		if windowed && way.Arrival >= 0 {
			arrival = (way.Arrival + ratelimit.MinWindowMargin).Microseconds()
		}
		if windowed {
			written = max(way.Written.Microseconds(), -1)
		}
		args = append(args, arrival, written)
	}
	if way.Sync != nil {
		args = append(args, way.Sync.Key)
		now := time.Now()
		if s.cfg.NowFunc != nil {
			now = s.cfg.NowFunc()
		}
		args = append(args, b.ReportArgs(*way.Sync, now)...)
	}
	n, err := settleScript.Run(ctx, s.rdb, keys.list(), args...).Int()
	if err != nil {
		return fmt.Errorf("admission: settle %s: %w", id, err)
	}
	if n == 0 {
		return ratelimit.ErrNotReserved
	}
	return nil
}

// KeyOf returns the index of the API key an admitted job was charged to:
// the key its call must use, whose bucket its settle, header sync and
// 429 go to. A job without a reservation (settled, expired, never
// admitted), or a model with one key, has key 0.
func (s *Scheduler) KeyOf(ctx context.Context, model, id string) (int, error) {
	keys, b, err := s.keys(model)
	if err != nil {
		return 0, err
	}
	if b.Keys() == 1 {
		return 0, nil
	}
	r, err := s.rdb.HGet(ctx, keys.Reservations, id).Result()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("admission: key of %s: %w", id, err)
	}
	return reservationKey(r, b.Keys()), nil
}

// Cancel removes a waiting ticket (superseded work).
func (s *Scheduler) Cancel(ctx context.Context, model, id string) (bool, error) {
	keys, _, err := s.keys(model)
	if err != nil {
		return false, err
	}
	n, err := cancelScript.Run(ctx, s.rdb, keys.list(), s.now(), id).Int()
	if err != nil {
		return false, fmt.Errorf("admission: cancel %s: %w", id, err)
	}
	return n == 1, nil
}

// Take removes a ticket that still waits, so that it can be registered
// under another model (a fallback); a ticket admitted already (its task
// released) or gone is not taken (false).
func (s *Scheduler) Take(ctx context.Context, model, id string) (bool, error) {
	keys, _, err := s.keys(model)
	if err != nil {
		return false, err
	}
	n, err := cancelScript.Run(ctx, s.rdb, keys.list(), s.now(), id, "waiting").Int()
	if err != nil {
		return false, fmt.Errorf("admission: take %s: %w", id, err)
	}
	return n == 1, nil
}

// Waiting is a ticket waiting for admission, as Scheduler.Waiting lists
// it: its task's id and queue, its class, its estimate and output part,
// and when it first waited.
type Waiting struct {
	ID, Queue, Class string
	Tokens, Output   int64
	Enqueued         time.Time
}

// Waiting lists up to n of a model's waiting tickets from the offset-th,
// those that waited longest first (not in admission's order). A ticket
// delayed for later is not listed until it is due.
func (s *Scheduler) Waiting(ctx context.Context, model string, offset, n int) ([]Waiting, error) {
	keys, _, err := s.keys(model)
	if err != nil {
		return nil, err
	}
	if n <= 0 || offset < 0 {
		return nil, nil
	}
	ids, err := s.rdb.ZRange(ctx, keys.Age, int64(offset), int64(offset+n-1)).Result()
	if err != nil {
		return nil, fmt.Errorf("admission: list waiting tickets: %w", err)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	encs, err := s.rdb.HMGet(ctx, keys.Tickets, ids...).Result()
	if err != nil {
		return nil, fmt.Errorf("admission: list waiting tickets: %w", err)
	}
	out := make([]Waiting, 0, len(ids))
	for i, e := range encs {
		enc, ok := e.(string)
		if !ok {
			continue // admitted or cancelled since
		}
		st, err := decodeTicket(enc)
		if err != nil {
			continue // the reconciler says so
		}
		out = append(out, Waiting{ID: ids[i], Queue: st.Queue, Class: st.Class, Tokens: st.Tokens, Output: st.Output, Enqueued: time.UnixMicro(st.EnqueuedUS)})
	}
	return out, nil
}

// Task returns a held task (its payload rebuilds its ticket).
func (s *Scheduler) Task(queue, id string) (*asynq.TaskInfo, error) {
	if s.insp == nil {
		return nil, errors.New("admission: no inspector: held tasks cannot be read")
	}
	return s.insp.GetTaskInfo(queue, id)
}

// Bucket returns a model's bucket.
func (s *Scheduler) Bucket(model string) (*ratelimit.Bucket, bool) {
	b, ok := s.buckets[model]
	return b, ok
}

// Models lists the models admitted.
func (s *Scheduler) Models() []string {
	out := make([]string, 0, len(s.buckets))
	for m := range s.buckets {
		out = append(out, m)
	}
	return out
}

// DeleteTask deletes a held task (superseded work); a missing task is fine.
func (s *Scheduler) DeleteTask(queue, id string) {
	if s.insp == nil {
		return
	}
	if err := s.insp.DeleteTask(queue, id); err != nil && !errors.Is(err, asynq.ErrTaskNotFound) && !errors.Is(err, asynq.ErrQueueNotFound) {
		s.log.Warn("deleting a superseded task failed", "task", id, "queue", queue, "err", err)
	}
}
