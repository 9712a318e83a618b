package ratelimit_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/ratelimit"
)

// claudeLimits is an Anthropic-like model: requests, input tokens and
// output tokens limited apart, the total-token limit their sum.
var claudeLimits = ratelimit.Limits{RequestsPerPeriod: 100, TokensPerPeriod: 1100, InputTokensPerPeriod: 1000, OutputTokensPerPeriod: 100, Period: time.Second}

// TestInputAndOutputDimensions: each of the input and output limits
// refuses by itself what the total would admit, a cost that does not
// split its tokens charges all of them to each, and a cost above one
// dimension's burst is an error naming that dimension.
func TestInputAndOutputDimensions(t *testing.T) {
	ctx := context.Background()
	t.Run("output binds alone", func(t *testing.T) {
		b, clk, _ := newBucket(t, t.Name(), claudeLimits)
		for i, id := range []string{"a", "b"} {
			d, err := b.Reserve(ctx, id, ratelimit.Cost{Requests: 1, Tokens: 150, Input: 100, Output: 50})
			if err != nil || !d.Admitted {
				t.Fatalf("reserve %d: %+v %v", i, d, err)
			}
		}
		avail, _, _ := b.Available(ctx)
		if avail.Input != 800 || avail.Output != 0 || avail.Tokens != 800 {
			t.Fatalf("after two calls: %+v, want input 800, output 0, tokens 800", avail)
		}
		// input and total have room; output has none: it waits for the
		// output limit's refill of 10 tokens (0.1 s at 100/s)
		d, err := b.Reserve(ctx, "c", ratelimit.Cost{Requests: 1, Tokens: 20, Input: 10, Output: 10})
		if err != nil || d.Admitted {
			t.Fatalf("admitted past the output limit: %+v %v", d, err)
		}
		if d.Wait != 100*time.Millisecond {
			t.Fatalf("wait %s, want 100ms (the output limit's)", d.Wait)
		}
		clk.advance(100 * time.Millisecond)
		if d, err := b.Reserve(ctx, "c", ratelimit.Cost{Requests: 1, Tokens: 20, Input: 10, Output: 10}); err != nil || !d.Admitted {
			t.Fatalf("after the refill: %+v %v", d, err)
		}
	})
	t.Run("input binds alone", func(t *testing.T) {
		b, _, _ := newBucket(t, t.Name(), claudeLimits)
		if d, _ := b.Reserve(ctx, "a", ratelimit.Cost{Requests: 1, Tokens: 960, Input: 950, Output: 10}); !d.Admitted {
			t.Fatal("first call refused")
		}
		if d, _ := b.Reserve(ctx, "b", ratelimit.Cost{Requests: 1, Tokens: 70, Input: 60, Output: 10}); d.Admitted {
			t.Fatal("admitted past the input limit (950 + 60 > 1000)")
		}
	})
	t.Run("an unsplit cost charges all its tokens to each", func(t *testing.T) {
		b, _, _ := newBucket(t, t.Name(), claudeLimits)
		if d, _ := b.Reserve(ctx, "a", ratelimit.Cost{Requests: 1, Tokens: 60}); !d.Admitted {
			t.Fatal("refused")
		}
		avail, _, _ := b.Available(ctx)
		if avail.Input != 940 || avail.Output != 40 {
			t.Fatalf("unsplit 60: %+v, want input 940 and output 40", avail)
		}
	})
	t.Run("above a dimension's burst", func(t *testing.T) {
		b, _, _ := newBucket(t, t.Name(), claudeLimits)
		_, err := b.Reserve(ctx, "a", ratelimit.Cost{Requests: 1, Tokens: 300, Input: 100, Output: 200})
		var ce *ratelimit.CostError
		if !errors.As(err, &ce) || ce.Dimension != "output tokens" || ce.Cost != 200 || ce.Burst != 100 {
			t.Fatalf("want a cost error on output tokens (200 > 100), got %v", err)
		}
	})
}

