package llmcall

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/ratelimit"
)

// Admission is what a call needs of admission (an *admission.Scheduler,
// or a benchmark's baseline): the model's bucket, the key a ticket was
// charged to, the settle, and the pauses of the account policy.
type Admission interface {
	Bucket(model string) (*ratelimit.Bucket, bool)
	KeyOf(ctx context.Context, model, id string) (int, error)
	Settle(ctx context.Context, model, id string, actual ratelimit.Cost) error
	Pause(ctx context.Context, model, reason string, d time.Duration) error
	PauseKey(ctx context.Context, model string, key int, reason string, d time.Duration) error
}

// Mover is an Admission that moves a ticket's charge to its call (an
// *admission.Scheduler; a baseline need not).
type Mover interface {
	// Calling moves the charge to the moment the call is sent.
	Calling(ctx context.Context, model, id string) error
	// Sent moves it to the request's write, at most after past the
	// start of Calling.
	Sent(ctx context.Context, model, id string, after time.Duration) error
	// SettleCall is Settle with what the call knows of its way: its
	// write, when Sent has not recorded it, and its reply's bound on its
	// arrival.
	SettleCall(ctx context.Context, model, id string, actual ratelimit.Cost, way admission.CallWay) error
}

var (
	_ Admission = (*admission.Scheduler)(nil)
	_ Mover     = (*admission.Scheduler)(nil)
)

// DefaultPause is how long an account problem pauses a model or a key
// when Protocol's pause is not set.
const DefaultPause = 5 * time.Minute

// Protocol makes the steps of admitted calls on one admission.
type Protocol struct {
	adm   Admission
	log   *slog.Logger
	pause time.Duration
}

// New returns the protocol of calls admitted by adm; an account problem
// pauses a model or a key for pause (0: DefaultPause).
func New(adm Admission, log *slog.Logger, pause time.Duration) *Protocol {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if pause <= 0 {
		pause = DefaultPause
	}
	return &Protocol{adm: adm, log: log, pause: pause}
}

// Call is one admitted call, from its key's choice to its settle.
type Call struct {
	p      *Protocol
	model  Model
	ticket string
	key    int
	bucket *ratelimit.Bucket // the model's (nil: none)
	keyB   *ratelimit.Bucket // the key's (nil: a key this process does not have)
	trace  *admission.CallTrace
	start  time.Time     // the request's send, for the headers' age
	way    time.Duration // the first reply's bound on the way to the provider; -1: none (held's lock)
	// the request's write, held for the settle (Mover.Sent after a
	// while: most calls settle first, and take it along)
	held struct {
		sync.Mutex
		calling time.Time   // before Calling: what the write is measured from
		timer   *time.Timer // Sent, when the settle has not come by then
		done    bool        // Sent went, or the settle took the write
	}
}

// Begin starts the call of the ticket admitted on model m: the key
// admission charged it to (the call uses it, its bucket takes the
// provider's headers).
func (p *Protocol) Begin(ctx context.Context, m Model, ticket string) *Call {
	c := &Call{p: p, model: m, ticket: ticket, way: -1}
	if m.Keys != 1 {
		k, err := p.adm.KeyOf(ctx, m.Name, ticket)
		if err != nil || k < 0 || (m.Keys > 1 && k >= m.Keys) {
			p.log.WarnContext(ctx, "could not read which key the call was admitted on; calling with the first", "task", ticket, "model", m.Name, "err", err)
			k = 0
		}
		c.key = k
	}
	c.bucket, _ = p.adm.Bucket(m.Name)
	if c.bucket != nil {
		c.keyB = c.bucket.ForKey(c.key)
	}
	return c
}

// Key is the index of the model's API key the call uses.
func (c *Call) Key() int { return c.key }

// Ticket is the id of the admitted ticket the call is made under.
func (c *Call) Ticket() string { return c.ticket }

