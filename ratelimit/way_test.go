package ratelimit_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/prq-dev/prq/ratelimit"
)

// TestWindowMarginMeasured: a window limiter whose margin is not set
// holds admissions Window/60 longer until a call's way is measured, then
// twice the longest way of the last two windows (at least 5 ms, at most
// Window/60), back to Window/60 when none was measured in two windows; a
// margin that is set stays; a bucket has none.
func TestWindowMarginMeasured(t *testing.T) {
	ctx := context.Background()
	b, clk, _ := newBucket(t, t.Name(), winLimits)
	if m := b.WindowMargin(); m != margin {
		t.Fatalf("margin %s before any way was measured, want Window/60 (%s)", m, margin)
	}
	b.ObserveWay(3 * time.Millisecond)
	b.ForKey(0).ObserveWay(time.Millisecond) // the copies share the measure
	if m := b.WindowMargin(); m != 6*time.Millisecond {
		t.Fatalf("margin %s after ways of 3 ms and 1 ms, want 6 ms", m)
	}
	// a decision holds the measured margin: a full window's charge stops
	// counting a window, 6 ms and at most a slot after it
	if d, err := b.Reserve(ctx, "a", ratelimit.Cost{Requests: 1, Tokens: 1000}); err != nil || !d.Admitted {
		t.Fatalf("first reservation: %+v %v", d, err)
	}
	d, err := b.Reserve(ctx, "b", ratelimit.Cost{Requests: 1, Tokens: 1000})
	if err != nil || d.Admitted {
		t.Fatalf("second reservation: %+v %v", d, err)
	}
	if want := time.Second + 6*time.Millisecond; d.Wait < want || d.Wait > want+slot {
		t.Fatalf("wait %s, want %s within a slot", d.Wait, want)
	}
	clk.advance(time.Second) // the next window: the 3 ms is the previous one's
	if m := b.WindowMargin(); m != 6*time.Millisecond {
		t.Fatalf("margin %s a window later, want 6 ms still", m)
	}
	b.ObserveWay(time.Millisecond)
	clk.advance(time.Second)
	if m := b.WindowMargin(); m != 5*time.Millisecond {
		t.Fatalf("margin %s after a 1 ms way, want the least, 5 ms", m)
	}
	b.ObserveWay(time.Second)
	if m := b.WindowMargin(); m != margin {
		t.Fatalf("margin %s after a 1 s way, want at most Window/60 (%s)", m, margin)
	}
	clk.advance(2 * time.Second)
	if m := b.WindowMargin(); m != margin {
		t.Fatalf("margin %s with no way measured in two windows, want Window/60 (%s)", m, margin)
	}
	// a charge that could not be moved to its write: the default for
	// two windows, whatever is measured meanwhile
	b.ObserveWay(time.Millisecond)
	b.WayUnknown()
	b.ObserveWay(time.Millisecond)
	clk.advance(2*time.Second - time.Microsecond)
	if m := b.WindowMargin(); m != margin {
		t.Fatalf("margin %s within two windows of an unknown way, want Window/60 (%s)", m, margin)
	}
	b.ObserveWay(time.Millisecond)
	clk.advance(time.Microsecond)
	if m := b.WindowMargin(); m != 5*time.Millisecond {
		t.Fatalf("margin %s two windows after an unknown way, want the measured 5 ms", m)
	}
	set := winLimits
	set.WindowMargin = 50 * time.Millisecond
	bs, _, _ := newBucket(t, t.Name()+"-set", set)
	bs.ObserveWay(time.Millisecond)
	if m := bs.WindowMargin(); m != 50*time.Millisecond {
		t.Fatalf("a margin set to 50 ms became %s", m)
	}
	bb, _, _ := newBucket(t, t.Name()+"-bucket", ratelimit.Limits{RequestsPerPeriod: 10, TokensPerPeriod: 1000, Period: time.Second})
	bb.ObserveWay(time.Millisecond)
	if m := bb.WindowMargin(); m != 0 {
		t.Fatalf("a token bucket's margin: %s", m)
	}
}

