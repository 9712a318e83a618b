package admission

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// RunConfig tunes the admission loop.
type RunConfig struct {
	// Capacity returns how many more jobs this process can start now
	// (idle slots minus released work not yet started). Required.
	Capacity func() int
	// ChatCapacity, when set, is how many more chat jobs this process can
	// start now, counting slots only chat may use; Capacity then counts
	// batch jobs only, and chat is admitted while every batch slot is busy.
	ChatCapacity func() int
	// Poll is the sleep when this process has no free slot. Defaults to 20ms.
	Poll time.Duration
	// MaxSleep bounds a sleep while tickets wait for room or none wait; a
	// new ticket wakes the loop at once (pub/sub), unless it is batch and
	// the head waits for tokens. Of the processes, only the last to attempt
	// attempts again when MaxSleep or the wait is over (the others stay
	// Behind it). Defaults to 250ms.
	MaxSleep time.Duration
	// ChatSleep bounds the leader's sleep while a chat ticket waits (room
	// given back by a settle may let it in before the exact wait).
	// Defaults to 50ms.
	ChatSleep time.Duration
	// IdleSleep bounds the leader's sleep while no ticket waits: new
	// tickets and delayed ones coming due wake it, and so does the
	// subscription coming back after a lost connection, so this only
	// bounds what a wake lost otherwise costs. Defaults to 30s.
	IdleSleep time.Duration
	// Behind is how far behind the leading process (the last to attempt)
	// the others' loops attempt, so its announcement reaches them first
	// and they skip an attempt it covered: Behind plus up to twice that at
	// random. Defaults to 10ms.
	Behind time.Duration
	// ReconcileEvery is the reconciler's period. Defaults to 5s.
	ReconcileEvery time.Duration
	// TicketOf rebuilds a ticket from a held task without one (a crash
	// between hold and register, or in a handler). Nil disables that repair.
	TicketOf func(*asynq.TaskInfo) (Ticket, bool)
	// Moved, when set, returns where a job now waits whose ticket
	// TicketOf rebuilt from its task: a job that moved to a fallback model
	// waits under that model, with the estimate it was moved with. It is
	// asked only when the ticket is to be registered again.
	Moved func(ctx context.Context, t Ticket) Ticket
	// Queues to reconcile.
	Queues []string
	// Process, when set, is this process's liveness record: the loop
	// beats for it every Beat and puts back the jobs of processes silent
	// for ProcessTTL. Beat defaults to 1s, ProcessTTL to 4s.
	Process    *Process
	Beat       time.Duration
	ProcessTTL time.Duration
}

// Run admits and releases until ctx ends: one loop per model, and the
// reconciler. Many processes may run it at once; each decision is atomic.
func (s *Scheduler) Run(ctx context.Context, rc RunConfig) {
	if rc.Poll == 0 {
		rc.Poll = 20 * time.Millisecond
	}
	if rc.ReconcileEvery == 0 {
		rc.ReconcileEvery = 5 * time.Second
	}
	if rc.MaxSleep == 0 {
		rc.MaxSleep = 250 * time.Millisecond
	}
	if rc.ChatSleep == 0 {
		rc.ChatSleep = 50 * time.Millisecond
	}
	if rc.IdleSleep == 0 {
		rc.IdleSleep = 30 * time.Second
	}
	if rc.Behind == 0 {
		rc.Behind = 10 * time.Millisecond
	}
	if rc.Beat == 0 {
		rc.Beat = time.Second
	}
	if rc.ProcessTTL == 0 {
		rc.ProcessTTL = 4 * time.Second
	}
	me := strconv.FormatUint(rand.Uint64(), 36)
	wake := map[string]*wakes{}
	byChannel := map[string]string{}
	var channels []string
	for model := range s.buckets {
		wake[model] = newWakes(me)
		keys, _, _ := s.keys(model)
		byChannel[keys.wake()] = model
		channels = append(channels, keys.wake())
	}
	sub := s.rdb.Subscribe(ctx, channels...)
	defer sub.Close()
	// subscribed before the first attempt: the loops hear each other's
	initial := len(channels) - 1 // confirmations still to come
	if _, err := sub.Receive(ctx); err != nil {
		initial++
		if ctx.Err() == nil {
			s.log.WarnContext(ctx, "admission wakes: subscribe failed", "err", err)
		}
	}
	go func() {
		// a subscription past the first ones is go-redis resubscribing on
		// a new connection: what was published meanwhile is lost, so every
		// loop looks again (as for a ticket it did not hear)
		for msg := range sub.ChannelWithSubscriptions() {
			switch m := msg.(type) {
			case *redis.Message:
				if w, ok := wake[byChannel[m.Channel]]; ok {
					w.hear(m.Payload)
				}
			case *redis.Subscription:
				if initial > 0 {
					initial--
					continue
				}
				if w, ok := wake[byChannel[m.Channel]]; ok {
					w.hear(resubscribed)
				}
			}
		}
	}()
	done := make(chan struct{})
	n := 0
	for model := range s.buckets {
		n++
		go func(model string) {
			defer func() { done <- struct{}{} }()
			s.loop(ctx, model, rc, wake[model])
		}(model)
	}
	if rc.Process != nil {
		n++
		go func() {
			defer func() { done <- struct{}{} }()
			s.watchProcesses(ctx, rc)
		}()
	}
	n++
	go func() {
		defer func() { done <- struct{}{} }()
		t := time.NewTicker(rc.ReconcileEvery)
		defer t.Stop()
		for pass := 0; ; pass++ {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if err := s.Reconcile(ctx, rc, pass%12 == 0); err != nil && ctx.Err() == nil {
				s.log.WarnContext(ctx, "reconcile failed", "err", err)
			}
			if err := s.ClaimKeyOrder(ctx); err != nil && ctx.Err() == nil && (pass%12 == 0 || !errors.Is(err, ErrKeyOrder)) {
				s.log.ErrorContext(ctx, "API keys listed differently by another process: calls may go out on a key other than the one charged", "err", err)
			}
		}
	}()
	for i := 0; i < n; i++ {
		<-done
	}
}

