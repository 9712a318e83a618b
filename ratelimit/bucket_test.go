package ratelimit_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/ratelimit"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func newBucket(t *testing.T, name string, l ratelimit.Limits) (*ratelimit.Bucket, *fakeClock, *redis.Client) {
	t.Helper()
	rdb := redistest.Shared(t).Client(t)
	b, err := ratelimit.NewBucket(rdb, name, "sk-"+name, l)
	if err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	b.NowFunc = clk.now
	return b, clk, rdb
}

func TestBucketEdges(t *testing.T) {
	ctx := context.Background()
	l := ratelimit.Limits{RequestsPerPeriod: 10, TokensPerPeriod: 1000, Period: time.Second}

	t.Run("zero cost is admitted without charge", func(t *testing.T) {
		b, _, _ := newBucket(t, t.Name(), l)
		d, err := b.Reserve(ctx, "j0", ratelimit.Cost{})
		if err != nil || !d.Admitted {
			t.Fatalf("zero cost: %+v, %v", d, err)
		}
		avail, _, _ := b.Available(ctx)
		if avail.Tokens != 1000 || avail.Requests != 10 {
			t.Fatalf("zero cost charged: %+v", avail)
		}
	})
	t.Run("negative cost is an error", func(t *testing.T) {
		b, _, _ := newBucket(t, t.Name(), l)
		_, err := b.Reserve(ctx, "j", ratelimit.Cost{Requests: 1, Tokens: -5})
		var ce *ratelimit.CostError
		if !errors.As(err, &ce) || ce.Dimension != "tokens" {
			t.Fatalf("want CostError on tokens, got %v", err)
		}
	})
	t.Run("cost above burst is an error, not a wait", func(t *testing.T) {
		b, _, _ := newBucket(t, t.Name(), l)
		_, err := b.Reserve(ctx, "j", ratelimit.Cost{Requests: 1, Tokens: 1001})
		var ce *ratelimit.CostError
		if !errors.As(err, &ce) || ce.Burst != 1000 || ce.Cost != 1001 {
			t.Fatalf("want CostError with burst 1000, got %v", err)
		}
	})
	t.Run("exact wait until the cost fits", func(t *testing.T) {
		b, clk, _ := newBucket(t, t.Name(), l)
		if d, _ := b.Reserve(ctx, "a", ratelimit.Cost{Requests: 1, Tokens: 900}); !d.Admitted {
			t.Fatal("first reservation refused")
		}
		d, err := b.Reserve(ctx, "b", ratelimit.Cost{Requests: 1, Tokens: 300})
		if err != nil || d.Admitted {
			t.Fatalf("second reservation should wait: %+v %v", d, err)
		}
		if d.Wait != 200*time.Millisecond { // 200 tokens at 1000/s
			t.Fatalf("wait = %s, want 200ms", d.Wait)
		}
		clk.advance(199 * time.Millisecond)
		if d, _ := b.Reserve(ctx, "b", ratelimit.Cost{Requests: 1, Tokens: 300}); d.Admitted {
			t.Fatal("admitted 1ms early")
		}
		clk.advance(time.Millisecond)
		if d, _ := b.Reserve(ctx, "b", ratelimit.Cost{Requests: 1, Tokens: 300}); !d.Admitted {
			t.Fatal("not admitted when the wait had passed")
		}
	})
	t.Run("all dimensions or none", func(t *testing.T) {
		b, _, _ := newBucket(t, t.Name(), l)
		for i := 0; i < 10; i++ {
			if d, _ := b.Reserve(ctx, "r"+string(rune('a'+i)), ratelimit.Cost{Requests: 1, Tokens: 1}); !d.Admitted {
				t.Fatal("request refused early")
			}
		}
		d, _ := b.Reserve(ctx, "over", ratelimit.Cost{Requests: 1, Tokens: 1})
		if d.Admitted {
			t.Fatal("11th request admitted")
		}
		avail, _, _ := b.Available(ctx)
		if avail.Tokens != 990 {
			t.Fatalf("a refused reservation charged tokens: %d left", avail.Tokens)
		}
	})
	t.Run("reservation is idempotent per job", func(t *testing.T) {
		b, _, _ := newBucket(t, t.Name(), l)
		b.Reserve(ctx, "same", ratelimit.Cost{Requests: 1, Tokens: 400})
		d, _ := b.Reserve(ctx, "same", ratelimit.Cost{Requests: 1, Tokens: 400})
		if !d.Admitted || !d.Duplicate {
			t.Fatalf("retry: %+v", d)
		}
		avail, _, _ := b.Available(ctx)
		if avail.Tokens != 600 {
			t.Fatalf("retry charged twice: %d left", avail.Tokens)
		}
	})
	debt := l
	debt.Policy = ratelimit.PolicyDebt
	t.Run("settle twice", func(t *testing.T) {
		b, _, _ := newBucket(t, t.Name(), debt)
		b.Reserve(ctx, "s", ratelimit.Cost{Requests: 1, Tokens: 400})
		if err := b.Settle(ctx, "s", ratelimit.Cost{Requests: 1, Tokens: 500}); err != nil {
			t.Fatal(err)
		}
		if err := b.Settle(ctx, "s", ratelimit.Cost{Requests: 1, Tokens: 500}); !errors.Is(err, ratelimit.ErrNotReserved) {
			t.Fatalf("second settle: %v", err)
		}
		avail, _, _ := b.Available(ctx)
		if avail.Tokens != 500 { // debt of 100 charged once
			t.Fatalf("tokens left %d, want 500", avail.Tokens)
		}
	})
	t.Run("estimate policy keeps the estimate both ways", func(t *testing.T) {
		b, _, _ := newBucket(t, t.Name(), l) // the default
		if b.Limits().Policy != ratelimit.PolicyEstimate {
			t.Fatalf("default policy %q, want %q", b.Limits().Policy, ratelimit.PolicyEstimate)
		}
		b.Reserve(ctx, "over", ratelimit.Cost{Requests: 1, Tokens: 400})
		b.Reserve(ctx, "under", ratelimit.Cost{Requests: 1, Tokens: 200})
		b.Settle(ctx, "over", ratelimit.Cost{Requests: 1, Tokens: 550})
		b.Settle(ctx, "under", ratelimit.Cost{Requests: 1, Tokens: 50})
		if avail, _, _ := b.Available(ctx); avail.Tokens != 400 {
			t.Fatalf("estimate policy: %d left, want 400 (the estimates, nothing else)", avail.Tokens)
		}
		// a zero cost (no call was made) still gives everything back
		b.Reserve(ctx, "none", ratelimit.Cost{Requests: 1, Tokens: 300})
		b.Settle(ctx, "none", ratelimit.Cost{})
		if avail, _, _ := b.Available(ctx); avail.Tokens != 400 {
			t.Fatalf("no-call settle: %d left, want 400", avail.Tokens)
		}
	})
	t.Run("debt policy keeps unused estimate, refund policy returns it", func(t *testing.T) {
		b, _, _ := newBucket(t, t.Name(), debt)
		b.Reserve(ctx, "d", ratelimit.Cost{Requests: 1, Tokens: 400})
		b.Settle(ctx, "d", ratelimit.Cost{Requests: 1, Tokens: 100})
		if avail, _, _ := b.Available(ctx); avail.Tokens != 600 {
			t.Fatalf("debt policy refunded: %d left", avail.Tokens)
		}
		lr := l
		lr.Policy = ratelimit.PolicyRefund
		r, _, _ := newBucket(t, t.Name()+"-refund", lr)
		r.Reserve(ctx, "d", ratelimit.Cost{Requests: 1, Tokens: 400})
		r.Settle(ctx, "d", ratelimit.Cost{Requests: 1, Tokens: 100})
		if avail, _, _ := r.Available(ctx); avail.Tokens != 900 {
			t.Fatalf("refund policy: %d left, want 900", avail.Tokens)
		}
	})
	t.Run("settle of an expired reservation", func(t *testing.T) {
		b, _, rdb := newBucket(t, t.Name(), l)
		b.ReservationTTL = 50 * time.Millisecond
		b.Reserve(ctx, "e", ratelimit.Cost{Requests: 1, Tokens: 100})
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) {
			if n, _ := rdb.Exists(ctx, b.Tag()+":res:e").Result(); n == 0 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err := b.Settle(ctx, "e", ratelimit.Cost{Requests: 1, Tokens: 100}); !errors.Is(err, ratelimit.ErrNotReserved) {
			t.Fatalf("settle after expiry: %v", err)
		}
	})
	t.Run("provider headers lower, never raise", func(t *testing.T) {
		b, _, _ := newBucket(t, t.Name(), l)
		h := http.Header{}
		h.Set("x-ratelimit-remaining-tokens", "300")
		h.Set("x-ratelimit-remaining-requests", "not-a-number")
		if lowered, err := b.Sync(ctx, 200, h, 0); err != nil || !lowered {
			t.Fatalf("sync: %v %v", lowered, err)
		}
		avail, _, _ := b.Available(ctx)
		if avail.Tokens != 300 || avail.Requests != 10 {
			t.Fatalf("after sync: %+v, want 300 tokens and untouched requests", avail)
		}
		h.Set("x-ratelimit-remaining-tokens", "900")
		if lowered, _ := b.Sync(ctx, 200, h, 0); lowered {
			t.Fatal("sync raised the bucket")
		}
		if lowered, _ := b.Sync(ctx, 200, http.Header{}, 0); lowered {
			t.Fatal("missing headers changed the bucket")
		}
		// a report from a call that took 200 ms: the provider has refilled
		// 200 tokens since it counted 50 remaining, so the bucket goes to 250
		h.Set("x-ratelimit-remaining-tokens", "50")
		if lowered, _ := b.Sync(ctx, 200, h, 200*time.Millisecond); !lowered {
			t.Fatal("not lowered")
		}
		if avail, _, _ := b.Available(ctx); avail.Tokens != 250 {
			t.Fatalf("after an aged report: %d tokens, want 250 (50 + 200 refilled)", avail.Tokens)
		}
	})
	t.Run("429 empties the bucket until retry-after", func(t *testing.T) {
		b, clk, _ := newBucket(t, t.Name(), l)
		h := http.Header{}
		h.Set("retry-after-ms", "1500")
		if _, err := b.Sync(ctx, http.StatusTooManyRequests, h, 0); err != nil {
			t.Fatal(err)
		}
		clk.advance(1499 * time.Millisecond)
		if d, _ := b.Reserve(ctx, "x", ratelimit.Cost{Requests: 1, Tokens: 0}); d.Admitted {
			t.Fatal("admitted before retry-after")
		}
		clk.advance(101 * time.Millisecond) // 1.6s: 0.1s of refill = 1 request, 100 tokens
		if d, _ := b.Reserve(ctx, "x", ratelimit.Cost{Requests: 1, Tokens: 100}); !d.Admitted {
			t.Fatalf("not admitted after retry-after: wait %s", d.Wait)
		}
	})
	t.Run("daily limit", func(t *testing.T) {
		ld := l
		ld.TokensPerDay = 1500
		b, clk, _ := newBucket(t, t.Name(), ld)
		for i := 0; i < 3; i++ {
			if d, _ := b.Reserve(ctx, "d"+string(rune('0'+i)), ratelimit.Cost{Requests: 1, Tokens: 500}); !d.Admitted {
				t.Fatalf("call %d refused", i)
			}
			clk.advance(time.Second)
		}
		d, _ := b.Reserve(ctx, "d3", ratelimit.Cost{Requests: 1, Tokens: 500})
		if d.Admitted || d.Wait < 5*time.Minute {
			t.Fatalf("daily limit not enforced: %+v", d)
		}
	})
}