// TestSettleSplitsUsage: a refund settle gives each of input and output
// back what its real usage left unused; a usage that does not split its
// tokens leaves their charges, and only the total is corrected.
func TestSettleSplitsUsage(t *testing.T) {
	ctx := context.Background()
	l := claudeLimits
	l.Policy = ratelimit.PolicyRefund
	b, _, _ := newBucket(t, t.Name(), l)
	if d, _ := b.Reserve(ctx, "a", ratelimit.Cost{Requests: 1, Tokens: 500, Input: 420, Output: 80}); !d.Admitted {
		t.Fatal("refused")
	}
	if err := b.Settle(ctx, "a", ratelimit.Cost{Requests: 1, Tokens: 430, Input: 400, Output: 30}); err != nil {
		t.Fatal(err)
	}
	avail, _, _ := b.Available(ctx)
	if avail.Input != 600 || avail.Output != 70 || avail.Tokens != 670 {
		t.Fatalf("after settle: %+v, want input 600, output 70, tokens 670", avail)
	}
	if d, _ := b.Reserve(ctx, "b", ratelimit.Cost{Requests: 1, Tokens: 100, Input: 60, Output: 40}); !d.Admitted {
		t.Fatal("refused")
	}
	if err := b.Settle(ctx, "b", ratelimit.Cost{Requests: 1, Tokens: 50}); err != nil {
		t.Fatal(err)
	}
	avail, _, _ = b.Available(ctx)
	if avail.Input != 540 || avail.Output != 30 || avail.Tokens != 620 {
		t.Fatalf("after an unsplit settle: %+v, want input 540 and output 30 kept, tokens 620", avail)
	}
}

// TestSyncAnthropicInputOutput: with input and output limits configured,
// Anthropic's input-tokens-* and output-tokens-* remaining lower each its
// own dimension, and its tokens-* (the most restrictive of the two, not a
// total) leaves the total alone; a bucket without them still takes
// tokens-* for its total.
func TestSyncAnthropicInputOutput(t *testing.T) {
	ctx := context.Background()
	b, _, _ := newBucket(t, t.Name(), claudeLimits)
	h := http.Header{}
	h.Set("anthropic-ratelimit-requests-remaining", "90")
	h.Set("anthropic-ratelimit-input-tokens-remaining", "700")
	h.Set("anthropic-ratelimit-output-tokens-remaining", "20")
	h.Set("anthropic-ratelimit-tokens-remaining", "20")
	if lowered, err := b.Sync(ctx, 200, h, 0); err != nil || !lowered {
		t.Fatalf("sync: %v %v", lowered, err)
	}
	avail, _, _ := b.Available(ctx)
	if avail.Requests != 90 || avail.Input != 700 || avail.Output != 20 || avail.Tokens != 1100 {
		t.Fatalf("after sync: %+v, want 90 requests, input 700, output 20, tokens untouched (1100)", avail)
	}
	// OpenAI's headers say nothing of input and output
	h = http.Header{}
	h.Set("x-ratelimit-remaining-requests", "80")
	h.Set("x-ratelimit-remaining-tokens", "900")
	if _, err := b.Sync(ctx, 200, h, 0); err != nil {
		t.Fatal(err)
	}
	avail, _, _ = b.Available(ctx)
	if avail.Requests != 80 || avail.Tokens != 900 || avail.Input != 700 || avail.Output != 20 {
		t.Fatalf("after OpenAI headers: %+v, want input and output left as they were", avail)
	}
}

