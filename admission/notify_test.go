package admission_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/ratelimit"
)

// TestNotifyTickets: a notify ticket (a gateway request) waits in the
// same order as held tasks; on admission its waiter wakes with the charge
// made; a waiter whose deadline passes withdraws the ticket, and when
// admission raced the deadline the charge comes back in full; a ticket
// that can never fit is rejected at once.
func TestNotifyTickets(t *testing.T) {
	t.Parallel()
	rdb := redistest.Shared(t).Client(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	model := fmt.Sprintf("notify-%d", time.Now().UnixNano())
	// 100 tokens a day: no refill worth counting during the test
	b, err := ratelimit.NewBucket(rdb, model, "sk", ratelimit.Limits{RequestsPerPeriod: 1000, TokensPerPeriod: 100, Period: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// no send lag: its refill (a fraction of a token here) would blur
	// the figures this test reads
	s, err := admission.New(rdb, map[string]*ratelimit.Bucket{model: b}, nil, nil, admission.Config{SendLag: -1}, discard)
	if err != nil {
		t.Fatal(err)
	}
	w, err := s.NewWaiter(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx, admission.RunConfig{Capacity: func() int { return 8 }})
	}()
	defer func() { cancel(); <-done }()
	tokens := func() int64 {
		c, _, err := b.Available(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return c.Tokens
	}
	ticket := func(id string, n int64) admission.Ticket {
		return admission.Ticket{ID: model + "-" + id, Queue: admission.NotifyQueue, Model: model, Class: "paid", Tenant: "key:a", Tokens: n}
	}

	// admitted: the waiter wakes with the charge in the bucket
	a := ticket("a", 60)
	if err := w.Await(ctx, a); err != nil {
		t.Fatalf("await a: %v", err)
	}
	if got := tokens(); got > 40 {
		t.Fatalf("after admitting 60 of 100 the bucket has %d", got)
	}
	if err := s.Started(ctx, model, a.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.Settle(ctx, model, a.ID, ratelimit.Cost{Requests: 1, Tokens: 50}); err != nil {
		t.Fatal(err)
	}
	left := tokens() // the debt policy keeps the estimate charged, as the provider does
	if left < 40 || left > 41 {
		t.Fatalf("after settling 50 of 60 the bucket has %d, want 40", left)
	}

	// no room before the deadline: withdrawn, nothing charged, gone
	bt := ticket("b", 80)
	dctx, dcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err = w.Await(dctx, bt)
	dcancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("await b: %v, want the deadline", err)
	}
	if refunded, err := s.Withdraw(ctx, model, bt.ID); err != nil || refunded {
		t.Fatalf("withdraw b: refunded %v, %v; want nothing to refund", refunded, err)
	}
	st, err := s.Stats(ctx, model)
	if err != nil || st.Backlog["paid"] != 0 || st.Released != 0 {
		t.Fatalf("after withdrawing, waiting %v released %d (%v), want none", st.Backlog, st.Released, err)
	}

	// admission raced the deadline: the charge comes back in full
	c := ticket("c", 30) // registered, its caller already gone
	if _, err := s.Register(ctx, c); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); tokens() > left-30 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if got := tokens(); got > left-30 {
		t.Fatalf("ticket c never admitted: bucket %d", got)
	}
	if refunded, err := s.Withdraw(ctx, model, c.ID); err != nil || !refunded {
		t.Fatalf("withdraw c after admission: refunded %v, %v; want the charge back", refunded, err)
	}
	if got := tokens(); got < left || got > left+1 {
		t.Fatalf("after the refund the bucket has %d, want %d", got, left)
	}

	// never fits the bucket: rejected, not left waiting for the deadline
	if err := w.Await(ctx, ticket("d", 500)); !errors.Is(err, admission.ErrRejected) {
		t.Fatalf("await d: %v, want ErrRejected", err)
	}
}