func TestLimitsValidate(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	tests := []struct {
		name string
		l    ratelimit.Limits
	}{
		{"no requests", ratelimit.Limits{TokensPerPeriod: 1}},
		{"negative tokens", ratelimit.Limits{RequestsPerPeriod: 1, TokensPerPeriod: -1}},
		{"bad policy", ratelimit.Limits{RequestsPerPeriod: 1, TokensPerPeriod: 1, Policy: "later"}},
		{"too large to count", ratelimit.Limits{RequestsPerPeriod: 1, TokensPerPeriod: 1 << 40, Period: time.Hour}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ratelimit.NewBucket(rdb, "m", "k", tt.l); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

func TestParseHeadersMalformed(t *testing.T) {
	h := http.Header{}
	h.Set("x-ratelimit-remaining-tokens", "-4")
	h.Set("x-ratelimit-reset-tokens", "soon")
	h.Set("retry-after", "1e400")
	s := ratelimit.ParseHeaders(h)
	if s.RemainingTokens != -1 || s.ResetTokens != -1 || s.RetryAfter != 0 || s.LimitRequests != -1 {
		t.Fatalf("malformed headers not reported unknown: %+v", s)
	}
	h = http.Header{}
	h.Set("x-ratelimit-reset-requests", "6m0s")
	h.Set("retry-after", "2")
	s = ratelimit.ParseHeaders(h)
	if s.ResetRequests != 6*time.Minute || s.RetryAfter != 2*time.Second {
		t.Fatalf("parse: %+v", s)
	}
}

// TestRedisRestartLosesBucket documents the bound: Redis without
// persistence forgets the bucket, which comes back full, so a restart can
// admit at most one extra burst on top of what was already admitted.
func TestRedisRestartLosesBucket(t *testing.T) {
	ctx := context.Background()
	srv := redistest.New(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	b, err := ratelimit.NewBucket(rdb, "restart", "k", ratelimit.Limits{RequestsPerPeriod: 100, TokensPerPeriod: 1000, Period: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := b.Reserve(ctx, "a", ratelimit.Cost{Requests: 1, Tokens: 1000}); !d.Admitted {
		t.Fatal("refused")
	}
	if d, _ := b.Reserve(ctx, "b", ratelimit.Cost{Requests: 1, Tokens: 1000}); d.Admitted {
		t.Fatal("admitted over the limit")
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	var d ratelimit.Decision
	for i := 0; i < 50; i++ { // the client reconnects by itself
		if d, err = b.Reserve(ctx, "b", ratelimit.Cost{Requests: 1, Tokens: 1000}); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("no reconnect after restart: %v", err)
	}
	if !d.Admitted {
		t.Fatal("expected the documented state loss: bucket full after a non-persistent restart")
	}
	if d, _ := b.Reserve(ctx, "c", ratelimit.Cost{Requests: 1, Tokens: 1}); d.Admitted {
		t.Fatal("more than one extra burst admitted after restart")
	}
}

// TestLimitAddedKeepsOthersState: a bucket's state is kept per kind of
// limit, so configuring a daily limit leaves what the input and output
// limits had admitted where it was, for a bucket and a window alike.
func TestLimitAddedKeepsOthersState(t *testing.T) {
	for _, limiter := range []ratelimit.Limiter{ratelimit.LimiterBucket, ratelimit.LimiterWindow} {
		t.Run(string(limiter), func(t *testing.T) {
			name := "added-" + string(limiter)
			l := ratelimit.Limits{RequestsPerPeriod: 100, TokensPerPeriod: 100000, InputTokensPerPeriod: 10000, OutputTokensPerPeriod: 2000,
				Period: time.Minute, Limiter: limiter}
			b, clk, rdb := newBucket(t, name, l)
			ctx := context.Background()
			if d, err := b.Reserve(ctx, "job-1", ratelimit.Cost{Requests: 1, Tokens: 7000, Input: 6000, Output: 1000}); err != nil || !d.Admitted {
				t.Fatalf("reserve: %+v %v", d, err)
			}
			before, _, err := b.Available(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// the operator adds a daily token limit; the same model's bucket
			l.TokensPerDay = 1000000
			again, err := ratelimit.NewBucket(rdb, name, "sk-"+name, l)
			if err != nil {
				t.Fatal(err)
			}
			again.NowFunc = clk.now
			after, _, err := again.Available(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if after.Input != before.Input || after.Output != before.Output || before.Input != 4000 || before.Output != 1000 {
				t.Fatalf("available before %+v, after adding a daily limit %+v: want the input and output limits' 4000 and 1000 kept", before, after)
			}
		})
	}
}
