package bench

import (
	"math"
	"testing"
	"time"

	"github.com/prq-dev/prq/fake/fakeopenai"
)

// TestLossAccountsForEveryUnusedToken: burst 100, 100 tokens/s; 100 at
// 0 s, 100 at 2 s, 50 at 2.5 s: the bucket is full from 1 s to 2 s (100
// lost, half of it while a job waited) and empty at the end; allowance
// 100 + 250 = 350, used 250.
func TestLossAccountsForEveryUnusedToken(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	adm := []fakeopenai.Admission{{At: at(0), Cost: 100}, {At: at(2000), Cost: 100}, {At: at(2500), Cost: 50}}
	calls := []callRecord{
		{Model: "m", Created: at(1500).UnixMilli(), At: at(2000).UnixMilli()},
		{Model: "other", Created: at(1000).UnixMilli(), At: at(1500).UnixMilli()}, // another model's wait
	}
	got := lossOf(adm, calls, "m", 100, time.Second, 100)
	want := utilisationLoss{WhileQueued: 50.0 / 350, NothingQueued: 50.0 / 350, LeftAtEnd: 0, LeftSinceS: 0}
	for name, pair := range map[string][2]float64{"while queued": {want.WhileQueued, got.WhileQueued},
		"nothing queued": {want.NothingQueued, got.NothingQueued}, "left at end": {want.LeftAtEnd, got.LeftAtEnd}} {
		if math.Abs(pair[0]-pair[1]) > 1e-9 {
			t.Errorf("%s: %v, want %v", name, pair[1], pair[0])
		}
	}
	if got.LeftSinceS != 0 || got.LeftWhileQueued != 0 {
		t.Errorf("drained at the last admission, got %+v", got)
	}
	// burst 1000: the bucket never drains below a tenth of it, so what is
	// left built up from the first admission on, with a job waiting for
	// half of that time
	tail := lossOf(adm[:2], append(calls, callRecord{Model: "m", Created: at(500).UnixMilli(), At: at(1000).UnixMilli()}), "m", 100, time.Second, 1000)
	if tail.LeftSinceS != 2 || math.Abs(tail.LeftWhileQueued-tail.LeftAtEnd*1/2) > 1e-9 {
		t.Errorf("tail: %+v, want built up over 2 s, half of it while a job waited", tail)
	}
	// with the utilisation, the parts account for the whole allowance
	if sum := 250.0/350 + got.WhileQueued + got.NothingQueued + got.LeftAtEnd; math.Abs(sum-1) > 1e-9 {
		t.Errorf("used + lost = %v of the allowance, want 1", sum)
	}
}

// TestBackloggedFill: window 1 s, limit 100. 40 tokens every 500 ms
// from 0 to 2 s while nothing waits, then 100 every 1 s from 3 s to
// 6 s while a job waits (from 2.5 s on): only windows ending from 3.5 s
// on lie inside the wait, and each holds exactly one 100 (full); the
// earlier, half-empty windows do not count.
func TestBackloggedFill(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var adm []fakeopenai.Admission
	for ms := 0; ms <= 2000; ms += 500 {
		adm = append(adm, fakeopenai.Admission{At: at(ms), Cost: 40})
	}
	for ms := 3000; ms <= 6000; ms += 1000 {
		adm = append(adm, fakeopenai.Admission{At: at(ms), Cost: 100})
	}
	queued := []span{{at(2500), at(6000)}}
	fill, n := backloggedFill(adm, queued, 100, time.Second)
	if math.Abs(fill-1) > 1e-9 || n != 251 {
		t.Fatalf("fill %.4f over %d windows, want 1 over 251 (3.5 s to 6 s by 10 ms)", fill, n)
	}
	if fill, n := backloggedFill(adm, nil, 100, time.Second); fill != 0 || n != 0 {
		t.Fatalf("nothing waited: fill %v over %d windows", fill, n)
	}
}

