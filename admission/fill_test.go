package admission_test

import (
	"context"
	"math/rand"
	"strconv"
	"testing"
	"time"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/ratelimit"
)

// TestFillOnASteppedClock states the fill each limiter reaches through
// admission on a fixed workload, on a stepped clock, so a change that
// lowers it fails here and not only in a bench run: 600 files of 120
// pull requests (7 tenants, three tiers, 800 to 3,000 tokens each, all
// waiting from the start) against 24,000 tokens per 6 s; each admitted
// file starts, prepares for 2 ms, calls when its call may go, is written
// 1 ms later, replies and settles. The figures are exact (the same
// sequence every run); the provider's count is checked never over.
func TestFillOnASteppedClock(t *testing.T) {
	for _, c := range []struct {
		name string
		lim  ratelimit.Limits
		// the stated fill: CheckIntervals' utilisation for the bucket
		// (admitted over burst + rate·span), CheckWindows' mean window
		// fill while work waited for the window
		want float64
	}{
		{"bucket", ratelimit.Limits{RequestsPerPeriod: 100000, TokensPerPeriod: 24000, Period: 6 * time.Second}, 0.9991},
		{"window", ratelimit.Limits{RequestsPerPeriod: 100000, TokensPerPeriod: 24000, Period: 6 * time.Second,
			Limiter: ratelimit.LimiterWindow, WindowMargin: 20 * time.Millisecond}, 0.9783},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, worst := fillOf(t, c.lim)
			t.Logf("%s: fill %.6f, worst %.6f of the limit", c.name, got, worst)
			if worst > 1 {
				t.Errorf("the provider counted %.4f of its limit: over", worst)
			}
			switch {
			case got < c.want-0.0001:
				t.Errorf("fill %.4f, below the stated %.4f: the change lowers what the limiter reaches", got, c.want)
			case got > c.want+0.0001:
				t.Errorf("fill %.4f, above the stated %.4f: state the new figure here", got, c.want)
			}
		})
	}
}

// fillOf runs the workload through admission with limits and returns
// the fill and the worst interval or window over the limit.
func fillOf(t *testing.T, lim ratelimit.Limits) (fill, worst float64) {
	t.Helper()
	rdb := redistest.Shared(t).Client(t)
	ctx := context.Background()
	model := "fill-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	bk, err := ratelimit.NewBucket(rdb, model, "sk", lim)
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Unix(1_900_000_000, 0)}
	s, err := admission.New(rdb, map[string]*ratelimit.Bucket{model: bk}, nil, nil, admission.Config{NowFunc: clk.now}, discard)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(1))
	tiers := []string{"paid", "trial", "free"}
	const files = 600
	tokens := map[string]int64{}
	for i := range files {
		tk := admission.Ticket{ID: "f" + strconv.Itoa(i), Queue: tiers[i%3], Model: model, Class: tiers[i%3],
			Tenant: strconv.Itoa(i % 7), PRSeq: int64(i/5 + 1), Index: i % 5, Total: 5, Tokens: 800 + rng.Int63n(2200)}
		tokens[tk.ID] = tk.Tokens
		if _, err := s.Register(ctx, tk); err != nil {
			t.Fatal(err)
		}
	}
	var counted []ratelimit.Admission // when the provider counts each call, and what
	for guard := 0; len(counted) < files; guard++ {
		if guard > 100*files {
			t.Fatalf("only %d of %d files called", len(counted), files)
		}
		adm, wait, err := s.Admit(ctx, model, 16)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range adm {
			at, err := callOnClock(ctx, s, clk, model, a.ID, ratelimit.Cost{Requests: 1, Tokens: tokens[a.ID]})
			if err != nil {
				t.Fatal(err)
			}
			counted = append(counted, ratelimit.Admission{At: at, Cost: tokens[a.ID]})
		}
		if len(adm) == 0 {
			clk.advance(max(wait, time.Millisecond))
		}
	}
	l := bk.Limits()
	if l.Limiter == ratelimit.LimiterWindow {
		rep := ratelimit.CheckWindows(counted, l.TokensPerPeriod, l.Window)
		return rep.WhileQueued, rep.Worst
	}
	rep := ratelimit.CheckIntervals(counted, l.TokensPerPeriod, l.Period, l.BurstTokens)
	return rep.Utilisation, rep.WorstRatio
}

// callOnClock runs an admitted job's call on a stepped clock: its start,
// 2 ms of preparation, its call once it may go, its write 1 ms later,
// its reply (a 3 ms way) and its settle at usage, which takes the write
// along (llmcall holds it for the settle). It returns the write's time,
// when the provider counts the call.
func callOnClock(ctx context.Context, s *admission.Scheduler, clk *clock, model, id string, usage ratelimit.Cost) (time.Time, error) {
	if err := s.Started(ctx, model, id); err != nil {
		return time.Time{}, err
	}
	clk.advance(2 * time.Millisecond)
	for {
		w, err := s.TryCalling(ctx, model, id)
		if err != nil {
			return time.Time{}, err
		}
		if w <= 0 {
			break
		}
		clk.advance(w)
	}
	clk.advance(time.Millisecond)
	at := clk.now()
	return at, s.SettleCall(ctx, model, id, usage, admission.CallWay{Written: time.Millisecond, Arrival: 3 * time.Millisecond})
}
