package ratelimit_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prq-dev/prq/ratelimit"
)

// TestAutoLimiter: limiter auto counts as a token bucket until three
// provider replies only a window explains, then, in every process, as a
// window that still holds what the bucket had used (the provider counts
// those calls), and says so once.
func TestAutoLimiter(t *testing.T) {
	ctx := context.Background()
	l := ratelimit.Limits{RequestsPerPeriod: 100, TokensPerPeriod: 1000, Period: time.Second, Limiter: ratelimit.LimiterAuto}
	b, clk, rdb := newBucket(t, t.Name(), l)
	var logs bytes.Buffer
	b.Log = slog.New(slog.NewTextHandler(&logs, nil))
	reserve := func(id string, tokens int64) ratelimit.Decision {
		t.Helper()
		d, err := b.Reserve(ctx, id, ratelimit.Cost{Requests: 1, Tokens: tokens})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	counting := func(b *ratelimit.Bucket) ratelimit.Limiter {
		t.Helper()
		c, err := b.Counting(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	if !reserve("a", 800).Admitted {
		t.Fatal("a refused")
	}
	clk.advance(500 * time.Millisecond)
	// a bucket has refilled 500: 600 fits (a window would refuse it)
	if !reserve("b", 600).Admitted || counting(b) != ratelimit.LimiterBucket {
		t.Fatal("auto does not count as a bucket before any evidence")
	}
	// a reset of 50 s with a tenth of the limit used: no bucket needs that
	h := http.Header{}
	h.Set("x-ratelimit-limit-tokens", "1000")
	h.Set("x-ratelimit-remaining-tokens", "900")
	h.Set("x-ratelimit-reset-tokens", "50s")
	for i := 0; i < 3; i++ {
		if i == 2 && counting(b) != ratelimit.LimiterBucket {
			t.Fatal("switched on two reports")
		}
		if _, err := b.Sync(ctx, http.StatusOK, h, 0); err != nil {
			t.Fatal(err)
		}
	}
	if counting(b) != ratelimit.LimiterWindow {
		t.Fatal("still a bucket after three window-like reports")
	}
	if suspected, _ := b.WindowSuspected(ctx); suspected {
		t.Fatal("auto reported as a suspicion to act on")
	}
	// the window holds the 900 the bucket had used, until they leave it
	if reserve("c", 200).Admitted {
		t.Fatal("admitted past what the provider still counts")
	}
	clk.advance(700 * time.Millisecond) // a bucket would have 800
	d := reserve("c", 200)
	if d.Admitted {
		t.Fatal("admitted 200 while the window holds 900 from 0.7 s ago")
	}
	if want := 300*time.Millisecond + margin; d.Wait < want-slot || d.Wait > want+slot {
		t.Fatalf("wait %s, want %s within a slot: the switch's charge leaves a window after it", d.Wait, want)
	}
	clk.advance(d.Wait)
	if !reserve("c", 200).Admitted || !reserve("d", 800).Admitted {
		t.Fatal("the window's room not admitted once the old charge left")
	}
	clk.advance(400 * time.Millisecond) // a bucket would have 400
	if reserve("e", 100).Admitted {
		t.Fatal("admitted 1100 within a window")
	}
	// every process counts in the window
	other, err := ratelimit.NewBucket(rdb, t.Name(), "sk-"+t.Name(), l)
	if err != nil {
		t.Fatal(err)
	}
	if counting(other) != ratelimit.LimiterWindow {
		t.Fatal("another process's bucket still counts as a bucket")
	}
	if n := strings.Count(logs.String(), "limiter auto now counts in a window"); n != 1 {
		t.Fatalf("said %d times: %s", n, logs.String())
	}
	// several keys: the evidence is the model's, and every key switches
	kb, err := ratelimit.NewKeyedBucket(rdb, t.Name()+"-keys", []string{"sk-a", "sk-b"}, l)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if _, err := kb.ForKey(0).Sync(ctx, http.StatusOK, h, 0); err != nil {
			t.Fatal(err)
		}
	}
	for k := 0; k < 2; k++ {
		if counting(kb.ForKey(k)) != ratelimit.LimiterWindow {
			t.Fatalf("key %d still a bucket after the model's evidence", k)
		}
	}
}
