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
// through the same library: draining a backlog by the exact waits it
// reports never puts more than the limit in any window and keeps the
// window full — the chat share is kept over a horizon (the share of the
// window), not left idle — yet a chat arriving at the fullest moment is
// admitted within that horizon.
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
	// the chat share does not idle: batch fills windows past 1 - share
	// (with the share kept as a floor, no window held more than 0.900)
	if rep.Worst <= 0.9 {
		t.Fatalf("fullest window %.3f: batch left the chat share idle", rep.Worst)
	}
	// no room idles: each burst comes as soon as the previous one has
	// left the window and its margin (W/60), within one slot (W/120)
	for i := 1; i < len(adm); i++ {
		if gap := adm[i].At.Sub(adm[i-1].At); gap > time.Second+time.Second/60+time.Second/120+time.Microsecond {
			t.Fatalf("admission %d came %s after the previous: the window was free earlier", i, gap)
		}
	}
	t.Logf("60 tickets: worst window %.3f, mean fill %.1f%%", rep.Worst, 100*rep.Utilisation)
	// right after the last batch admission (the window at its fullest) a
	// chat finds its share within the horizon (10% of the window and its
	// margin) and one slot
	reg(t, s, admission.Ticket{ID: "c1", Model: model, Class: "chat", Tenant: "2", Tokens: 100})
	from := clk.now()
	if a := drain(t, s, clk, model, 1); len(a) != 1 || a[0].ID != "c1" {
		t.Fatalf("chat not admitted: %+v", a)
	}
	if waited, bound := clk.now().Sub(from), (time.Second+time.Second/60)/10+time.Second/120; waited > bound {
		t.Fatalf("chat waited %s for its share; the horizon is %s", waited, bound)
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

// TestWindowChargeMovesToStart: a job that waits for a worker after its
// admission counts from its start, when the provider sees the call, not
// from its admission: the next whole-window job waits for it to leave
// the window as the provider counts it.
func TestWindowChargeMovesToStart(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	model := fmt.Sprintf("m-window-start-%d", time.Now().UnixNano())
	l := ratelimit.Limits{RequestsPerPeriod: 100000, TokensPerPeriod: 1000, Period: time.Second, Limiter: ratelimit.LimiterWindow}
	b, err := ratelimit.NewBucket(rdb, model, "sk", l)
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Unix(1_900_000_000, 0)}
	s, err := admission.New(redis.UniversalClient(rdb), map[string]*ratelimit.Bucket{model: b}, nil, nil,
		admission.Config{NowFunc: clk.now}, discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	reg(t, s, admission.Ticket{ID: "a", Model: model, Class: "paid", Tenant: "1", Tokens: 1000})
	if a, _, err := s.Admit(ctx, model, 1); err != nil || len(a) != 1 {
		t.Fatalf("first job: %v %v", a, err)
	}
	admitted := clk.now()
	clk.advance(400 * time.Millisecond) // it waits for a worker slot
	if err := s.Started(ctx, model, "a"); err != nil {
		t.Fatal(err)
	}
	startedAt := clk.now()
	reg(t, s, admission.Ticket{ID: "b", Model: model, Class: "paid", Tenant: "1", Tokens: 1000})
	got := drain(t, s, clk, model, 1)
	if len(got) != 1 || got[0].ID != "b" {
		t.Fatalf("second job: %+v", got)
	}
	at := clk.now()
	margin := time.Second / 60
	if at.Before(startedAt.Add(time.Second + margin)) {
		t.Fatalf("second job admitted %s after the first's start: the provider still counts the first until %s", at.Sub(startedAt), time.Second+margin)
	}
	if late := at.Sub(startedAt.Add(time.Second + margin)); late > time.Second/120+time.Microsecond {
		t.Fatalf("second job admitted %s after the first left the window (admitted %s)", late, at.Sub(admitted))
	}
	// a start without a reservation (a task started twice) changes nothing
	if err := s.Started(ctx, model, "a"); err != nil {
		t.Fatal(err)
	}
}