// TestWindowGap: window 1 s, limit 100, hold 100 ms; jobs wait
// throughout. Calls of 60 (admitted and sent at 0), 60 (admitted at
// 1.0 s, sent at 1.05), 30 (admitted 1.3, sent 1.5), 100 (admitted
// 1.99, sent 2.0). Samples every 10 ms from 1.0 to 2.0 s (101):
//   - 1.00–1.04: 100 free at the provider; prq still counts the first
//     60 (hold) and the second, admitted, 40 of its 60 (transit) (5);
//   - 1.05–1.09: 40 free, all hold (5);
//   - 1.10–1.29: 40 free, prq sees them, the 30 fits: reaction (20);
//   - 1.30–1.49: the 30 admitted (transit 30), 10 below the 100 waiting:
//     packing (20);
//   - 1.50–1.98: 10 free below the 100: packing (49); 1.99: the 100
//     admitted: transit 10 (1); 2.00: full.
func TestWindowGap(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	adm := []fakeopenai.Admission{{At: at(0), Cost: 60}, {At: at(1050), Cost: 60}, {At: at(1500), Cost: 30}, {At: at(2000), Cost: 100}}
	ms := func(n int) int64 { return at(n).UnixMilli() }
	calls := []callRecord{
		{Model: "m", Created: ms(0), Admitted: ms(0), Start: ms(0), At: ms(0), Tokens: 60},
		{Model: "m", Created: ms(0), Admitted: ms(1000), Start: ms(1040), At: ms(1050), Tokens: 60},
		{Model: "m", Created: ms(0), Admitted: ms(1300), Start: ms(1450), At: ms(1500), Tokens: 30},
		{Model: "m", Created: ms(0), Start: ms(1990), At: ms(2000), Tokens: 100},                // no admission recorded: its start
		{Model: "m", Created: ms(0), Start: ms(2000), At: ms(2000), Tokens: 50, Outcome: "429"}, // not a call
		{Model: "other", Created: ms(0), Start: ms(1000), At: ms(1000), Tokens: 5},              // another model
	}
	g := windowGapOf(adm, calls, "m", 100, time.Second, func(callRecord) time.Duration { return 100 * time.Millisecond })
	want := windowGap{Hold: (5*0.6 + 5*0.4) / 101, Transit: (5*0.4 + 20*0.3 + 0.1) / 101, Fitting: 20 * 0.4 / 101, Packing: (20*0.1 + 49*0.1) / 101}
	for name, pair := range map[string][2]float64{"packing": {want.Packing, g.Packing}, "hold": {want.Hold, g.Hold},
		"transit": {want.Transit, g.Transit}, "fitting": {want.Fitting, g.Fitting}} {
		if math.Abs(pair[0]-pair[1]) > 1e-9 {
			t.Errorf("%s: %.5f, want %.5f", name, pair[1], pair[0])
		}
	}
}

// TestMeanHold: the hold the window gap counts is, per call, the margin
// set; else the margin its process held (measured; the default where
// none was recorded), or the way its reply measured and the least
// margin where that is shorter and the reply came back within the window (prq then counts the
// call from its way, not the margin); the row shows their mean.
func TestMeanHold(t *testing.T) {
	const w = 6 * time.Second
	calls := []callRecord{
		{Model: "m", Outcome: "ok", Margin: 10_000},                                  // no reply measured: the margin
		{Model: "m", Outcome: "ok", Margin: 30_000, At: 1000, Done: 2000, Way: 2000}, // replied within the window: its way and 5 ms
		{Model: "m", Outcome: "ok", Margin: 30_000, At: 1000, Done: 8000, Way: 2000}, // replied after it: the margin
		{Model: "m", Outcome: "ok", Margin: 3_000, At: 1000, Done: 2000, Way: 9000},  // a way longer than the margin: the margin
		{Model: "m", Outcome: "ok"},                                                  // none recorded: the default
		{Model: "m", Outcome: "429", Margin: 900_000},                                // not a call the provider counted
		{Model: "other", Outcome: "ok", Margin: 900_000},
	}
	want := []time.Duration{10 * time.Millisecond, 7 * time.Millisecond, 30 * time.Millisecond, 3 * time.Millisecond, 100 * time.Millisecond}
	for i, c := range calls[:5] {
		if got := callHold(c, w, 0, 100*time.Millisecond); got != want[i] {
			t.Errorf("call %d: hold %s, want %s", i, got, want[i])
		}
		if got := callHold(c, w, 25*time.Millisecond, 100*time.Millisecond); got != 25*time.Millisecond {
			t.Errorf("call %d with the margin set: hold %s, want the 25ms set", i, got)
		}
	}
	hold := func(c callRecord) time.Duration { return callHold(c, w, 0, 100*time.Millisecond) }
	if got, wantMean := meanHold(calls, "m", hold), (10+7+30+3+100)*time.Millisecond/5; got != wantMean {
		t.Errorf("mean hold %s, want %s", got, wantMean)
	}
	if got := meanHold(calls, "none", hold); got != 0 {
		t.Errorf("mean hold with no calls %s, want 0", got)
	}
}