// TestWindowMarginGrows: when the margin grows between decisions (a
// longer way measured, here or in another process), what stopped counting
// under the shorter one counts again: the longer margin holds it.
func TestWindowMarginGrows(t *testing.T) {
	ctx := context.Background()
	b, clk, _ := newBucket(t, t.Name(), winLimits)
	b.ObserveWay(time.Millisecond) // margin 5 ms
	if d, err := b.Reserve(ctx, "a", ratelimit.Cost{Requests: 1, Tokens: 900}); err != nil || !d.Admitted {
		t.Fatalf("first reservation: %+v %v", d, err)
	}
	// past a's slot, the window and the 5 ms: a no longer counts
	clk.advance(time.Second + slot + 6*time.Millisecond)
	if d, err := b.Reserve(ctx, "b", ratelimit.Cost{Requests: 1, Tokens: 100}); err != nil || !d.Admitted {
		t.Fatalf("second reservation: %+v %v", d, err)
	}
	b.ObserveWay(8 * time.Millisecond) // margin 16 ms: a counts again
	d, err := b.Reserve(ctx, "c", ratelimit.Cost{Requests: 1, Tokens: 100})
	if err != nil {
		t.Fatal(err)
	}
	if d.Admitted {
		t.Fatal("admitted 1100 tokens in a window of the longer margin: the charge that had stopped counting was not counted again")
	}
}

func TestProcessingTime(t *testing.T) {
	for _, c := range []struct {
		v    string
		want time.Duration
		ok   bool
	}{
		{"412", 412 * time.Millisecond, true},
		{" 7 ", 7 * time.Millisecond, true},
		{"", 0, false},
		{"355.4426", 355442600 * time.Nanosecond, true},
		{"-3", 0, false},
		{"NaN", 0, false},
		{"Inf", 0, false},
		{"1e3x", 0, false},
		{"99999999999", 0, false},
	} {
		h := http.Header{}
		if c.v != "" {
			h.Set("openai-processing-ms", c.v)
		}
		if got, ok := ratelimit.ProcessingTime(h); got != c.want || ok != c.ok {
			t.Errorf("ProcessingTime(%q) = %s, %v; want %s, %v", c.v, got, ok, c.want, c.ok)
		}
	}
}

// TestWindowMarginShared: processes measure their own way, and each
// holds the longest margin any process measured over the last two
// windows (a process whose calls are quicker does not let go of
// another's charges early); a process that has measured nothing does
// not set it.
func TestWindowMarginShared(t *testing.T) {
	ctx := context.Background()
	quick, clk, rdb := newBucket(t, t.Name(), winLimits)
	slow, err := ratelimit.NewBucket(rdb, t.Name(), "sk-"+t.Name(), winLimits)
	if err != nil {
		t.Fatal(err)
	}
	slow.NowFunc = clk.now
	unmeasured, err := ratelimit.NewBucket(rdb, t.Name(), "sk-"+t.Name(), winLimits)
	if err != nil {
		t.Fatal(err)
	}
	unmeasured.NowFunc = clk.now
	quick.ObserveWay(time.Millisecond)    // 5 ms
	slow.ObserveWay(8 * time.Millisecond) // 16 ms
	g := slot.Microseconds()
	align := func() {
		now := clk.now().UnixMicro()
		clk.advance(time.Duration((now/g+1)*g+1-now) * time.Microsecond)
	}
	try := func(b *ratelimit.Bucket, id string, tokens int64) ratelimit.Decision {
		t.Helper()
		d, err := b.Reserve(ctx, id, ratelimit.Cost{Requests: 1, Tokens: tokens})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	align()
	if d := try(slow, "s", 1); !d.Admitted {
		t.Fatal("the slow process's call refused")
	}
	align()
	if d := try(quick, "a", 999); !d.Admitted {
		t.Fatal("the quick process's call refused")
	}
	d := try(quick, "b", 1000)
	if want := time.Second + 16*time.Millisecond + time.Microsecond; d.Admitted || d.Wait != want {
		t.Fatalf("quick process: %+v, want a wait of the window and the slow process's 16 ms margin, %s", d, want)
	}
	// two windows on, only the unmeasured process decided meanwhile: the
	// quick process holds its own 5 ms again
	clk.advance(2*time.Second + slot)
	quick.ObserveWay(time.Millisecond)
	if d := try(unmeasured, "u", 1); !d.Admitted {
		t.Fatal("the unmeasured process's call refused")
	}
	align()
	if d := try(quick, "c", 999); !d.Admitted {
		t.Fatal("refused after two windows")
	}
	d = try(quick, "e", 1000)
	if want := time.Second + 5*time.Millisecond + time.Microsecond; d.Admitted || d.Wait != want {
		t.Fatalf("quick process two windows on: %+v, want the window and its own 5 ms, %s", d, want)
	}
}
