package admission

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/ratelimit"
)

// NotifyQueue is the queue of a ticket whose caller waits in-process
// for its admission instead of an asynq task (the gateway's requests).
// Such a ticket takes its place in the same global order; on admission
// the loop publishes its id instead of calling RunTask, and the caller
// reports back through Started and Settle like a worker, or takes the
// ticket back with Withdraw.
const NotifyQueue = "prq:notify"

// ErrRejected is Await's answer for a ticket admission dropped because
// it can never fit the model's bucket.
var ErrRejected = errors.New("admission: the request can never fit the model's bucket")

// admittedChannel is where a model's notify admissions are published.
func (k keySet) admittedChannel() string { return k.Tickets + ":admitted" }

// notify wakes the caller waiting on an admitted (or rejected) notify
// ticket. A lost message costs only latency: Await also polls the state.
func (s *Scheduler) notify(ctx context.Context, a Admitted) {
	keys, _, err := s.keys(a.Model)
	if err != nil {
		return
	}
	if err := s.rdb.Publish(ctx, keys.admittedChannel(), a.ID).Err(); err != nil {
		s.log.WarnContext(ctx, "notifying an admitted request failed; it notices by polling", "ticket", a.ID, "err", err)
	}
}

// Waiter waits for the admission of notify tickets: one subscription
// per process to every model's admitted channel, shared by all waiters.
type Waiter struct {
	s    *Scheduler
	sub  *redis.PubSub
	poll time.Duration

	mu      sync.Mutex
	waiting map[string]chan struct{}
}

// NewWaiter subscribes to the admissions of every model. poll bounds how
// long a lost notification delays a caller (default 250ms). Close it when
// done.
func (s *Scheduler) NewWaiter(ctx context.Context, poll time.Duration) (*Waiter, error) {
	if poll <= 0 {
		poll = 250 * time.Millisecond
	}
	var channels []string
	for model := range s.buckets {
		keys, _, _ := s.keys(model)
		channels = append(channels, keys.admittedChannel())
	}
	sub := s.rdb.Subscribe(ctx, channels...)
	for range channels {
		if _, err := sub.Receive(ctx); err != nil {
			sub.Close()
			return nil, fmt.Errorf("admission: subscribe to admissions: %w", err)
		}
	}
	w := &Waiter{s: s, sub: sub, poll: poll, waiting: map[string]chan struct{}{}}
	go func() {
		for msg := range sub.Channel() {
			w.mu.Lock()
			c := w.waiting[msg.Payload]
			w.mu.Unlock()
			if c != nil {
				select {
				case c <- struct{}{}:
				default:
				}
			}
		}
	}()
	return w, nil
}

// Close ends the subscription.
func (w *Waiter) Close() error { return w.sub.Close() }

// Await registers t (its Queue must be NotifyQueue) and waits until it
// is admitted (nil: its charge is in the bucket; call Started, then
// Settle), rejected (ErrRejected), or ctx ends (ctx's error: call
// Withdraw, admission may have raced the deadline).
func (w *Waiter) Await(ctx context.Context, t Ticket) error {
	if t.Queue != NotifyQueue {
		return fmt.Errorf("admission: await %s: queue must be %s", t.ID, NotifyQueue)
	}
	keys, _, err := w.s.keys(t.Model)
	if err != nil {
		return err
	}
	c := make(chan struct{}, 1)
	w.mu.Lock()
	w.waiting[t.ID] = c
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		delete(w.waiting, t.ID)
		w.mu.Unlock()
	}()
	if _, err := w.s.Register(ctx, t); err != nil {
		return err
	}
	tick := time.NewTicker(w.poll)
	defer tick.Stop()
	for {
		admitted, gone, err := w.state(ctx, keys, t.ID)
		switch {
		case err != nil && ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			return err
		case admitted:
			return nil
		case gone:
			return ErrRejected
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c:
		case <-tick.C:
		}
	}
}

// state reads whether a ticket holds a reservation (admitted: the charge
// is made in the same step) or is gone without one (rejected, or
// withdrawn).
func (w *Waiter) state(ctx context.Context, keys keySet, id string) (admitted, gone bool, err error) {
	pipe := w.s.rdb.Pipeline()
	res := pipe.HExists(ctx, keys.Reservations, id)
	tic := pipe.HExists(ctx, keys.Tickets, id)
	if _, err := pipe.Exec(ctx); err != nil {
		return false, false, fmt.Errorf("admission: await %s: %w", id, err)
	}
	return res.Val(), !res.Val() && !tic.Val(), nil
}

// Withdraw takes back a notify ticket whose caller stopped waiting (its
// deadline passed, or its client left): the ticket is cancelled and, when
// admission raced the caller, the charge is given back in full, since no
// call was made. It reports whether there was a charge to give back.
func (s *Scheduler) Withdraw(ctx context.Context, model, id string) (refunded bool, err error) {
	if _, err := s.Cancel(ctx, model, id); err != nil {
		return false, err
	}
	// refund whatever the bucket's policy: the provider saw nothing
	err = s.settle(ctx, model, id, ratelimit.Cost{}, ratelimit.PolicyRefund, NoWay)
	if errors.Is(err, ratelimit.ErrNotReserved) {
		return false, nil
	}
	return err == nil, err
}