// wakes is what a model's loop hears on the model's channel: new tickets
// (their class and time) and every process's attempts (announcements).
//
// Every process runs a loop per model, and each attempt runs the whole
// admission script, so the loops share the work: after each attempt a
// loop announces what it found (its time, the wait until the head fits,
// whether its own capacity cut it short). The last to announce leads: it
// attempts when the wait is over and when a ticket arrives; the others
// stay Behind it and skip what a complete announcement covered (an
// attempt that began after the ticket came). A leader that dies or has no
// free slot costs the others Behind.
type wakes struct {
	me     string        // this process
	signal chan struct{} // a ticket arrived (coalesced)
	heard  chan heard    // the latest announcement of another process
	mu     sync.Mutex
	leader string // the last process to announce
	ticket int64  // the latest ticket's time (µs, the script's clock)
	chat   bool   // a chat ticket among those not covered yet
	seen   int64  // the latest complete attempt's time
	// lead: this process led when the latest uncovered ticket was heard.
	// Every process hears the channel in one order, so exactly one led at
	// that point; asked later, when the loop takes the wake, an
	// announcement heard since (an attempt begun before the ticket,
	// published after it) may have made each process think another leads.
	lead   bool
	due    []dueWake // delayed tickets coming due, not yet taken by the loop
	chats  int       // chat tickets heard less chats announced admitted (0 when an attempt finds none waiting)
	chatAt time.Time // the last chat ticket heard
	// alone: the last announcement reached this process only (no other
	// loop listens), and no other process announced since; announced:
	// when that was
	alone     bool
	announced time.Time
}

// resubscribed is what a loop hears when its subscription comes back on
// a new connection: what was published meanwhile is lost.
const resubscribed = "resubscribed"

// announceAlone is how often a loop that is alone on its channel still
// announces: the announcement's reply counts the listeners, so a
// process that starts is heard of within it (its own announcements end
// the quiet at once).
const announceAlone = time.Second

// announce publishes an attempt's announcement on channel, except while
// this loop is alone on it (nobody else to skip what it covered), at
// most once an announceAlone then: the loop hears its own unpublished
// announcement at once, as it would through the channel.
func (w *wakes) announce(ctx context.Context, rdb redis.UniversalClient, channel, msg string) {
	now := time.Now()
	w.mu.Lock()
	quiet := w.alone && now.Sub(w.announced) < announceAlone
	w.mu.Unlock()
	if quiet {
		w.hear(msg)
		return
	}
	n, err := rdb.Publish(ctx, channel, msg).Result()
	w.mu.Lock()
	w.alone, w.announced = err == nil && n <= 1, now
	w.mu.Unlock()
}

// dueWake is a delayed ticket's due time, and whether this process led
// when it was heard.
type dueWake struct {
	at   time.Time
	lead bool
}