// TestInputOutputLimitsValidate: negative limits and a burst without its
// limit are refused by name.
func TestInputOutputLimitsValidate(t *testing.T) {
	for name, l := range map[string]ratelimit.Limits{
		"negative input":         {RequestsPerPeriod: 1, TokensPerPeriod: 1, InputTokensPerPeriod: -1},
		"negative output burst":  {RequestsPerPeriod: 1, TokensPerPeriod: 1, OutputTokensPerPeriod: 5, BurstOutputTokens: -1},
		"output burst, no limit": {RequestsPerPeriod: 1, TokensPerPeriod: 1, BurstOutputTokens: 5},
	} {
		if err := l.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestDailyInputOutputLimits: the daily output limit refuses by itself,
// and the provider's per-minute headers leave the daily limits alone.
func TestDailyInputOutputLimits(t *testing.T) {
	ctx := context.Background()
	l := claudeLimits
	l.OutputTokensPerDay = 120
	b, clk, _ := newBucket(t, t.Name(), l)
	if d, _ := b.Reserve(ctx, "a", ratelimit.Cost{Requests: 1, Tokens: 160, Input: 60, Output: 100}); !d.Admitted {
		t.Fatal("refused")
	}
	clk.advance(2 * time.Second) // the per-period limits are full again
	d, err := b.Reserve(ctx, "b", ratelimit.Cost{Requests: 1, Tokens: 90, Input: 60, Output: 30})
	if err != nil || d.Admitted || d.Wait < time.Hour {
		t.Fatalf("past the daily output limit: %+v %v; want a wait of hours", d, err)
	}
	h := http.Header{}
	h.Set("anthropic-ratelimit-output-tokens-remaining", "100")
	if _, err := b.Sync(ctx, 200, h, 0); err != nil {
		t.Fatal(err)
	}
	if d, _ := b.Reserve(ctx, "c", ratelimit.Cost{Requests: 1, Tokens: 30, Input: 10, Output: 20}); !d.Admitted {
		t.Fatal("20 more output tokens fit the day's 120 and the minute's 100")
	}
}

// TestWindowInputOutput: a window limiter counts input and output in
// windows of their own: output full refuses until its charges leave the
// window (plus the margin), whatever room input has.
func TestWindowInputOutput(t *testing.T) {
	ctx := context.Background()
	l := claudeLimits
	l.Limiter, l.Window, l.WindowMargin = ratelimit.LimiterWindow, time.Second, 10*time.Millisecond
	b, clk, _ := newBucket(t, t.Name(), l)
	if d, _ := b.Reserve(ctx, "a", ratelimit.Cost{Requests: 1, Tokens: 200, Input: 100, Output: 100}); !d.Admitted {
		t.Fatal("refused")
	}
	clk.advance(500 * time.Millisecond) // a bucket would have refilled 50 output tokens by now
	d, err := b.Reserve(ctx, "b", ratelimit.Cost{Requests: 1, Tokens: 20, Input: 10, Output: 10})
	if err != nil || d.Admitted {
		t.Fatalf("admitted into a full output window: %+v %v", d, err)
	}
	if d.Wait < 500*time.Millisecond {
		t.Fatalf("wait %s: the output charge leaves the window 1s (and the margin) after it was made", d.Wait)
	}
	clk.advance(d.Wait)
	if d, _ := b.Reserve(ctx, "b", ratelimit.Cost{Requests: 1, Tokens: 20, Input: 10, Output: 10}); !d.Admitted {
		t.Fatal("refused once the output charge left the window")
	}
}

// TestAdmissible: a cost is admissible when every dimension's burst (a
// window's sub-window share, a daily limit) holds it; else the error is
// a CostError naming the first dimension it exceeds.
func TestAdmissible(t *testing.T) {
	window := ratelimit.Limits{RequestsPerPeriod: 100, TokensPerPeriod: 6000, Limiter: ratelimit.LimiterWindow,
		SubWindow: 10 * time.Second, TokensPerDay: 50000}
	burst := claudeLimits
	burst.BurstTokens = 900
	for _, c := range []struct {
		name string
		l    ratelimit.Limits
		v    ratelimit.Values
		dim  string
		cap  int64
	}{
		{"fits", claudeLimits, ratelimit.Values{Requests: 1, Tokens: 1100, Input: 1000, Output: 100}, "", 0},
		{"input over", claudeLimits, ratelimit.Values{Requests: 1, Tokens: 1050, Input: 1001, Output: 49}, "input tokens", 1000},
		{"output over", claudeLimits, ratelimit.Values{Requests: 1, Tokens: 301, Input: 100, Output: 201}, "output tokens", 100},
		{"burst below the limit", burst, ratelimit.Values{Requests: 1, Tokens: 901, Input: 850, Output: 51}, "tokens", 900},
		{"sub-window share", window, ratelimit.Values{Requests: 1, Tokens: 1001}, "tokens", 1000},
		{"within the sub-window", window, ratelimit.Values{Requests: 1, Tokens: 1000}, "", 0},
	} {
		err := c.l.Admissible(c.v)
		var ce *ratelimit.CostError
		switch {
		case c.dim == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.dim != "" && (!errors.As(err, &ce) || ce.Dimension != c.dim || ce.Burst != c.cap):
			t.Errorf("%s: %v, want a cost error on %s over %d", c.name, err, c.dim, c.cap)
		}
	}
}

// TestBucketSettleAfterALimitIsAdded: Bucket's reservation names the
// dimensions it charged, so a limit configured while it is open takes
// no refund meant for another (read by position, the input limit was
// settled with the output's charge).
func TestBucketSettleAfterALimitIsAdded(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Shared(t).Client(t)
	limits := ratelimit.Limits{RequestsPerPeriod: 100, TokensPerPeriod: 10000, InputTokensPerPeriod: 8000, OutputTokensPerPeriod: 4000,
		Period: time.Minute, Policy: ratelimit.PolicyRefund}
	model := "added-" + t.Name()
	clock := time.UnixMicro(1_900_000_000_000_000)
	b, err := ratelimit.NewBucket(rdb, model, "sk", limits)
	if err != nil {
		t.Fatal(err)
	}
	b.NowFunc = func() time.Time { return clock }
	if d, err := b.Reserve(ctx, "j", ratelimit.Cost{Requests: 1, Tokens: 1500, Input: 1000, Output: 500}); err != nil || !d.Admitted {
		t.Fatalf("reserve: %+v, %v", d, err)
	}
	limits.RequestsPerDay = 1000
	b2, err := ratelimit.NewBucket(rdb, model, "sk", limits)
	if err != nil {
		t.Fatal(err)
	}
	b2.NowFunc = b.NowFunc
	if err := b2.Settle(ctx, "j", ratelimit.Cost{Requests: 1, Tokens: 1500, Input: 1000, Output: 500}); err != nil {
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
