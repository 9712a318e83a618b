package ratelimit_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/ratelimit"
)

var winLimits = ratelimit.Limits{RequestsPerPeriod: 10, TokensPerPeriod: 1000, Period: time.Second, Limiter: ratelimit.LimiterWindow}

// slot is the window's counting grain for winLimits (Window/120), margin
// how much longer than the window an admission counts (Window/60).
const (
	slot   = time.Second / 120
	margin = time.Second / 60
)

func TestWindowEdges(t *testing.T) {
	ctx := context.Background()
	reserve := func(t *testing.T, b *ratelimit.Bucket, id string, tokens int64) ratelimit.Decision {
		t.Helper()
		d, err := b.Reserve(ctx, id, ratelimit.Cost{Requests: 1, Tokens: tokens})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	t.Run("waits for the window, not for a refill", func(t *testing.T) {
		b, clk, _ := newBucket(t, t.Name(), winLimits)
		if d := reserve(t, b, "a", 900); !d.Admitted {
			t.Fatal("first reservation refused")
		}
		clk.advance(200 * time.Millisecond) // a bucket would have refilled 200
		d := reserve(t, b, "b", 300)
		if d.Admitted {
			t.Fatal("admitted 1200 tokens within one window")
		}
		// the first admission leaves a window and the margin after it,
		// give or take a slot
		if want := 800*time.Millisecond + margin; d.Wait < want-slot || d.Wait > want+slot {
			t.Fatalf("wait = %s, want %s within a slot", d.Wait, want)
		}
		clk.advance(d.Wait - time.Microsecond)
		if reserve(t, b, "b", 300).Admitted {
			t.Fatal("admitted before the wait had passed")
		}
		clk.advance(time.Microsecond)
		if !reserve(t, b, "b", 300).Admitted {
			t.Fatal("not admitted when the wait had passed")
		}
	})
	t.Run("a small cost fits beside what the window holds", func(t *testing.T) {
		b, _, _ := newBucket(t, t.Name(), winLimits)
		reserve(t, b, "a", 900)
		if !reserve(t, b, "b", 100).Admitted {
			t.Fatal("100 more refused with 100 left")
		}
		if reserve(t, b, "c", 1).Admitted {
			t.Fatal("admitted over the limit")
		}
	})
	t.Run("wait names the slot that frees enough", func(t *testing.T) {
		b, clk, _ := newBucket(t, t.Name(), winLimits)
		reserve(t, b, "a", 400)
		clk.advance(300 * time.Millisecond)
		reserve(t, b, "b", 600)
		d := reserve(t, b, "c", 400) // needs the 400 to leave, not the 600
		if want := 700*time.Millisecond + margin; d.Admitted || d.Wait < want-slot || d.Wait > want+slot {
			t.Fatalf("decision %+v, want a wait of %s within a slot", d, want)
		}
		d = reserve(t, b, "d", 1000) // needs both to leave
		if want := time.Second + margin; d.Wait < want-slot || d.Wait > want+slot {
			t.Fatalf("wait for everything = %s, want %s within a slot", d.Wait, want)
		}
	})
	t.Run("requests and tokens all or nothing", func(t *testing.T) {
		b, _, _ := newBucket(t, t.Name(), winLimits)
		for i := 0; i < 10; i++ {
			if !reserve(t, b, fmt.Sprint("r", i), 1).Admitted {
				t.Fatal("request refused early")
			}
		}
		if reserve(t, b, "over", 1).Admitted {
			t.Fatal("11th request admitted")
		}
		avail, _, _ := b.Available(ctx)
		if avail.Tokens != 990 || avail.Requests != 0 {
			t.Fatalf("available %+v, want 0 requests and 990 tokens", avail)
		}
	})
	t.Run("daily limit over a sliding day", func(t *testing.T) {
		l := winLimits
		l.TokensPerDay = 1500
		b, clk, _ := newBucket(t, t.Name(), l)
		reserve(t, b, "a", 1000)
		clk.advance(2 * time.Second)
		d := reserve(t, b, "b", 600)
		if d.Admitted || d.Wait < 23*time.Hour {
			t.Fatalf("daily window: %+v", d)
		}
		if !reserve(t, b, "c", 500).Admitted {
			t.Fatal("500 within the day refused")
		}
	})
	t.Run("sub-window caps bursts", func(t *testing.T) {
		l := winLimits
		l.SubWindow = 100 * time.Millisecond // share defaults to 1/10: 1 request, 100 tokens
		b, clk, _ := newBucket(t, t.Name(), l)
		_, err := b.Reserve(ctx, "big", ratelimit.Cost{Requests: 1, Tokens: 101})
		var ce *ratelimit.CostError
		if !errors.As(err, &ce) || ce.Burst != 100 {
			t.Fatalf("want CostError with the sub-window's 100, got %v", err)
		}
		if !reserve(t, b, "a", 100).Admitted {
			t.Fatal("a sub-window's share refused")
		}
		d := reserve(t, b, "b", 10)
		if want := 100*time.Millisecond + margin; d.Admitted || d.Wait > want+time.Second/1200 || d.Wait < want-time.Second/1200 {
			t.Fatalf("decision %+v, want a wait of one sub-window and the margin", d)
		}
		clk.advance(d.Wait)
		if !reserve(t, b, "b", 10).Admitted {
			t.Fatal("not admitted once the sub-window moved on")
		}
	})
	t.Run("settle refunds in the slot charged, debt counts now", func(t *testing.T) {
		l := winLimits
		l.Policy = ratelimit.PolicyRefund
		b, clk, _ := newBucket(t, t.Name(), l)
		reserve(t, b, "a", 900)
		clk.advance(500 * time.Millisecond)
		if err := b.Settle(ctx, "a", ratelimit.Cost{Requests: 1, Tokens: 100}); err != nil {
			t.Fatal(err)
		}
		if avail, _, _ := b.Available(ctx); avail.Tokens != 900 {
			t.Fatalf("after refund %d available, want 900", avail.Tokens)
		}
		reserve(t, b, "b", 100)
		if err := b.Settle(ctx, "b", ratelimit.Cost{Requests: 1, Tokens: 400}); err != nil {
			t.Fatal(err)
		}
		if avail, _, _ := b.Available(ctx); avail.Tokens != 500 {
			t.Fatalf("after debt %d available, want 500", avail.Tokens)
		}
		// the refunded admission leaves at 1s: only the 100 it kept goes
		clk.advance(500*time.Millisecond + margin + slot)
		if avail, _, _ := b.Available(ctx); avail.Tokens != 600 {
			t.Fatalf("after the first slot left %d available, want 600", avail.Tokens)
		}
	})
	t.Run("lower books what the provider counted and we did not", func(t *testing.T) {
		b, _, _ := newBucket(t, t.Name(), winLimits)
		reserve(t, b, "a", 100)
		if lowered, err := b.Lower(ctx, ratelimit.Values{Requests: -1, Tokens: 950, Input: -1, Output: -1}, 0); err != nil || lowered {
			t.Fatalf("provider counts less than we do: lowered %v %v", lowered, err)
		}
		if lowered, _ := b.Lower(ctx, ratelimit.Values{Requests: -1, Tokens: 500, Input: -1, Output: -1}, 0); !lowered {
			t.Fatal("not lowered to the provider's remaining")
		}
		if avail, _, _ := b.Available(ctx); avail.Tokens != 500 {
			t.Fatalf("%d available, want 500", avail.Tokens)
		}
		if lowered, _ := b.Lower(ctx, ratelimit.Values{Requests: -1, Tokens: 500, Input: -1, Output: -1}, 0); lowered {
			t.Fatal("the same report lowered twice")
		}
	})
	t.Run("a report from before our admission compares with then", func(t *testing.T) {
		b, clk, _ := newBucket(t, t.Name(), winLimits)
		reserve(t, b, "a", 300)
		clk.advance(100 * time.Millisecond)
		reserve(t, b, "b", 300)
		// as of 100ms ago the provider had seen only a's 300
		if lowered, _ := b.Lower(ctx, ratelimit.Values{Requests: -1, Tokens: 700, Input: -1, Output: -1}, 100*time.Millisecond); lowered {
			t.Fatal("a report agreeing with our window then lowered it")
		}
	})
	t.Run("a report as of the call's arrival books no call of ours twice", func(t *testing.T) {
		// a is written, then b 100 ms later, before a reaches the
		// provider (a loaded machine): a's reply reports what the
		// provider counted at a's arrival, a and b. Compared with our
		// count at a's write (a alone), b would be booked again and the
		// window held 300 short for a window; compared up to the latest
		// a's reply bounds its arrival (now), nothing is booked, and
		// what another client took still is.
		b, clk, _ := newBucket(t, t.Name(), winLimits)
		reserve(t, b, "a", 300)
		clk.advance(100 * time.Millisecond)
		reserve(t, b, "b", 300)
		h := http.Header{}
		h.Set("x-ratelimit-remaining-tokens", "400")
		if lowered, err := b.SyncBetween(ctx, 200, h, 100*time.Millisecond, 0); err != nil || lowered {
			t.Fatalf("a report counting a and b lowered the window: %v %v", lowered, err)
		}
		if avail, _, _ := b.Available(ctx); avail.Tokens != 400 {
			t.Fatalf("%d available, want 400", avail.Tokens)
		}
		h.Set("x-ratelimit-remaining-tokens", "300")
		if lowered, _ := b.SyncBetween(ctx, 200, h, 100*time.Millisecond, 0); !lowered {
			t.Fatal("another client's 100 not booked")
		}
		if avail, _, _ := b.Available(ctx); avail.Tokens != 300 {
			t.Fatalf("%d available, want 300", avail.Tokens)
		}
	})
	t.Run("penalize stops all until the wait", func(t *testing.T) {
		b, clk, _ := newBucket(t, t.Name(), winLimits)
		reserve(t, b, "a", 10)
		if err := b.Penalize(ctx, 300*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		d := reserve(t, b, "b", 1)
		if d.Admitted || d.Wait < 300*time.Millisecond {
			t.Fatalf("after a 429's 300ms: %+v", d)
		}
		clk.advance(d.Wait)
		if !reserve(t, b, "b", 1).Admitted {
			t.Fatal("still refused after the wait")
		}
	})
}

func TestWindowLimitsValidate(t *testing.T) {
	base := ratelimit.Limits{RequestsPerPeriod: 10, TokensPerPeriod: 1000, Period: time.Minute}
	tests := []struct {
		name string
		edit func(*ratelimit.Limits)
		want string // "" valid
	}{
		{"bucket", func(*ratelimit.Limits) {}, ""},
		{"window", func(l *ratelimit.Limits) { l.Limiter = ratelimit.LimiterWindow }, ""},
		{"sub-window", func(l *ratelimit.Limits) {
			l.Limiter, l.SubWindow, l.SubWindowShare = ratelimit.LimiterWindow, 10*time.Second, 0.25
		}, ""},
		{"unknown limiter", func(l *ratelimit.Limits) { l.Limiter = "leaky" }, `limiter must be "bucket", "window" or "auto", got "leaky"`},
		{"window on a bucket", func(l *ratelimit.Limits) { l.SubWindow = time.Second }, "apply to limiters \"window\" and \"auto\" only"},
		{"burst on a window", func(l *ratelimit.Limits) { l.Limiter, l.BurstTokens = ratelimit.LimiterWindow, 10 }, "burst applies to limiter \"bucket\""},
		{"sub-window too long", func(l *ratelimit.Limits) { l.Limiter, l.SubWindow = ratelimit.LimiterWindow, time.Minute }, "must be shorter than the window"},
		{"sub-window too short", func(l *ratelimit.Limits) { l.Limiter, l.SubWindow = ratelimit.LimiterWindow, 100*time.Millisecond }, "at most 60 sub-windows"},
		{"share out of range", func(l *ratelimit.Limits) {
			l.Limiter, l.SubWindow, l.SubWindowShare = ratelimit.LimiterWindow, 10*time.Second, 1.5
		}, "share must be in (0, 1]"},
		{"share without sub-window", func(l *ratelimit.Limits) { l.Limiter, l.SubWindowShare = ratelimit.LimiterWindow, 0.5 }, "needs a sub-window"},
		{"share admits nothing", func(l *ratelimit.Limits) {
			l.Limiter, l.SubWindow, l.SubWindowShare = ratelimit.LimiterWindow, 10*time.Second, 0.05
		}, "admits nothing"},
		{"margin too long", func(l *ratelimit.Limits) { l.Limiter, l.WindowMargin = ratelimit.LimiterWindow, 2*time.Minute }, "window margin must be between"},
		{"window too long", func(l *ratelimit.Limits) { l.Limiter, l.Window = ratelimit.LimiterWindow, 48*time.Hour }, "between 1ms and 24h"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := base
			tt.edit(&l)
			_, err := ratelimit.NewBucket(nil, "m", "k", l)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("want valid, got %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("want error containing %q, got %v", tt.want, err)
			}
		})
	}
}

func TestCheckWindows(t *testing.T) {
	t0 := time.UnixMicro(1_000_000)
	at := func(ms int64) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	tests := []struct {
		name string
		adm  []ratelimit.Admission
		viol bool
	}{
		{"limit at once", []ratelimit.Admission{{at(0), 50}, {at(0), 50}}, false},
		{"over at once", []ratelimit.Admission{{at(0), 60}, {at(0), 50}}, true},
		{"a window later", []ratelimit.Admission{{at(0), 100}, {at(1000), 100}}, false},
		{"a refill is not a window", []ratelimit.Admission{{at(0), 100}, {at(500), 50}}, true},
		{"just inside", []ratelimit.Admission{{at(0), 100}, {at(999), 1}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := ratelimit.CheckWindows(tt.adm, 100, time.Second)
			if got := rep.Violations > 0; got != tt.viol {
				t.Fatalf("violations = %d, want violation %v", rep.Violations, tt.viol)
			}
		})
	}
}

// TestCheckWindowsWhileQueued: the mean fill of the windows from the
// first admission to the last is 1 for clumps of the limit a window
// apart, as the bucket's measure (total over limit·(1+span/W)) is; where
// windows are not full the two differ by what they average over: the
// bucket's measure also over the window after the last admission, when
// nothing is left to admit.
func TestCheckWindowsWhileQueued(t *testing.T) {
	t0 := time.UnixMicro(1_000_000)
	at := func(ms int64) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	tests := []struct {
		name         string
		adm          []ratelimit.Admission
		want, bucket float64
	}{
		{"clumps a window apart", []ratelimit.Admission{{at(0), 100}, {at(1000), 100}, {at(2000), 100}, {at(3000), 100}}, 1, 1},
		{"the last window spread", []ratelimit.Admission{{at(0), 100}, {at(1000), 100}, {at(2000), 50}, {at(2500), 50}}, 0.9, 3 / 3.5},
		{"half every half window", []ratelimit.Admission{{at(0), 50}, {at(500), 50}, {at(1000), 50}, {at(1500), 50}, {at(2000), 50}}, 0.875, 2.5 / 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := ratelimit.CheckWindows(tt.adm, 100, time.Second)
			old := ratelimit.CheckIntervals(tt.adm, 100, time.Second, 100)
			if rep.Violations != 0 || math.Abs(rep.WhileQueued-tt.want) > 1e-9 || math.Abs(old.Utilisation-tt.bucket) > 1e-9 {
				t.Fatalf("violations %d, while queued %.4f (want %.4f), bucket measure %.4f (want %.4f)", rep.Violations, rep.WhileQueued, tt.want, old.Utilisation, tt.bucket)
			}
		})
	}
}

