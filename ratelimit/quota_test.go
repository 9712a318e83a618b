package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/ratelimit"
)

// TestQuotaNeverOvershoots: 32 concurrent calls of one tenant with random
// input sizes against a small quota. Each admitted call "uses" its input
// plus a random output no larger than its cap, as a provider honouring
// max_tokens does.
func TestQuotaNeverOvershoots(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Shared(t).Client(t)
	q, err := ratelimit.NewQuota(rdb, ratelimit.QuotaConfig{Period: ratelimit.Day})
	if err != nil {
		t.Fatal(err)
	}
	const limit, requestedMax = 20000, 1500
	var (
		wg              sync.WaitGroup
		mu              sync.Mutex
		used            int64
		admitted, refus int
		capChecks       int
	)
	for c := 0; c < 32; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(c)))
			for i := 0; i < 6; i++ {
				input := 50 + rng.Int63n(2000)
				g, err := q.Reserve(ctx, "tenant-a", "review", fmt.Sprintf("job-%d-%d", c, i), limit, input, requestedMax)
				if errors.Is(err, ratelimit.ErrQuotaExceeded) {
					mu.Lock()
					refus++ // nothing sent, nothing spent
					mu.Unlock()
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				if g.Cap > requestedMax || g.Cap < 16 {
					t.Errorf("cap %d outside [16, %d]", g.Cap, requestedMax)
				}
				if g.Cap < requestedMax && g.Remaining != 0 {
					t.Errorf("cap %d below the requested max but %d left: cap must be remaining-input", g.Cap, g.Remaining)
				}
				out := rng.Int63n(g.Cap + 1)
				if err := q.Settle(ctx, g, input+out); err != nil {
					t.Error(err)
				}
				mu.Lock()
				admitted++
				used += input + out
				if g.Cap < requestedMax {
					capChecks++
				}
				mu.Unlock()
			}
		}(c)
	}
	wg.Wait()
	u, err := q.Used(ctx, "tenant-a", "review", limit)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("admitted %d, refused %d, capped below max %d, actual usage %d of %d (counter %d)", admitted, refus, capChecks, used, limit, u.Used)
	if used > limit {
		t.Fatalf("overshoot: actual usage %d > quota %d", used, limit)
	}
	if u.Used != used {
		t.Fatalf("counter %d != actual usage %d after settling", u.Used, used)
	}
	if refus == 0 || capChecks == 0 {
		t.Fatalf("the quota was not exhausted (refused %d, capped %d): the test proved nothing", refus, capChecks)
	}
}

func TestQuotaCapAndRefusal(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Shared(t).Client(t)
	q, _ := ratelimit.NewQuota(rdb, ratelimit.QuotaConfig{Period: ratelimit.Hour})
	g, err := q.Reserve(ctx, "t-cap", "", "j1", 1000, 600, 800)
	if err != nil {
		t.Fatal(err)
	}
	if g.Cap != 400 {
		t.Fatalf("cap = %d, want remaining-input = 400", g.Cap)
	}
	again, err := q.Reserve(ctx, "t-cap", "", "j1", 1000, 600, 800)
	if err != nil || !again.Duplicate || again.Cap != 400 {
		t.Fatalf("retry of the same job: %+v %v", again, err)
	}
	_, err = q.Reserve(ctx, "t-cap", "", "j2", 1000, 1, 10)
	var qe *ratelimit.QuotaError
	if !errors.As(err, &qe) || qe.Remaining != 0 {
		t.Fatalf("want refusal with 0 left, got %v", err)
	}
	if err := q.Settle(ctx, g, 700); err != nil { // 300 unused come back
		t.Fatal(err)
	}
	if err := q.Settle(ctx, g, 700); !errors.Is(err, ratelimit.ErrNotReserved) {
		t.Fatalf("settle twice: %v", err)
	}
	_, err = q.Reserve(ctx, "t-cap", "", "j3", 1000, 290, 100)
	if !errors.As(err, &qe) || qe.Remaining != 300 || qe.Needed != 306 {
		t.Fatalf("want refusal: remaining 300 < 290+16, got %v", err)
	}
	g4, err := q.Reserve(ctx, "t-cap", "", "j4", 1000, 200, 100)
	if err != nil || g4.Cap != 100 || g4.Remaining != 0 {
		t.Fatalf("cap at requested max: %+v %v", g4, err)
	}
	// a call that asks for no output (embeddings) needs only its input,
	// and one that asks for less than MinOutput needs only what it asks
	e1, err := q.Reserve(ctx, "t-embed", "", "e1", 100, 95, 0)
	if err != nil || e1.Cap != 0 || e1.Remaining != 5 {
		t.Fatalf("no-output call with 5 spare: %+v %v", e1, err)
	}
	if _, err := q.Reserve(ctx, "t-embed", "", "e2", 100, 6, 0); !errors.As(err, &qe) || qe.Needed != 6 || qe.Remaining != 5 {
		t.Fatalf("want refusal: remaining 5 < input 6, got %v", err)
	}
	e3, err := q.Reserve(ctx, "t-embed", "", "e3", 100, 2, 3)
	if err != nil || e3.Cap != 3 || e3.Remaining != 0 {
		t.Fatalf("small call asking 3 with 5 left: %+v %v", e3, err)
	}
}

