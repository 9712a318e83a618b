package admission_test

import (
	"context"
	"testing"
	"time"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/ratelimit"
)

// TestInputAndOutputCharged: a model limited on input and output tokens
// apart charges each ticket its input part (the estimate less its
// output) and its output part (max_tokens); admission stops at whichever
// limit binds first, with that limit's exact wait. A ticket that does not
// split its estimate charges all of it to each; a settle with the real
// usage corrects each dimension under a refund policy.
func TestInputAndOutputCharged(t *testing.T) {
	ctx := context.Background()
	limits := ratelimit.Limits{RequestsPerPeriod: 1000, TokensPerPeriod: 11000, InputTokensPerPeriod: 10000, OutputTokensPerPeriod: 1000,
		Period: time.Second, Policy: ratelimit.PolicyRefund}
	s, b, clk, model := newKeyed(t, 1, limits)
	for i, id := range []string{"a", "b", "c"} {
		tk := admission.Ticket{ID: id, Queue: "q", Model: model, Class: "paid", Tenant: "t", PRSeq: int64(i), Tokens: 700, Output: 400}
		if _, err := s.Register(ctx, tk); err != nil {
			t.Fatal(err)
		}
	}
	adm, wait, err := s.Admit(ctx, model, 3)
	if err != nil {
		t.Fatal(err)
	}
	// output: 400 + 400 of 1000; a third would need 1200
	if len(adm) != 2 || wait != 200*time.Millisecond {
		t.Fatalf("admitted %d with wait %s, want 2 and 200ms (the output limit's refill of 200)", len(adm), wait)
	}
	avail, _, _ := b.Available(ctx)
	if avail.Input != 9400 || avail.Output != 200 || avail.Tokens != 9600 {
		t.Fatalf("after two: %+v, want input 9400, output 200, tokens 9600", avail)
	}
	if err := s.Started(ctx, model, adm[0].ID); err != nil {
		t.Fatal(err)
	}
	// the call used 250 input and 50 output tokens: 350 output comes back
	if err := s.Settle(ctx, model, adm[0].ID, ratelimit.Cost{Requests: 1, Tokens: 300, Input: 250, Output: 50}); err != nil {
		t.Fatal(err)
	}
	avail, _, _ = b.Available(ctx)
	if avail.Output != 550 || avail.Input != 9450 {
		t.Fatalf("after the settle: %+v, want output 550 and input 9450", avail)
	}
	if adm, _, _ := s.Admit(ctx, model, 3); len(adm) != 1 {
		t.Fatalf("after the settle: admitted %d, want the third", len(adm))
	}

	// a ticket without its output part charges its whole estimate to
	// output too: 300 fits what is left (150 + refill), 300 twice does not
	clk.advance(time.Second)
	s2, b2, _, model2 := newKeyed(t, 1, limits)
	registerN(t, s2, model2, "u", 4, 300)
	adm, _, err = s2.Admit(ctx, model2, 4)
	if err != nil {
		t.Fatal(err)
	}
	if len(adm) != 3 {
		t.Fatalf("unsplit tickets of 300: admitted %d, want 3 (900 of the output limit's 1000)", len(adm))
	}
	avail, _, _ = b2.Available(ctx)
	if avail.Output != 100 || avail.Input != 9100 {
		t.Fatalf("unsplit: %+v, want output 100 and input 9100", avail)
	}
}

// TestSettleAfterALimitIsAdded: a reservation names the dimensions it
// charged, so a limit configured while it is open (a daily request limit,
// which comes before the input and output limits in the dimensions'
// order) takes no refund meant for another. Before, the costs were read
// by position: the input limit was settled with the output's charge.
func TestSettleAfterALimitIsAdded(t *testing.T) {
	ctx := context.Background()
	limits := ratelimit.Limits{RequestsPerPeriod: 100, TokensPerPeriod: 10000, InputTokensPerPeriod: 8000, OutputTokensPerPeriod: 4000,
		Period: time.Minute, Policy: ratelimit.PolicyRefund}
	s, b, clk, model := newKeyed(t, 1, limits)
	tk := admission.Ticket{ID: "a", Queue: "q", Model: model, Class: "paid", Tenant: "t", PRSeq: 1, Tokens: 1500, Output: 500}
	if _, err := s.Register(ctx, tk); err != nil {
		t.Fatal(err)
	}
	if adm, _, err := s.Admit(ctx, model, 1); err != nil || len(adm) != 1 {
		t.Fatalf("admitted %d (%v), want 1", len(adm), err)
	}
	// the operator adds a daily request limit and restarts
	limits.RequestsPerDay = 1000
	b2, err := ratelimit.NewBucket(redistest.Shared(t).Client(t), model, "sk-"+t.Name()+"-0", limits)
	if err != nil {
		t.Fatal(err)
	}
	b2.NowFunc = clk.now
	s2, err := admission.New(redistest.Shared(t).Client(t), map[string]*ratelimit.Bucket{model: b2}, nil, nil, admission.Config{SendLag: -1, NowFunc: clk.now}, discard)
	if err != nil {
		t.Fatal(err)
	}
	if b2.StateKey() != b.StateKey() {
		t.Fatalf("the restarted bucket's state is %s, want %s", b2.StateKey(), b.StateKey())
	}
	// the call used what was reserved: nothing changes
	if err := s2.Settle(ctx, model, "a", ratelimit.Cost{Requests: 1, Tokens: 1500, Input: 1000, Output: 500}); err != nil {
		t.Fatal(err)
	}
	avail, _, err := b2.Available(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := (ratelimit.Cost{Requests: 99, Tokens: 8500, Input: 7000, Output: 3500}); avail != want {
		t.Fatalf("after the settle: %+v, want %+v", avail, want)
	}
}