// Calling moves the ticket's charge to the call (a window counts it from
// now, a bucket what the provider has not seen yet) and returns rctx,
// the request's context, traced: the request's write moves the charge
// again, with the settle when it comes within sentHold of the write,
// else then (Mover.Sent). ctx bounds the admission's own calls.
func (c *Call) Calling(ctx, rctx context.Context) context.Context {
	start := time.Now()
	c.held.Lock()
	c.held.calling = start
	c.held.Unlock()
	var sent func(time.Duration)
	if mv, ok := c.p.adm.(Mover); ok {
		if err := mv.Calling(ctx, c.model.Name, c.ticket); err != nil {
			c.wayUnknown()
			c.p.log.WarnContext(ctx, "could not move the charge to its call; the window margin, at its default for two windows (a bucket: the start's correction), covers the difference", "task", c.ticket, "model", c.model.Name, "err", err)
		}
		hold := sentHold(c.bucket)
		sent = func(after time.Duration) {
			c.held.Lock()
			defer c.held.Unlock()
			if !c.held.done {
				c.held.timer = time.AfterFunc(hold, func() { c.sent(ctx, mv, after) })
			}
		}
	}
	rctx, c.trace = admission.TraceCall(rctx, start, sent)
	c.start = time.Now()
	return rctx
}

// sentHold is how long a call's write waits for its settle before it
// moves the charge on its own: a tenth of the window (of the
// sub-window, when shorter), at most 10 s. A window admits ahead by at
// most a tenth of its span, so a charge held at its call's time this
// much longer still counts wherever a decision looks; a token bucket
// moves nothing (no hold).
func sentHold(b *ratelimit.Bucket) time.Duration {
	if b == nil || !b.Limits().Windowed() {
		return 0
	}
	l := b.Limits()
	span := l.Window
	if span <= 0 {
		span = l.Period
	}
	if l.SubWindow > 0 && l.SubWindow < span {
		span = l.SubWindow
	}
	return min(span/10, 10*time.Second)
}