func TestQuotaPeriodBoundary(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Shared(t).Client(t)
	// Our clock says the previous hour; Redis decides: the reservation
	// lands in Redis's window and settles there.
	q, _ := ratelimit.NewQuota(rdb, ratelimit.QuotaConfig{Period: ratelimit.Hour,
		NowFunc: func() time.Time { return time.Now().Add(-2 * time.Hour) }})
	g, err := q.Reserve(ctx, "t-bound", "chat", "j", 100, 10, 50)
	if err != nil {
		t.Fatal(err)
	}
	ws, _ := ratelimit.Hour.Window(time.Now())
	if !g.Window.Equal(ws) && !g.Window.Equal(ws.Add(time.Hour)) {
		t.Fatalf("reserved in window %s, want Redis's current hour %s", g.Window, ws)
	}
	if err := q.Settle(ctx, g, 30); err != nil {
		t.Fatal(err)
	}
	// A call of the next window starts from a fresh allowance.
	w1, _ := ratelimit.Month.Window(time.Date(2026, 12, 31, 23, 59, 59, 0, time.UTC))
	w2, _ := ratelimit.Month.Window(time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC))
	if w1.Equal(w2) || w2.Month() != time.January {
		t.Fatalf("month windows: %s %s", w1, w2)
	}
}

func TestWeekWindow(t *testing.T) {
	for _, at := range []time.Time{
		time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC),   // a Monday
		time.Date(2026, 12, 6, 23, 59, 59, 0, time.UTC), // the Sunday after
	} {
		start, end := ratelimit.Week.Window(at)
		if want := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC); !start.Equal(want) || !end.Equal(want.AddDate(0, 0, 7)) {
			t.Errorf("week of %s: [%s, %s), want the week from %s", at, start, end, want)
		}
	}
	if start, _ := ratelimit.Week.Window(time.Date(2027, 1, 1, 12, 0, 0, 0, time.UTC)); !start.Equal(time.Date(2026, 12, 28, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("week of 2027-01-01 starts %s, want Monday 2026-12-28", start)
	}
}

func TestQuotaNegative(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	q, _ := ratelimit.NewQuota(rdb, ratelimit.QuotaConfig{})
	if _, err := q.Reserve(context.Background(), "t", "", "j", 100, -1, 10); err == nil {
		t.Fatal("negative input accepted")
	}
	if _, err := ratelimit.NewQuota(rdb, ratelimit.QuotaConfig{Period: "fortnight"}); err == nil {
		t.Fatal("unknown period accepted")
	}
}

func TestTokenizer(t *testing.T) {
	tk, err := ratelimit.NewTokenizer("gpt-4o-mini")
	if err != nil {
		t.Fatal(err)
	}
	n, err := tk.CountMessages("Hello, world!")
	if err != nil || n < 8 || n > 12 {
		t.Fatalf("count = %d, %v", n, err)
	}
	if got := ratelimit.EstimateOpenAI([]string{"abcde", "fgh"}, 100); got != 102 {
		t.Fatalf("estimate = %d, want ceil(8/4)+100 = 102", got)
	}
}