func TestWindowLike(t *testing.T) {
	h := func(remaining, reset string) http.Header {
		x := http.Header{}
		x.Set("x-ratelimit-limit-tokens", "1000")
		x.Set("x-ratelimit-remaining-tokens", remaining)
		x.Set("x-ratelimit-reset-tokens", reset)
		return x
	}
	tests := []struct {
		name, remaining, reset string
		want                   bool
	}{
		{"bucket refill", "900", "6s", false},
		{"bucket empty", "0", "1m0s", false},
		{"window after a small call", "900", "59.5s", true},
		{"window full", "0", "59s", false}, // a bucket could say so too
		{"no headers", "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ratelimit.ParseHeaders(h(tt.remaining, tt.reset)).WindowLike(time.Minute); got != tt.want {
				t.Fatalf("WindowLike = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestWindowReconfigured: a window whose slots change size (a new window
// or sub-window) starts afresh instead of reading old slots as new times.
func TestWindowReconfigured(t *testing.T) {
	ctx := context.Background()
	b, clk, rdb := newBucket(t, t.Name(), winLimits)
	if d, _ := b.Reserve(ctx, "a", ratelimit.Cost{Requests: 1, Tokens: 1000}); !d.Admitted {
		t.Fatal("refused")
	}
	l := winLimits
	l.Window = 10 * time.Second
	b2, err := ratelimit.NewBucket(rdb, t.Name(), "sk-"+t.Name(), l)
	if err != nil {
		t.Fatal(err)
	}
	b2.NowFunc = clk.now
	d, err := b2.Reserve(ctx, "b", ratelimit.Cost{Requests: 1, Tokens: 500})
	if err != nil || !d.Admitted {
		t.Fatalf("after reconfiguring: %+v %v", d, err)
	}
	d, _ = b2.Reserve(ctx, "c", ratelimit.Cost{Requests: 1, Tokens: 600})
	if want := 10*time.Second + 10*margin; d.Admitted || d.Wait > want+time.Second/12 || d.Wait < want-time.Second/12 {
		t.Fatalf("the new 10s window: %+v", d)
	}
	fields, _ := rdb.HLen(ctx, b2.StateKey()).Result()
	// 't', 'tv' and 'x' (the TTL's refresh), 9 fields per dimension and
	// b's slot and its time in each of the two: 25 (a's would make 29)
	if fields > 25 {
		t.Fatalf("%d fields left in the state: the old slots were not dropped", fields)
	}
}

// TestWindowLearnsMargin: a 429 while the window admitted means the
// provider counts calls later than prq admits them; each one doubles how
// much longer admissions are held (from one slot, up to a tenth of the
// window).
func TestWindowLearnsMargin(t *testing.T) {
	ctx := context.Background()
	b, clk, _ := newBucket(t, t.Name(), winLimits)
	for i := 0; i < 2; i++ {
		if err := b.Penalize(ctx, time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	clk.advance(3 * time.Second) // the penalties have left
	if d, _ := b.Reserve(ctx, "a", ratelimit.Cost{Requests: 1, Tokens: 1000}); !d.Admitted {
		t.Fatal("refused after the penalties left")
	}
	d, _ := b.Reserve(ctx, "b", ratelimit.Cost{Requests: 1, Tokens: 1})
	if want := time.Second + margin + 2*slot; d.Admitted || d.Wait < want-slot || d.Wait > want+slot {
		t.Fatalf("after two 429s: %+v, want a wait of %s within a slot", d, want)
	}
	for i := 0; i < 20; i++ {
		b.Penalize(ctx, time.Millisecond)
	}
	clk.advance(3 * time.Second)
	b.Reserve(ctx, "c", ratelimit.Cost{Requests: 1, Tokens: 1000})
	d, _ = b.Reserve(ctx, "d", ratelimit.Cost{Requests: 1, Tokens: 1})
	if want := time.Second + margin + (time.Second+margin)/10; d.Wait < want-slot || d.Wait > want+slot {
		t.Fatalf("after many 429s: wait %s, want %s (capped at a tenth of the window) within a slot", d.Wait, want)
	}
}

// TestWindowSlotTime: a slot stops counting a span after its latest
// charge, not after the slot's end; once a writer that knows no times
// (an older prq) has changed the slot, it counts to its end again.
func TestWindowSlotTime(t *testing.T) {
	ctx := context.Background()
	b, clk, rdb := newBucket(t, t.Name(), winLimits)
	g := slot.Microseconds()
	// charge 1 µs into a slot: its end is a slot later
	now := clk.now().UnixMicro()
	clk.advance(time.Duration((now/g+1)*g+1-now) * time.Microsecond)
	if d, err := b.Reserve(ctx, "a", ratelimit.Cost{Requests: 1, Tokens: 1000}); err != nil || !d.Admitted {
		t.Fatalf("first reservation: %+v %v", d, err)
	}
	d, err := b.Reserve(ctx, "b", ratelimit.Cost{Requests: 1, Tokens: 1000})
	if err != nil || d.Admitted {
		t.Fatalf("second reservation: %+v %v", d, err)
	}
	span := time.Second + margin.Truncate(time.Microsecond) // as the script counts it
	if want := span + time.Microsecond; d.Wait != want {
		t.Fatalf("wait %s, want the window and the margin after the charge, %s (the slot's end would be %s later)", d.Wait, want, slot-time.Microsecond)
	}
	clk.advance(d.Wait - time.Microsecond)
	if d, _ := b.Reserve(ctx, "b", ratelimit.Cost{Requests: 1, Tokens: 1000}); d.Admitted {
		t.Fatal("admitted before the charge left the window")
	}
	clk.advance(time.Microsecond)
	if d, _ := b.Reserve(ctx, "b", ratelimit.Cost{Requests: 1, Tokens: 1000}); !d.Admitted {
		t.Fatal("not admitted when the charge had left the window")
	}
	// an older writer adds to b's slot (tokens are dimension 2): the
	// slot's time no longer holds, it counts to the slot's end
	j := clk.now().UnixMicro() / g
	if err := rdb.HIncrBy(ctx, b.StateKey(), fmt.Sprintf("w2:%d", j), 1).Err(); err != nil {
		t.Fatal(err)
	}
	d, err = b.Reserve(ctx, "c", ratelimit.Cost{Requests: 1, Tokens: 1000})
	if err != nil || d.Admitted {
		t.Fatalf("third reservation: %+v %v", d, err)
	}
	end := time.UnixMicro((j + 1) * g)
	if want := end.Add(span).Sub(clk.now()); d.Wait != want {
		t.Fatalf("wait %s after an untimed write, want to the slot's end and the span, %s", d.Wait, want)
	}
}

// TestWindowSlotTimeOlderWriter: a writer that knows no slot times (an
// older prq) may move a charge within a slot without changing its value;
// it saves the state's time t but not tv, so after such a save the slots
// up to then count to their ends, and later slots' times hold again. The
// time fields it leaves when it drops old slots are dropped.
func TestWindowSlotTimeOlderWriter(t *testing.T) {
	ctx := context.Background()
	b, clk, rdb := newBucket(t, t.Name(), winLimits)
	g := slot.Microseconds()
	span := time.Second + margin.Truncate(time.Microsecond)
	now := clk.now().UnixMicro()
	clk.advance(time.Duration((now/g+1)*g+1-now) * time.Microsecond)
	if d, err := b.Reserve(ctx, "a", ratelimit.Cost{Requests: 1, Tokens: 1000}); err != nil || !d.Admitted {
		t.Fatalf("first reservation: %+v %v", d, err)
	}
	j := clk.now().UnixMicro() / g
	// the older writer saves 2 µs later, its slot's value unchanged
	clk.advance(2 * time.Microsecond)
	if err := rdb.HSet(ctx, b.StateKey(), "t", clk.now().UnixMicro()).Err(); err != nil {
		t.Fatal(err)
	}
	d, err := b.Reserve(ctx, "b", ratelimit.Cost{Requests: 1, Tokens: 1000})
	if err != nil || d.Admitted {
		t.Fatalf("second reservation: %+v %v", d, err)
	}
	if want := time.UnixMicro((j + 1) * g).Add(span).Sub(clk.now()); d.Wait != want {
		t.Fatalf("wait %s after an older writer's save, want to the slot's end and the span, %s", d.Wait, want)
	}
	// a slot begun after that save keeps its time
	clk.advance(d.Wait + slot)
	if d, _ := b.Reserve(ctx, "b", ratelimit.Cost{Requests: 1, Tokens: 1000}); !d.Admitted {
		t.Fatal("b refused after a's slot left the window")
	}
	d, err = b.Reserve(ctx, "c", ratelimit.Cost{Requests: 1, Tokens: 1000})
	if err != nil || d.Admitted {
		t.Fatalf("third reservation: %+v %v", d, err)
	}
	if want := span + time.Microsecond; d.Wait != want {
		t.Fatalf("wait %s for a slot begun after the older save, want the charge's own time and the span, %s", d.Wait, want)
	}
	// the older writer drops slots below a later d and leaves their times
	dKey := "w2d"
	dv, err := rdb.HGet(ctx, b.StateKey(), dKey).Int64()
	if err != nil {
		t.Fatal(err)
	}
	left := fmt.Sprintf("w2:%dt", dv+1)
	if err := rdb.HSet(ctx, b.StateKey(), left, "1:1", dKey, dv+3).Err(); err != nil {
		t.Fatal(err)
	}
	clk.advance(span + slot) // b has left: d is admitted and saved
	if d, err := b.Reserve(ctx, "d", ratelimit.Cost{Requests: 1, Tokens: 1}); err != nil || !d.Admitted {
		t.Fatalf("fourth reservation: %+v %v", d, err)
	}
	if n, _ := rdb.HExists(ctx, b.StateKey(), left).Result(); n {
		t.Fatalf("%s, left by an older writer below d, is still there", left)
	}
}

// TestWindowReadsOnce: a decision reads the window's slots in one
// command for all its dimensions (the slots leaving the window, the one
// a longer span would count again, the current one), beside the one
// that reads the state's fields, and deletes the slots that left
// storage in one, however many dimensions.
func TestWindowReadsOnce(t *testing.T) {
	ctx := context.Background()
	b, clk, rdb := newBucket(t, t.Name(), winLimits)
	// a charge leaves the window and slots leave storage (fewer than
	// one command reads or deletes at most: 498 and 500 fields)
	for i, step := range []time.Duration{1200 * time.Millisecond, 500 * time.Millisecond, 550 * time.Millisecond} {
		if d, err := b.Reserve(ctx, fmt.Sprintf("a%d", i), ratelimit.Cost{Requests: 1, Tokens: 10}); err != nil || !d.Admitted {
			t.Fatalf("reservation %d: %+v %v", i, d, err)
		}
		clk.advance(step)
	}
	got := commandsOn(t, rdb, b.StateKey(), func() {
		if d, err := b.Reserve(ctx, "b", ratelimit.Cost{Requests: 1, Tokens: 10}); err != nil || !d.Admitted {
			t.Fatalf("reservation: %+v %v", d, err)
		}
	})
	if got["hmget"] != 2 || got["hdel"] != 1 {
		t.Fatalf("commands on the state: %v, want 2 HMGETs (its fields, its slots) and 1 HDEL", got)
	}
}

// commandsOn counts, by name, the commands Redis runs on key (inside
// scripts too) while f runs, from MONITOR on a connection of its own.
func commandsOn(t *testing.T, rdb *redis.Client, key string, f func()) map[string]int {
	t.Helper()
	ctx := context.Background()
	conn, err := net.Dial("tcp", rdb.Options().Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(conn)
	if l, err := rd.ReadString('\n'); err != nil || !strings.HasPrefix(l, "+OK") {
		t.Fatalf("MONITOR: %q %v", l, err)
	}
	marker := key + ":monitor-marker"
	f()
	rdb.Get(ctx, marker)
	got := map[string]int{}
	for {
		l, err := rd.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(l, `"`+marker+`"`) {
			return got
		}
		// +1796558311.749665 [0 lua] "HMGET" "key" ...
		parts := strings.SplitN(l, `"`, 5)
		if len(parts) >= 4 && parts[3] == key {
			got[strings.ToLower(parts[1])]++
		}
	}
}

// TestWindowSyncCountsThen: a provider's remaining count as of age ago
// is compared with what the window held then (its own window then, not
// now's), and only what it did not know of is booked, in the slot of
// then: charges of 100 at 0, 0.2, 0.4 and 0.6 s, synced at 1.1 s. It
// reads the slots it needs in one command beside B.load's two.
func TestWindowSyncCountsThen(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name      string
		age       time.Duration
		remaining string
		lowered   bool
		avail     int64
	}{
		// then (0.8 s) the window held all four: 100 unknown to it
		{"then held what now does not", 300 * time.Millisecond, "500", true, 600},
		// then (1.05 s) it held the last three: 50 unknown to it
		{"then held what now does", 50 * time.Millisecond, "650", true, 650},
		// the provider counts less: never raised
		{"fewer", 0, "800", false, 700},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, clk, rdb := newBucket(t, t.Name(), winLimits)
			for i := range 4 {
				if d, err := b.Reserve(ctx, fmt.Sprintf("a%d", i), ratelimit.Cost{Requests: 1, Tokens: 100}); err != nil || !d.Admitted {
					t.Fatalf("reservation %d: %+v %v", i, d, err)
				}
				clk.advance(200 * time.Millisecond)
			}
			clk.advance(300 * time.Millisecond)
			h := http.Header{}
			h.Set("x-ratelimit-remaining-tokens", c.remaining)
			var lowered bool
			var err error
			// the state's fields, the slots B.load walks, the slots
			// between then and now: three reads
			got := commandsOn(t, rdb, b.StateKey(), func() { lowered, err = b.Sync(ctx, http.StatusOK, h, c.age) })
			if err != nil || lowered != c.lowered {
				t.Fatalf("sync: lowered %v %v, want %v", lowered, err, c.lowered)
			}
			if got["hmget"] > 3 {
				t.Errorf("sync read the state in %d commands, want at most 3", got["hmget"])
			}
			avail, _, err := b.Available(ctx)
			if err != nil || avail.Tokens != c.avail {
				t.Fatalf("available %+v %v, want %d tokens", avail, err, c.avail)
			}
		})
	}
}