// sent moves the charge to the request's write, unless the settle took
// it along.
func (c *Call) sent(ctx context.Context, mv Mover, after time.Duration) {
	c.held.Lock()
	done := c.held.done
	c.held.done = true
	c.held.Unlock()
	if done {
		return
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := mv.Sent(sctx, c.model.Name, c.ticket, after); err != nil {
		c.wayUnknown()
		c.p.log.WarnContext(ctx, "could not move the charge to its request's write; the window margin, at its default for two windows, covers the difference", "task", c.ticket, "model", c.model.Name, "err", err)
	}
}

// SettleWay is what the call's settle tells admission of its way
// (Mover.SettleCall; Settle passes it): the write, unless Sent recorded
// it (the held Sent no longer goes), and the first reply's bound on the
// arrival (see admission.CallTrace.Way).
func (c *Call) SettleWay() admission.CallWay {
	c.held.Lock()
	defer c.held.Unlock()
	w := admission.CallWay{Written: -1, Arrival: c.way}
	if c.held.done || c.trace == nil {
		return w
	}
	c.held.done = true
	if c.held.timer != nil {
		c.held.timer.Stop()
	}
	if at := c.trace.WroteAt(); !at.IsZero() {
		w.Written = at.Sub(c.held.calling)
	}
	return w
}

// wayUnknown holds the model's window margin at its default for a while:
// a charge stayed short of its call's write.
func (c *Call) wayUnknown() {
	if c.bucket != nil {
		c.bucket.WayUnknown()
	}
}

// Wrote reports whether the request was written out (the provider may
// have seen it).
func (c *Call) Wrote() bool { return c.trace != nil && c.trace.Wrote() }

// Observe takes the provider's reply headers (any status): the request's
// way to the provider, for a window's margin and the charge's arrival,
// and the key's bucket synced with the rate-limit headers (a 429
// empties it until the retry time). A flex refusal is not observed: it
// hit no limit.
func (c *Call) Observe(ctx context.Context, status int, h http.Header) {
	if h == nil {
		return
	}
	ctx = context.WithoutCancel(ctx)
	c.observeWay(h)
	if c.keyB == nil {
		return
	}
	written, latest := c.reportTimes(h)
	now := time.Now()
	if _, err := c.keyB.SyncBetween(ctx, status, h, now.Sub(written), now.Sub(latest)); err != nil {
		c.p.log.WarnContext(ctx, "could not sync the key's bucket with the provider's headers; admission goes by its own count", "model", c.model.Name, "key", c.key, "err", err)
	}
}

// observeWay takes the request's way to the provider from the reply's
// headers, for a window's margin and the charge's arrival.
func (c *Call) observeWay(h http.Header) {
	if c.bucket != nil && c.trace != nil {
		if way, ok := c.trace.Way(h); ok {
			c.bucket.ObserveWay(way)
			c.held.Lock()
			if c.way < 0 {
				c.way = way // for the settle: the charge's arrival
			}
			c.held.Unlock()
		}
	}
}

// reportTimes bound when the provider counted what its headers report:
// the call's arrival, after its send and no later than what its reply
// bounds (without a bound: as of the send, upto = age).
func (c *Call) reportTimes(h http.Header) (written, latest time.Time) {
	written, latest = c.start, c.start
	if c.trace != nil {
		if at, ok := c.trace.Arrival(h); ok {
			latest = at
		}
	}
	return written, latest
}

// ObserveSettle is Observe (h nil: no reply to observe) and then Settle,
// with the key's bucket lowered to the provider's headers in the
// settle's script (one script instead of two) when admission moves
// charges (Mover); a 429 still empties the bucket at once.
func (c *Call) ObserveSettle(ctx context.Context, status int, h http.Header, cost ratelimit.Cost) {
	mv, ok := c.p.adm.(Mover)
	if h == nil || !ok || c.keyB == nil {
		c.Observe(ctx, status, h)
		c.Settle(ctx, cost)
		return
	}
	ctx = context.WithoutCancel(ctx)
	c.observeWay(h)
	written, latest := c.reportTimes(h)
	rep, _, err := c.keyB.Report(ctx, status, h, written, latest)
	if err != nil {
		c.p.log.WarnContext(ctx, "could not sync the key's bucket with the provider's headers; admission goes by its own count", "model", c.model.Name, "key", c.key, "err", err)
	}
	way := c.SettleWay()
	way.Sync = rep
	err = mv.SettleCall(ctx, c.model.Name, c.ticket, cost, way)
	if err != nil && !errors.Is(err, ratelimit.ErrNotReserved) {
		c.p.log.WarnContext(ctx, "could not settle the call in admission nor sync its key's bucket; the bucket keeps its estimate until the reservation expires", "task", c.ticket, "model", c.model.Name, "err", err)
	}
}

// Resolve applies the pause policy to o: an account problem pauses the
// key's admissions when the model has several keys (its jobs go to the
// others meanwhile), else the model's, and reads as AccountKey or
// AccountModel. why is the provider's failure (the pause's reason).
func (c *Call) Resolve(ctx context.Context, o Outcome, why error) Outcome {
	if !o.Account() {
		return o
	}
	reason := "provider account problem"
	if why != nil {
		reason = why.Error()
	}
	ctx = context.WithoutCancel(ctx)
	log, model := c.p.log, c.model.Name
	if c.bucket != nil && c.bucket.Keys() > 1 {
		log.ErrorContext(ctx, "provider account problem: pausing the key's admissions", "model", model, "key", c.key, "key_hash", c.bucket.KeyLabel(c.key), "pause", c.p.pause, "err", why)
		if err := c.p.adm.PauseKey(ctx, model, c.key, reason, c.p.pause); err != nil {
			log.ErrorContext(ctx, "could not pause the key's admissions; its calls keep failing until the account is fixed", "model", model, "key", c.key, "err", err)
		}
		return AccountKey
	}
	log.ErrorContext(ctx, "provider account problem: pausing the model's admissions", "model", model, "pause", c.p.pause, "err", why)
	if err := c.p.adm.Pause(ctx, model, reason, c.p.pause); err != nil {
		log.ErrorContext(ctx, "could not pause the model's admissions; its calls keep failing until the account is fixed", "model", model, "err", err)
	}
	return AccountModel
}

// Settle settles the ticket's charge in the model's bucket with cost (a
// Settlement's Bucket), and the call's way when a reply bounded it (a
// window's charge stops counting by its arrival). A ticket holding no
// reservation (settled already, a baseline without a bucket) is fine;
// another failure is logged: the bucket keeps the estimate until the
// reservation expires.
func (c *Call) Settle(ctx context.Context, cost ratelimit.Cost) {
	ctx = context.WithoutCancel(ctx)
	var err error
	if mv, ok := c.p.adm.(Mover); ok {
		err = mv.SettleCall(ctx, c.model.Name, c.ticket, cost, c.SettleWay())
	} else {
		err = c.p.adm.Settle(ctx, c.model.Name, c.ticket, cost)
	}
	if err != nil && !errors.Is(err, ratelimit.ErrNotReserved) {
		c.p.log.WarnContext(ctx, "could not settle the call in admission; the bucket keeps its estimate until the reservation expires", "task", c.ticket, "model", c.model.Name, "err", err)
	}
}