type heard struct {
	wait     time.Duration // 0: nothing waits for tokens
	complete bool          // the attempt was not cut short by the announcer's capacity
	idle     bool          // complete, and no ticket waits at all
}

func newWakes(me string) *wakes {
	return &wakes{me: me, signal: make(chan struct{}, 1), heard: make(chan heard, 1)}
}

// announcement is the payload of an attempt's announcement.
func announcement(me string, at int64, wait time.Duration, complete bool, chats int) string {
	c := "0"
	if complete {
		c = "1"
	}
	return "a|" + me + "|" + strconv.FormatInt(wait.Microseconds(), 10) + "|" + c + "|" + strconv.FormatInt(at, 10) + "|" + strconv.Itoa(chats)
}

// hear takes one message, in the channel's order: "t|class|µs" (a
// ticket), "a|process|wait µs|complete|µs|chats admitted" (an attempt) or
// "d|µs" (a delayed ticket's due time); anything else counts as a chat
// ticket that only a later complete attempt covers.
func (w *wakes) hear(payload string) {
	f := strings.Split(payload, "|")
	if (len(f) == 5 || len(f) == 6) && f[0] == "a" {
		wait, _ := strconv.ParseInt(f[2], 10, 64)
		at, _ := strconv.ParseInt(f[4], 10, 64)
		h := heard{wait: time.Duration(wait) * time.Microsecond, complete: f[3] == "1"}
		h.idle = h.complete && wait == 0 && at > 0
		w.mu.Lock()
		w.leader = f[1]
		if f[1] != w.me {
			w.alone = false // another loop listens and attempts
		}
		if len(f) == 6 {
			n, _ := strconv.Atoi(f[5])
			w.chats = max(w.chats-n, 0)
		}
		if h.idle {
			w.chats = 0
		}
		if h.complete && at > w.seen {
			w.seen = at
			if w.seen >= w.ticket {
				w.chat = false
			}
		}
		w.mu.Unlock()
		if f[1] == w.me {
			return
		}
		for { // keep the latest
			select {
			case w.heard <- h:
				return
			default:
			}
			select {
			case <-w.heard:
			default:
			}
		}
	}
	if len(f) == 2 && f[0] == "d" { // a delayed ticket: due then
		if us, err := strconv.ParseInt(f[1], 10, 64); err == nil {
			w.mu.Lock()
			if len(w.due) < 1000 {
				w.due = append(w.due, dueWake{time.UnixMicro(us), w.leadsLocked()})
			}
			w.mu.Unlock()
			select {
			case w.signal <- struct{}{}:
			default:
			}
			return
		}
	}
	w.mu.Lock()
	at := w.seen + 1 // unknown: after every attempt heard so far
	chat := true
	if len(f) == 3 && f[0] == "t" {
		if v, err := strconv.ParseInt(f[2], 10, 64); err == nil {
			at = v
		}
		chat = f[1] == "chat"
	}
	if at > w.seen {
		w.ticket = max(w.ticket, at)
		w.chat = w.chat || chat
		// the latest ticket's leader attempts after it, covering the
		// earlier ones; a resubscription, heard outside the channel's
		// order after wakes may have been lost, has every loop look
		w.lead = w.leadsLocked() || payload == resubscribed
	}
	if chat {
		w.chats++
		w.chatAt = time.Now()
	}
	w.mu.Unlock()
	select {
	case w.signal <- struct{}{}:
	default:
	}
}

// uncovered reports whether a ticket came that no complete attempt has
// seen, whether one of those is chat, and whether this process led when
// the latest of them was heard (it attempts; the others stay Behind).
func (w *wakes) uncovered() (any, chat, lead bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ticket > w.seen, w.chat, w.lead
}

// dues takes the delayed tickets' due times heard since the last call.
func (w *wakes) dues() []dueWake {
	w.mu.Lock()
	defer w.mu.Unlock()
	d := w.due
	w.due = nil
	return d
}

// chatWaits reports whether a chat ticket may still wait: counted, and
// heard within the last 5s (a count that drifts, a ticket cancelled
// unseen, costs at most that many quick looks).
func (w *wakes) chatWaits() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.chats > 0 && time.Since(w.chatAt) < 5*time.Second
}

// leadsLocked reports whether this process announced last, or nobody
// has; w.mu is held.
func (w *wakes) leadsLocked() bool {
	return w.leader == w.me || w.leader == ""
}

