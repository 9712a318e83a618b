package ratelimit_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/ratelimit"
)

var diffOps = flag.Int("diff-ops", 10000, "random operations per limiter in TestLimiterMatchesModel")

// TestLimiterMatchesModel drives the Lua limiter (a Bucket on a real
// redis-server, a stepped clock) and the reference model (model_test.go)
// through the same random reserves, settles and clock steps, and
// requires the same decision at every reserve and the same room in
// every dimension after every operation: -diff-ops per limiter (10,000
// by default), spread over each policy (and for the window, with and
// without a sub-window). A failure prints the seed and the operations
// up to it.
func TestLimiterMatchesModel(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	type run struct {
		name   string
		limits ratelimit.Limits
	}
	var runs []run
	for _, p := range []ratelimit.Policy{ratelimit.PolicyEstimate, ratelimit.PolicyRefund, ratelimit.PolicyDebt} {
		runs = append(runs, run{"bucket/" + string(p), ratelimit.Limits{RequestsPerPeriod: 40, TokensPerPeriod: 20000, Period: time.Minute, Policy: p}})
	}
	for _, p := range []ratelimit.Policy{ratelimit.PolicyEstimate, ratelimit.PolicyRefund, ratelimit.PolicyDebt} {
		w := ratelimit.Limits{RequestsPerPeriod: 40, TokensPerPeriod: 20000, Period: time.Minute, Policy: p,
			Limiter: ratelimit.LimiterWindow, Window: time.Minute, WindowMargin: 500 * time.Millisecond}
		runs = append(runs, run{"window/" + string(p), w})
		w.SubWindow = 10 * time.Second
		runs = append(runs, run{"window+sub/" + string(p), w})
	}
	per := map[bool]int{}
	for _, r := range runs {
		per[r.limits.Limiter == ratelimit.LimiterWindow]++
	}
	for i, r := range runs {
		n := (*diffOps + per[r.limits.Limiter == ratelimit.LimiterWindow] - 1) / per[r.limits.Limiter == ratelimit.LimiterWindow]
		t.Run(r.name, func(t *testing.T) {
			seed := int64(20261204 + i)
			b, err := ratelimit.NewBucket(rdb, fmt.Sprintf("diff-%d-%d", i, time.Now().UnixNano()), "sk-diff", r.limits)
			if err != nil {
				t.Fatal(err)
			}
			differential(t, b, n, seed)
		})
	}
}

// differential runs n random operations on b and its model.
func differential(t *testing.T, b *ratelimit.Bucket, n int, seed int64) {
	ctx := context.Background()
	rng := rand.New(rand.NewSource(seed))
	clock := time.UnixMicro(1_800_000_000_000_000)
	b.NowFunc = func() time.Time { return clock }
	l := b.Limits()
	m := newModel(l, clock.UnixMicro())
	names := []string{"requests", "tokens"}
	var open []string
	var log []string
	fail := func(format string, args ...any) {
		t.Helper()
		start := max(len(log)-20, 0)
		t.Fatalf("seed %d, operation %d: %s\nthe last operations:\n%v", seed, len(log), fmt.Sprintf(format, args...), log[start:])
	}
	span := l.Period
	if l.Limiter == ratelimit.LimiterWindow {
		span = l.Window
	}
	var lastWait time.Duration
	reserves, admitted, settles := 0, 0, 0
	for op := 0; op < n; op++ {
		now := clock.UnixMicro()
		switch x := rng.Intn(100); {
		case x < 45: // reserve
			burst := m.dims[1].burst
			tokens := 1 + rng.Int63n(burst)
			if rng.Intn(50) == 0 {
				tokens = burst + 1 + rng.Int63n(100) // never fits
			}
			id := fmt.Sprintf("j%d", op)
			if len(open) > 0 && rng.Intn(40) == 0 {
				id = open[rng.Intn(len(open))] // a duplicate
			}
			log = append(log, fmt.Sprintf("@%d reserve %s %d", now, id, tokens))
			got, err := b.Reserve(ctx, id, ratelimit.Cost{Requests: 1, Tokens: tokens})
			want := m.reserve(id, []int64{1, tokens}, now)
			reserves++
			var ce *ratelimit.CostError
			switch {
			case want.errDim > 0:
				if !errors.As(err, &ce) || ce.Dimension != names[want.errDim-1] {
					fail("reserve of %d tokens: got %+v, %v; the model: a cost error in %s", tokens, got, err, names[want.errDim-1])
				}
			case err != nil:
				fail("reserve: %v", err)
			case got.Admitted != want.admitted || got.Duplicate != want.duplicate || got.Wait != want.wait:
				fail("reserve of %d tokens: got admitted %v duplicate %v wait %v; the model: admitted %v duplicate %v wait %v",
					tokens, got.Admitted, got.Duplicate, got.Wait, want.admitted, want.duplicate, want.wait)
			}
			if want.admitted && !want.duplicate {
				admitted++
				open = append(open, id)
			}
			if want.wait > 0 {
				lastWait = want.wait
			}
		case x < 75: // settle
			if len(open) == 0 {
				continue
			}
			k := rng.Intn(len(open))
			id := open[k]
			open = append(open[:k], open[k+1:]...)
			est := m.res[id].costs[1]
			var actual ratelimit.Cost
			usage := []int64{0, 0}
			nocall := rng.Intn(10) == 0
			if !nocall {
				tokens := rng.Int63n(2*est + 1)
				actual = ratelimit.Cost{Requests: 1, Tokens: tokens}
				usage = []int64{1, tokens}
			}
			log = append(log, fmt.Sprintf("@%d settle %s %+v", now, id, actual))
			err := b.Settle(ctx, id, actual)
			if want := m.settle(id, usage, nocall, now); want != (err == nil) {
				fail("settle %s: got %v, the model settled: %v", id, err, want)
			}
			settles++
		default: // the clock moves: a little, to a wait's end (or just before), or far
			var step time.Duration
			switch y := rng.Intn(10); {
			case y < 5:
				step = time.Duration(rng.Int63n(int64(span / 40)))
			case y < 8 && lastWait > 0:
				step = lastWait - time.Duration(rng.Intn(2))*time.Microsecond
				lastWait = 0
			case y < 9:
				step = time.Duration(rng.Int63n(int64(span)))
			default:
				step = span + time.Duration(rng.Int63n(int64(span)))
			}
			clock = clock.Add(step)
			log = append(log, fmt.Sprintf("advance %v", step))
		}
		got, _, err := b.Available(ctx)
		if err != nil {
			fail("available: %v", err)
		}
		now = clock.UnixMicro()
		if want := []int64{m.dims[0].available(now), m.dims[1].available(now)}; got.Requests != want[0] || got.Tokens != want[1] {
			fail("room: got %d requests, %d tokens; the model: %d, %d", got.Requests, got.Tokens, want[0], want[1])
		}
	}
	if admitted < reserves/10 || settles == 0 {
		t.Fatalf("the operations exercised too little: %d reserves, %d admitted, %d settles", reserves, admitted, settles)
	}
	t.Logf("%d operations: %d reserves (%d admitted), %d settles, %v simulated", n, reserves, admitted, settles, clock.Sub(time.UnixMicro(1_800_000_000_000_000)))
}
