package admission

import (
	"context"
	"errors"
	"time"

	"github.com/hibiken/asynq"
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
	// new ticket wakes the loop at once (pub/sub). Defaults to 250ms.
	MaxSleep time.Duration
	// ReconcileEvery is the reconciler's period. Defaults to 5s.
	ReconcileEvery time.Duration
	// TicketOf rebuilds a ticket from a held task without one (a crash
	// between hold and register, or in a handler). Nil disables that repair.
	TicketOf func(*asynq.TaskInfo) (Ticket, bool)
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
	if rc.Beat == 0 {
		rc.Beat = time.Second
	}
	if rc.ProcessTTL == 0 {
		rc.ProcessTTL = 4 * time.Second
	}
	wake := map[string]chan struct{}{}
	byChannel := map[string]string{}
	var channels []string
	for model := range s.buckets {
		wake[model] = make(chan struct{}, 1)
		keys, _, _ := s.keys(model)
		byChannel[keys.wake()] = model
		channels = append(channels, keys.wake())
	}
	sub := s.rdb.Subscribe(ctx, channels...)
	defer sub.Close()
	go func() {
		for msg := range sub.Channel() {
			if c, ok := wake[byChannel[msg.Channel]]; ok {
				select {
				case c <- struct{}{}:
				default:
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

func (s *Scheduler) loop(ctx context.Context, model string, rc RunConfig, wake <-chan struct{}) {
	backoff := rc.Poll
	var chatAt time.Time // with batch slots full: when chat is worth another try
	for ctx.Err() == nil {
		budget, chat := rc.Capacity(), 0
		if rc.ChatCapacity != nil {
			chat = rc.ChatCapacity()
		}
		if budget <= 0 && (chat <= 0 || time.Now().Before(chatAt)) {
			if sleep(ctx, rc.Poll, wake) {
				chatAt = time.Time{} // a new ticket
			}
			continue
		}
		adm, wait, err := s.admit(ctx, model, max(budget, chat), budget)
		if err != nil {
			if ctx.Err() == nil {
				s.log.WarnContext(ctx, "admission failed", "model", model, "err", err)
			}
			sleep(ctx, backoff, nil)
			backoff = min(backoff*2, 2*time.Second)
			continue
		}
		backoff = rc.Poll
		s.Release(ctx, adm)
		if len(adm) > 0 {
			continue
		}
		// nothing fits until wait (exact), or nothing waits: sleep until
		// then, or until a new ticket arrives
		if wait <= 0 || wait > rc.MaxSleep {
			wait = rc.MaxSleep
		}
		if budget <= 0 { // only chat could go: watch for a batch slot meanwhile
			chatAt = time.Now().Add(wait)
			continue
		}
		sleep(ctx, wait, wake)
	}
}

// sleep waits d, or until ctx ends or wake fires; it reports a wake.
func sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	case <-wake:
		return true
	}
	return false
}
