package admission_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/ratelimit"
)

// TestWindowLimiterThroughAdmission: admission charges a window limiter
// through the same library, unchanged: draining a backlog by the exact
// waits it reports never puts more than the limit in any window, keeps
// the chat share from batch, and keeps the window busy.
func TestWindowLimiterThroughAdmission(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	model := fmt.Sprintf("m-window-%d", time.Now().UnixNano())
	l := ratelimit.Limits{RequestsPerPeriod: 100000, TokensPerPeriod: 1000, Period: time.Second, Limiter: ratelimit.LimiterWindow}
	b, err := ratelimit.NewBucket(rdb, model, "sk", l)
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Unix(1_900_000_000, 0)}
	s, err := admission.New(redis.UniversalClient(rdb), map[string]*ratelimit.Bucket{model: b}, nil, nil,
		admission.Config{ChatShare: 0.1, NowFunc: clk.now}, discard)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 60; i++ {
		reg(t, s, admission.Ticket{ID: fmt.Sprint("p", i), Model: model, Class: "paid", Tenant: "1", Index: i, Total: 60, Tokens: 100 + int64(i%4)*50})
	}
	got := drain(t, s, clk, model, 60)
	if len(got) != 60 {
		t.Fatalf("admitted %d of 60", len(got))
	}
	var adm []ratelimit.Admission
	for _, a := range got {
		adm = append(adm, ratelimit.Admission{At: a.Enqueued.Add(a.Waited), Cost: a.Tokens})
	}
	rep := ratelimit.CheckWindows(adm, l.TokensPerPeriod, time.Second)
	if rep.Violations != 0 {
		t.Fatalf("%d windows over the limit (worst %.3f)", rep.Violations, rep.Worst)
	}
	// batch keeps 10% for chat: no window holds more than 900 of batch
	if rep.Worst > 0.9 {
		t.Fatalf("batch took %.3f of a window; the chat share is 0.1", rep.Worst)
	}
	// no room idles: each burst comes as soon as the previous one has
	// left the window and its margin (W/60), within one slot (W/120)
	for i := 1; i < len(adm); i++ {
		if gap := adm[i].At.Sub(adm[i-1].At); gap > time.Second+time.Second/60+time.Second/120+time.Microsecond {
			t.Fatalf("admission %d came %s after the previous: the window was free earlier", i, gap)
		}
	}
	t.Logf("60 tickets: worst window %.3f, mean fill %.1f%%", rep.Worst, 100*rep.Utilisation)
	// a chat uses the reserve at once
	reg(t, s, admission.Ticket{ID: "c1", Model: model, Class: "chat", Tenant: "2", Tokens: 100})
	if a, _, _ := s.Admit(context.Background(), model, 1); len(a) != 1 || a[0].ID != "c1" {
		t.Fatalf("chat may use the reserve: %+v", a)
	}
	// debt beyond the estimate counts in the window
	before, _, _ := b.Available(context.Background())
	if err := s.Settle(context.Background(), model, "c1", ratelimit.Cost{Requests: 1, Tokens: 150}); err != nil {
		t.Fatal(err)
	}
	after, _, _ := b.Available(context.Background())
	if before.Tokens-after.Tokens != 50 {
		t.Fatalf("settling 50 over the estimate took %d", before.Tokens-after.Tokens)
	}
}