// TestDollarQuotaNeverOvershoots: waves of 50 concurrent calls against a quota
// in dollars (nano-dollars) each reserve their input and an output cap
// at the prices, capped to what is left; settled with what they cost
// (part of the input served from the cache, at a lower price), the
// spend never passes the quota, the counter equals it, and the tenant's
// token quota is untouched.
func TestDollarQuotaNeverOvershoots(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Shared(t).Client(t)
	q, err := ratelimit.NewQuota(rdb, ratelimit.QuotaConfig{Period: ratelimit.Day})
	if err != nil {
		t.Fatal(err)
	}
	const (
		limit             = 2_000_000 // $0.002
		inPrice, outPrice = 150, 600  // gpt-4o-mini: $0.15 and $0.60 per million tokens
		cachedPrice       = 75
		requestedMax      = 1500
		tenant, agent     = "tenant-dollars", ""
		concurrency       = 50
	)
	var (
		wg                     sync.WaitGroup
		mu                     sync.Mutex
		spent                  int64
		admitted, refused, cut int
	)
	// waves of concurrent calls until the quota both refused and capped
	// some: which reservations race ahead varies, and a wave whose first
	// two leave too little for any cap refuses the rest outright
	for wave := 0; wave < 6 && (refused == 0 || cut == 0); wave++ {
		for c := range concurrency {
			wg.Add(1)
			go func(c int) {
				defer wg.Done()
				rng := rand.New(rand.NewSource(int64(wave*concurrency + c)))
				input := 200 + rng.Int63n(1500)
				g, err := q.ReserveDollars(ctx, tenant, agent, fmt.Sprintf("job-%d-%d", wave, c), limit, input, requestedMax, inPrice, outPrice)
				if errors.Is(err, ratelimit.ErrQuotaExceeded) {
					mu.Lock()
					refused++
					mu.Unlock()
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				if g.Cap > requestedMax || g.Cap < 16 || g.Reserved != input*inPrice+g.Cap*outPrice {
					t.Errorf("grant %+v: cap outside [16, %d] or reserved not input and cap at the prices", g, requestedMax)
				}
				// the reply: some output within the cap; some input cached
				out, cached := rng.Int63n(g.Cap+1), rng.Int63n(input+1)
				cost := (input-cached)*inPrice + cached*cachedPrice + out*outPrice
				if err := q.Settle(ctx, g, cost); err != nil {
					t.Error(err)
				}
				mu.Lock()
				admitted++
				spent += cost
				if g.Cap < requestedMax {
					cut++
				}
				mu.Unlock()
			}(c)
		}
		wg.Wait()
	}
	u, err := q.UsedDollars(ctx, tenant, agent, limit)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("admitted %d, refused %d, capped %d; spent %d of %d nano-dollars (counter %d)", admitted, refused, cut, spent, limit, u.Used)
	if spent > limit || u.Used != spent {
		t.Fatalf("spent %d nano-dollars of a %d quota, counter %d: overshoot or a wrong counter", spent, limit, u.Used)
	}
	if refused == 0 || cut == 0 {
		t.Fatalf("the quota was not exhausted (refused %d, capped %d): the test proved nothing", refused, cut)
	}
	if tok, err := q.Used(ctx, tenant, agent, 1); err != nil || tok.Used != 0 {
		t.Fatalf("the token quota counted %d (%v), want nothing: the dollar quota is apart", tok.Used, err)
	}
}

// TestDollarQuotaWithoutOutput: a call that asks for no output (an
// embedding) reserves its input at the input price alone, with no output
// price; a call with output needs one; refused past what is left.
func TestDollarQuotaWithoutOutput(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Shared(t).Client(t)
	q, err := ratelimit.NewQuota(rdb, ratelimit.QuotaConfig{Period: ratelimit.Day})
	if err != nil {
		t.Fatal(err)
	}
	const limit, inPrice = 100_000, 20 // $0.0001; text-embedding-3-small's $0.02 per million
	g, err := q.ReserveDollars(ctx, "tenant-embed", "", "e1", limit, 3000, 0, inPrice, 0)
	if err != nil || g.Cap != 0 || g.Reserved != 3000*inPrice {
		t.Fatalf("grant %+v %v: want the input alone, 60,000 nano-dollars", g, err)
	}
	if _, err := q.ReserveDollars(ctx, "tenant-embed", "", "e2", limit, 10, 16, inPrice, 0); err == nil || errors.Is(err, ratelimit.ErrQuotaExceeded) {
		t.Fatalf("a call with output and no output price: %v, want an error", err)
	}
	var qe *ratelimit.QuotaError
	if _, err := q.ReserveDollars(ctx, "tenant-embed", "", "e3", limit, 2001, 0, inPrice, 0); !errors.As(err, &qe) || qe.Remaining != 40_000 || qe.Needed != 40_020 {
		t.Fatalf("past what is left: %v, want a QuotaError with 40,000 left, 40,020 needed", err)
	}
	if err := q.Settle(ctx, g, 2999*inPrice); err != nil {
		t.Fatal(err)
	}
	if u, err := q.UsedDollars(ctx, "tenant-embed", "", limit); err != nil || u.Used != 2999*inPrice {
		t.Fatalf("used %+v %v, want the settled cost", u, err)
	}
}

func TestNanoDollars(t *testing.T) {
	for _, tc := range []struct {
		name string
		got  int64
		want int64
	}{
		{"a quota to the nearest", ratelimit.Nano(0.05), 50_000_000},
		{"a price per token rounds up", ratelimit.NanoPerToken(0.15), 150},
		{"a sub-nano price per token rounds up", ratelimit.NanoPerToken(0.0001), 1},
		{"a cost past float noise is not rounded up", ratelimit.NanoCost((1000*2.5 + 100*10) / 1e6), 3_500_000},
		{"a fraction of a nano-dollar rounds up", ratelimit.NanoCost(1.5e-9), 2},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, tc.got, tc.want)
		}
	}
}