// sleepFor is the sleep after an attempt whose head waits wait: at most
// MaxSleep (room given back may let it in earlier), IdleSleep when no
// ticket waits at all (idle; not a paused model, whose attempt has no
// time).
func sleepFor(rc RunConfig, wait time.Duration, idle bool) time.Duration {
	switch {
	case idle:
		return rc.IdleSleep
	case wait <= 0 || wait > rc.MaxSleep:
		return rc.MaxSleep
	}
	return wait
}

func earliest(a, b time.Time) time.Time {
	switch {
	case a.IsZero():
		return b
	case b.IsZero() || a.Before(b):
		return a
	}
	return b
}

// jitter is how far behind the leader the others stay: enough for its
// announcement to arrive first.
func jitter(behind time.Duration) time.Duration {
	return behind + rand.N(2*behind)
}

func (s *Scheduler) loop(ctx context.Context, model string, rc RunConfig, w *wakes) {
	keys, _, _ := s.keys(model)
	backoff := rc.Poll
	var chatAt time.Time // with batch slots full: when chat is worth another try
	next := time.Now()   // the next attempt of this loop's own
	var follow time.Time // the next look at tickets others may have covered
	var bound time.Time  // the head waits for tokens until then
	var due time.Time    // the earliest delayed ticket not yet due at the last attempt
	timer := time.NewTimer(0)
	defer timer.Stop()
	for ctx.Err() == nil {
		timer.Reset(max(time.Until(earliest(earliest(next, follow), due)), 0))
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
			if now := time.Now(); now.Before(next) && (due.IsZero() || now.Before(due)) { // a follow-up
				follow = time.Time{}
				if any, _, _ := w.uncovered(); !any {
					continue
				}
			}
		case h := <-w.heard: // another process attempted
			now := time.Now()
			if !h.complete { // its capacity cut it short: there may be more for us
				next = earliest(next, now.Add(jitter(rc.Behind)))
				continue
			}
			bound = time.Time{}
			if h.wait > 0 {
				bound = now.Add(h.wait)
			}
			next = now.Add(sleepFor(rc, h.wait, h.idle) + jitter(rc.Behind))
			continue
		case <-w.signal: // a ticket, or a delayed one's due time
			chatAt = time.Time{}
			now := time.Now()
			for _, d := range w.dues() {
				if !d.lead {
					d.at = d.at.Add(jitter(rc.Behind))
				}
				due = earliest(due, d.at)
			}
			any, chat, lead := w.uncovered()
			if !any || (!chat && now.Before(bound)) {
				// seen already; or batch while the head waits for tokens:
				// it waits its turn (the attempt at bound, or within MaxSleep)
				continue
			}
			if !lead {
				follow = earliest(follow, now.Add(jitter(rc.Behind)))
				continue
			}
		}
		if !due.After(time.Now()) {
			due = time.Time{} // this attempt registers it (or the next, if this one cannot run)
		}
		budget, chat := rc.Capacity(), 0
		if rc.ChatCapacity != nil {
			chat = rc.ChatCapacity()
		}
		if budget <= 0 && (chat <= 0 || time.Now().Before(chatAt)) {
			next = time.Now().Add(rc.Poll)
			continue
		}
		adm, wait, at, err := s.attempt(ctx, model, max(budget, chat), budget)
		if err != nil {
			if ctx.Err() == nil {
				s.log.WarnContext(ctx, "admission failed", "model", model, "err", err)
			}
			next = time.Now().Add(backoff)
			backoff = min(backoff*2, 2*time.Second)
			continue
		}
		backoff = rc.Poll
		s.Release(ctx, adm)
		// cut short by this process's capacity: the others may admit more
		complete := len(adm) < budget
		chats := 0
		for _, a := range adm {
			if a.Class == "chat" {
				chats++
			}
		}
		w.announce(ctx, s.rdb, keys.wake(), announcement(w.me, at, wait, complete, chats))
		now := time.Now()
		follow = time.Time{}
		bound = time.Time{}
		if wait > 0 {
			bound = now.Add(wait)
		}
		if len(adm) > 0 && !complete {
			next = now // more may fit in slots this process has yet to see
			continue
		}
		// nothing (more) fits until wait (exact), or nothing waits: sleep
		// until then, or until a new ticket arrives
		idle := complete && wait == 0 && at > 0
		wait = sleepFor(rc, wait, idle)
		if !idle && w.chatWaits() { // a chat may wait for room a settle gives back
			wait = min(wait, rc.ChatSleep)
		}
		if budget <= 0 { // only chat could go: watch for a batch slot meanwhile
			chatAt = now.Add(wait)
			next = now.Add(rc.Poll)
			continue
		}
		next = now.Add(wait)
	}
}
