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
	model := fmt.Sprintf("m-window-%d", time.Now().UnixNano())
	l := ratelimit.Limits{RequestsPerPeriod: 100000, TokensPerPeriod: 1000, Period: time.Second, Limiter: ratelimit.LimiterWindow, Policy: ratelimit.PolicyDebt}
	s, b, clk := windowScheduler(t, model, l, admission.Config{ChatShare: 0.1})
	chatUses(t, s, model)
	for i := 0; i < 60; i++ {
		// three tiers and tenants, so that backfill has flows to take from
		reg(t, s, admission.Ticket{ID: fmt.Sprint("p", i), Model: model, Class: []string{"paid", "trial", "free"}[i%3], Tenant: fmt.Sprint(i % 3),
			Index: i / 3, Total: 20, Tokens: 100 + int64(i%4)*50 + int64(i%7)*60})
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
	backfilled := 0
	for _, a := range got {
		if a.Via == "backfill" {
			backfilled++
		}
	}
	t.Logf("60 tickets (%d by backfill): worst window %.3f, mean fill %.1f%%", backfilled, rep.Worst, 100*rep.Utilisation)
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
	model := fmt.Sprintf("m-window-start-%d", time.Now().UnixNano())
	l := ratelimit.Limits{RequestsPerPeriod: 100000, TokensPerPeriod: 1000, Period: time.Second, Limiter: ratelimit.LimiterWindow}
	s, _, clk := windowScheduler(t, model, l, admission.Config{})
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
	// admitted the look-ahead (the 400 ms lag, at most a tenth of the
	// window and its margin) before the first leaves the window as the
	// provider counts it, from its start; its start waits for that
	at := clk.now()
	free := startedAt.Add(time.Second + time.Second/60)
	ahead := (time.Second + time.Second/60) / 10
	if at.Before(free.Add(-ahead)) {
		t.Fatalf("second job admitted %s after the first's start: the provider counts the first until %s, the look-ahead is %s", at.Sub(startedAt), free.Sub(startedAt), ahead)
	}
	if late := at.Sub(free.Add(-ahead)); late > time.Second/120+time.Microsecond {
		t.Fatalf("second job admitted %s after it could be (first admitted %s before)", late, at.Sub(admitted))
	}
	// it starts at once (the handler prepares its call) and its call
	// waits for the room
	if err := s.Started(ctx, model, "b"); err != nil {
		t.Fatal(err)
	}
	if w, err := s.TryCalling(ctx, model, "b"); err != nil || clk.now().Add(w).Before(free) {
		t.Fatalf("second job's call at once: wait %s, %v; the first counts %s longer", w, err, free.Sub(clk.now()))
	}
	// a task that runs again makes another call the provider counts: it
	// waits for room like any call
	if err := s.Started(ctx, model, "a"); err != nil {
		t.Fatal(err)
	}
	if w, err := s.TryCalling(ctx, model, "a"); err != nil || w <= 0 {
		t.Fatalf("a second run of a with the window full: wait %s, %v; want a wait", w, err)
	}
}

// TestWindowChargeMovesToCall: when the job sends its call (Calling), its
// charge moves again, from its start to then, needing no room: the next
// whole-window job waits for the call to leave the window, not the
// start. A bucket has nothing to move.
func TestWindowChargeMovesToCall(t *testing.T) {
	model := fmt.Sprintf("m-window-call-%d", time.Now().UnixNano())
	l := ratelimit.Limits{RequestsPerPeriod: 100000, TokensPerPeriod: 1000, Period: time.Second, Limiter: ratelimit.LimiterWindow}
	s, _, clk := windowScheduler(t, model, l, admission.Config{})
	ctx := context.Background()
	reg(t, s, admission.Ticket{ID: "a", Model: model, Class: "paid", Tenant: "1", Tokens: 1000})
	if a, _, err := s.Admit(ctx, model, 1); err != nil || len(a) != 1 {
		t.Fatalf("first job: %v %v", a, err)
	}
	if err := s.Started(ctx, model, "a"); err != nil {
		t.Fatal(err)
	}
	clk.advance(300 * time.Millisecond) // the handler reads and builds its prompt
	if err := s.Calling(ctx, model, "a"); err != nil {
		t.Fatal(err)
	}
	called := clk.now()
	reg(t, s, admission.Ticket{ID: "b", Model: model, Class: "paid", Tenant: "1", Tokens: 1000})
	got := drain(t, s, clk, model, 1)
	if len(got) != 1 || got[0].ID != "b" {
		t.Fatalf("second job: %+v", got)
	}
	// admitted the look-ahead (the 300 ms the first took from its start
	// to its call, at most a tenth of the window) before the room frees
	ahead := lookAhead(t, s, model)
	at, free := clk.now(), called.Add(time.Second+time.Second/60-ahead)
	if ahead <= 0 || at.Before(free) {
		t.Fatalf("second job admitted %s after the first's call: the provider counts it until %s, the look-ahead is %s", at.Sub(called), time.Second+time.Second/60, ahead)
	}
	if late := at.Sub(free); late > time.Second/120+time.Microsecond {
		t.Fatalf("second job admitted %s after the first's call left the window", late)
	}
	// a bucket: nothing to move, no error
	bs, bm := admittedOnBucket(t, model+"-bucket", "c")
	if err := bs.Calling(ctx, bm, "c"); err != nil {
		t.Fatal(err)
	}
}

// TestWindowArrivedExact: a written call whose reply bounded its way to
// the provider (SettleCall) stops counting a window after its write plus
// that way, once settled, instead of the measured margin after its
// write; but only where every charge of its slot is such a call: a slot
// that also holds a call without a reply keeps the margin.
func TestWindowArrivedExact(t *testing.T) {
	model := fmt.Sprintf("m-window-arrived-%d", time.Now().UnixNano())
	const w = 10 * time.Second
	l := ratelimit.Limits{RequestsPerPeriod: 100000, TokensPerPeriod: 1000, Period: w, Limiter: ratelimit.LimiterWindow}
	s, b, clk := windowScheduler(t, model, l, admission.Config{})
	ctx := context.Background()
	// the margin measured: twice the longest way, 80 ms
	b.ObserveWay(40 * time.Millisecond)
	if m := b.WindowMargin(); m != 80*time.Millisecond {
		t.Fatalf("margin %s, want 80ms measured", m)
	}
	// call runs two jobs of 500 through their call and write (10 ms
	// after the call), the reply bounding the way of those in replied
	// by 3 ms; both settle. It returns the write.
	call := func(ids []string, replied map[string]bool) time.Time {
		t.Helper()
		for _, id := range ids {
			reg(t, s, admission.Ticket{ID: id, Model: model, Class: "paid", Tenant: "1", Tokens: 500})
		}
		if got := drain(t, s, clk, model, len(ids)); len(got) != len(ids) {
			t.Fatalf("admitted %v, want %v", got, ids)
		}
		for _, id := range ids {
			if err := s.Started(ctx, model, id); err != nil {
				t.Fatal(err)
			}
			if err := s.Calling(ctx, model, id); err != nil {
				t.Fatal(err)
			}
		}
		clk.advance(10 * time.Millisecond)
		wrote := clk.now()
		for _, id := range ids {
			if err := s.Sent(ctx, model, id, 10*time.Millisecond); err != nil {
				t.Fatal(err)
			}
		}
		clk.advance(200 * time.Millisecond) // the reply
		for _, id := range ids {
			way := time.Duration(-1) // no reply: the way is not known
			if replied[id] {
				way = 3 * time.Millisecond
			}
			if err := s.SettleCall(ctx, model, id, ratelimit.Cost{Requests: 1, Tokens: 500}, admission.CallWay{Written: -1, Arrival: way}); err != nil {
				t.Fatal(err)
			}
		}
		return wrote
	}
	// next admits one more job of 500 and returns when, less the
	// look-ahead (as if admitted when its room frees).
	n := 0
	next := func() time.Time {
		t.Helper()
		n++
		id := fmt.Sprintf("next-%d", n)
		reg(t, s, admission.Ticket{ID: id, Model: model, Class: "paid", Tenant: "1", Tokens: 500})
		if got := drain(t, s, clk, model, 1); len(got) != 1 || got[0].ID != id {
			t.Fatalf("%s not admitted: %v", id, got)
		}
		// settled at once: it takes no room from the next phase
		if err := s.Settle(ctx, model, id, ratelimit.Cost{}); err != nil {
			t.Fatal(err)
		}
		return clk.now().Add(lookAhead(t, s, model))
	}
	// one of the slot's two calls replied: the slot keeps the margin
	wrote := call([]string{"a1", "a2"}, map[string]bool{"a1": true})
	at, free := next(), wrote.Add(w+80*time.Millisecond)
	if at.Before(free) || at.Sub(free) > w/120 {
		t.Fatalf("with one call of the slot unreplied, room came %s after the write; want the window and the margin, %s", at.Sub(wrote), w+80*time.Millisecond)
	}
	// both replied: a window after the write and the way
	clk.advance(w) // a1 and a2 have left
	wrote = call([]string{"c1", "c2"}, map[string]bool{"c1": true, "c2": true})
	// (the way, 3 ms, and the least margin, 5 ms)
	at, free = next(), wrote.Add(w+8*time.Millisecond)
	if at.Before(free) || at.Sub(free) > time.Millisecond {
		t.Fatalf("with every call of the slot replied, room came %s after the write; want the window, the way and the least margin, %s (the margin: %s)", at.Sub(wrote), w+8*time.Millisecond, w+80*time.Millisecond)
	}
	// a reply without a recorded write bounds nothing: the margin
	clk.advance(w)
	for _, id := range []string{"e1", "e2"} {
		reg(t, s, admission.Ticket{ID: id, Model: model, Class: "paid", Tenant: "1", Tokens: 500})
	}
	drain(t, s, clk, model, 2)
	for _, id := range []string{"e1", "e2"} {
		if err := s.Started(ctx, model, id); err != nil {
			t.Fatal(err)
		}
		if err := s.Calling(ctx, model, id); err != nil {
			t.Fatal(err)
		}
	}
	called := clk.now()
	clk.advance(200 * time.Millisecond)
	for _, id := range []string{"e1", "e2"} {
		if err := s.SettleCall(ctx, model, id, ratelimit.Cost{Requests: 1, Tokens: 500}, admission.CallWay{Written: -1, Arrival: 3 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	at, free = next(), called.Add(w+80*time.Millisecond)
	if at.Before(free) || at.Sub(free) > w/120 {
		t.Fatalf("with no write recorded, room came %s after the call; want the window and the margin, %s", at.Sub(called), w+80*time.Millisecond)
	}
	// a writer that knows no arrival (an older prq, which saves the
	// state's time t and not tv) may have moved a charge in the slot:
	// the slots up to its save keep the margin
	clk.advance(w)
	wrote = call([]string{"f1", "f2"}, map[string]bool{"f1": true, "f2": true})
	if err := redistest.Shared(t).Client(t).HSet(ctx, b.StateKey(), "t", clk.now().UnixMicro()+1).Err(); err != nil {
		t.Fatal(err)
	}
	at, free = next(), wrote.Add(w+80*time.Millisecond)
	if at.Before(free) || at.Sub(free) > w/120 {
		t.Fatalf("after an older writer's save, room came %s after the write; want the window and the margin, %s", at.Sub(wrote), w+80*time.Millisecond)
	}
}

// TestWindowArrivedLate: a reply that bounds its call's arrival later
// than the margin allows (a way of 600 ms against a measured margin of
// 80 ms: a loaded machine) holds the call's room a window after that
// arrival, as the provider does, not the margin after its write: the
// room a provider still counts is not admitted again (the bench's 429s
// on a machine loaded past its cores, every one after such a call), as a
// call that arrived within the margin frees its room sooner.
func TestWindowArrivedLate(t *testing.T) {
	const w = 10 * time.Second
	for _, c := range []struct {
		name string
		way  time.Duration
		hold time.Duration // from the write to the next admission
	}{
		{"later than the margin: the way and the least margin", 600 * time.Millisecond, 605 * time.Millisecond},
		{"within the margin: the way and the least margin, sooner", 50 * time.Millisecond, 55 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			model := fmt.Sprintf("m-window-late-%d", time.Now().UnixNano())
			l := ratelimit.Limits{RequestsPerPeriod: 100000, TokensPerPeriod: 1000, Period: w, Limiter: ratelimit.LimiterWindow}
			s, b, clk := windowScheduler(t, model, l, admission.Config{})
			ctx := context.Background()
			b.ObserveWay(40 * time.Millisecond) // the margin: 80 ms
			// one call of 1000 (the whole window) written 10 ms after its
			// call, its reply 900 ms later bounding its way by c.way
			reg(t, s, admission.Ticket{ID: "a", Model: model, Class: "paid", Tenant: "1", Tokens: 1000})
			if got := drain(t, s, clk, model, 1); len(got) != 1 {
				t.Fatalf("admitted %v", got)
			}
			for _, step := range []func(context.Context, string, string) error{s.Started, s.Calling} {
				if err := step(ctx, model, "a"); err != nil {
					t.Fatal(err)
				}
			}
			clk.advance(10 * time.Millisecond)
			wrote := clk.now()
			if err := s.Sent(ctx, model, "a", 10*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			clk.advance(900 * time.Millisecond)
			if err := s.SettleCall(ctx, model, "a", ratelimit.Cost{Requests: 1, Tokens: 1000}, admission.CallWay{Written: -1, Arrival: c.way}); err != nil {
				t.Fatal(err)
			}
			reg(t, s, admission.Ticket{ID: "b", Model: model, Class: "paid", Tenant: "1", Tokens: 1000})
			if got := drain(t, s, clk, model, 1); len(got) != 1 {
				t.Fatalf("admitted %v", got)
			}
			at, free := clk.now().Add(lookAhead(t, s, model)), wrote.Add(w+c.hold)
			if at.Before(free) || at.Sub(free) > time.Millisecond {
				t.Fatalf("the next call admitted %s after the write, want %s (the way %s, the margin 80ms)", at.Sub(wrote), w+c.hold, c.way)
			}
		})
	}
}

// TestWindowArrivedKeepsWhatIsThere: what a settle marks arrived is what
// stays charged at the write: under refund, usage beyond the estimate is
// charged at the settle, elsewhere, so a slot whose other call refunds
// below it still holds a call without a reply and keeps the margin. And
// a reply bounds only the attempt that wrote: a task that runs again
// moves its charge to its new start and call, and a reply recorded
// before its new write bounds nothing.
func TestWindowArrivedKeepsWhatIsThere(t *testing.T) {
	model := fmt.Sprintf("m-window-kept-%d", time.Now().UnixNano())
	const w = 10 * time.Second
	l := ratelimit.Limits{RequestsPerPeriod: 100000, TokensPerPeriod: 1000, Period: w, Limiter: ratelimit.LimiterWindow, Policy: ratelimit.PolicyRefund}
	s, b, clk := windowScheduler(t, model, l, admission.Config{})
	ctx := context.Background()
	b.ObserveWay(40 * time.Millisecond) // the margin: 80 ms
	run := func(ids ...string) {
		t.Helper()
		for _, id := range ids {
			reg(t, s, admission.Ticket{ID: id, Model: model, Class: "paid", Tenant: "1", Tokens: 500})
		}
		if got := drain(t, s, clk, model, len(ids)); len(got) != len(ids) {
			t.Fatalf("admitted %v, want %v", got, ids)
		}
		for _, id := range ids {
			if err := s.Started(ctx, model, id); err != nil {
				t.Fatal(err)
			}
			if err := s.Calling(ctx, model, id); err != nil {
				t.Fatal(err)
			}
		}
	}
	sent := func(ids ...string) time.Time {
		t.Helper()
		clk.advance(10 * time.Millisecond)
		for _, id := range ids {
			if err := s.Sent(ctx, model, id, 10*time.Millisecond); err != nil {
				t.Fatal(err)
			}
		}
		return clk.now()
	}
	// j1 replies and used 700 (200 over its estimate, charged at its
	// settle); j2 has no reply and used 100: the write's slot holds 600,
	// of which only j1's 500 arrived
	run("j1", "j2")
	wrote := sent("j1", "j2")
	clk.advance(200 * time.Millisecond)
	if err := s.SettleCall(ctx, model, "j1", ratelimit.Cost{Requests: 1, Tokens: 700}, admission.CallWay{Written: -1, Arrival: 3 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if err := s.Settle(ctx, model, "j2", ratelimit.Cost{Requests: 1, Tokens: 100}); err != nil {
		t.Fatal(err)
	}
	// 400 more fits once the write's slot leaves (the 200 stays): at the
	// margin, not at j1's arrival
	reg(t, s, admission.Ticket{ID: "k", Model: model, Class: "paid", Tenant: "1", Tokens: 400})
	if got := drain(t, s, clk, model, 1); len(got) != 1 {
		t.Fatalf("k not admitted: %v", got)
	}
	at, free := clk.now().Add(lookAhead(t, s, model)), wrote.Add(w+80*time.Millisecond)
	if at.Before(free) || at.Sub(free) > w/120 {
		t.Fatalf("room for k came %s after the write; want the window and the margin, %s (j2 has no reply)", at.Sub(wrote), w+80*time.Millisecond)
	}
	if err := s.Settle(ctx, model, "k", ratelimit.Cost{}); err != nil {
		t.Fatal(err)
	}
	// m writes, then runs again (a second attempt of its task): its
	// charge moves to the new start and call; the new attempt's reply
	// comes before its own write is recorded
	clk.advance(2 * w)
	run("m1", "m2")
	sent("m1", "m2")
	clk.advance(100 * time.Millisecond)
	run2 := clk.now()
	for _, id := range []string{"m1", "m2"} {
		if err := s.Started(ctx, model, id); err != nil {
			t.Fatal(err)
		}
		if err := s.Calling(ctx, model, id); err != nil {
			t.Fatal(err)
		}
	}
	clk.advance(200 * time.Millisecond)
	for _, id := range []string{"m1", "m2"} {
		if err := s.SettleCall(ctx, model, id, ratelimit.Cost{Requests: 1, Tokens: 500}, admission.CallWay{Written: -1, Arrival: 3 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	reg(t, s, admission.Ticket{ID: "n", Model: model, Class: "paid", Tenant: "1", Tokens: 500})
	if got := drain(t, s, clk, model, 1); len(got) != 1 {
		t.Fatalf("n not admitted: %v", got)
	}
	at, free = clk.now().Add(lookAhead(t, s, model)), run2.Add(w+80*time.Millisecond)
	if at.Before(free) || at.Sub(free) > w/120 {
		t.Fatalf("room for n came %s after the second attempt's call; want the window and the margin, %s", at.Sub(run2), w+80*time.Millisecond)
	}
}

// lookAhead is how far ahead admission of model looks now.
func lookAhead(t *testing.T, s *admission.Scheduler, model string) time.Duration {
	t.Helper()
	st, err := s.Stats(context.Background(), model)
	if err != nil {
		t.Fatal(err)
	}
	return st.LookAhead
}

// admittedOnBucket returns a scheduler of a token-bucket model and the
// model, with job id admitted.
func admittedOnBucket(t *testing.T, model, id string) (*admission.Scheduler, string) {
	t.Helper()
	s, _, _ := windowScheduler(t, model, ratelimit.Limits{RequestsPerPeriod: 100000, TokensPerPeriod: 1000, Period: time.Second}, admission.Config{})
	reg(t, s, admission.Ticket{ID: id, Model: model, Class: "paid", Tenant: "1", Tokens: 10})
	if a, _, err := s.Admit(context.Background(), model, 1); err != nil || len(a) != 1 {
		t.Fatalf("bucket job: %v %v", a, err)
	}
	return s, model
}

// TestWindowChargeMovesToWrite: when the request is written (Sent, at
// most after past the start of Calling), the charge moves from the call
// to then, never later than now and only after Calling: the next
// whole-window job waits for the write to leave the window.
func TestWindowChargeMovesToWrite(t *testing.T) {
	model := fmt.Sprintf("m-window-sent-%d", time.Now().UnixNano())
	l := ratelimit.Limits{RequestsPerPeriod: 100000, TokensPerPeriod: 1000, Period: time.Second, Limiter: ratelimit.LimiterWindow}
	s, _, clk := windowScheduler(t, model, l, admission.Config{})
	ctx := context.Background()
	reg(t, s, admission.Ticket{ID: "a", Model: model, Class: "paid", Tenant: "1", Tokens: 1000})
	if a, _, err := s.Admit(ctx, model, 1); err != nil || len(a) != 1 {
		t.Fatalf("first job: %v %v", a, err)
	}
	if err := s.Started(ctx, model, "a"); err != nil {
		t.Fatal(err)
	}
	// before its call, a write says nothing: the bound starts at the call
	clk.advance(100 * time.Millisecond)
	if err := s.Sent(ctx, model, "a", 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := s.Calling(ctx, model, "a"); err != nil {
		t.Fatal(err)
	}
	called := clk.now()
	// the write came 70 ms after the call began; the report arrives at
	// 90 ms. A later report of a later bound moves it no later than now.
	clk.advance(90 * time.Millisecond)
	if err := s.Sent(ctx, model, "a", 70*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	wrote := called.Add(70 * time.Millisecond)
	reg(t, s, admission.Ticket{ID: "b", Model: model, Class: "paid", Tenant: "1", Tokens: 1000})
	got := drain(t, s, clk, model, 1)
	if len(got) != 1 || got[0].ID != "b" {
		t.Fatalf("second job: %+v", got)
	}
	at, free := clk.now(), wrote.Add(time.Second+time.Second/60-lookAhead(t, s, model))
	if at.Before(free) {
		t.Fatalf("second job admitted %s after the first's write: the provider counts it until %s, less the look-ahead", at.Sub(wrote), time.Second+time.Second/60)
	}
	if late := at.Sub(free); late > time.Second/120+time.Microsecond {
		t.Fatalf("second job admitted %s after the first's write left the window: the charge stayed at the call", late)
	}
	// b's write reported later than the report itself: moved to the
	// report's time, not past it
	if err := s.Started(ctx, model, "b"); err != nil {
		t.Fatal(err)
	}
	if err := s.Calling(ctx, model, "b"); err != nil {
		t.Fatal(err)
	}
	bCalled := clk.now()
	clk.advance(20 * time.Millisecond)
	if err := s.Sent(ctx, model, "b", time.Second); err != nil {
		t.Fatal(err)
	}
	reg(t, s, admission.Ticket{ID: "c", Model: model, Class: "paid", Tenant: "1", Tokens: 1000})
	got = drain(t, s, clk, model, 1)
	if len(got) != 1 || got[0].ID != "c" {
		t.Fatalf("third job: %+v", got)
	}
	if at, free := clk.now(), bCalled.Add(20*time.Millisecond+time.Second+time.Second/60-lookAhead(t, s, model)); at.Before(free) || at.Sub(free) > time.Second/120+time.Microsecond {
		t.Fatalf("third job admitted %s after b's report, want a window and the margin (%s) within a slot", at.Sub(bCalled.Add(20*time.Millisecond)), time.Second+time.Second/60)
	}
	// a bucket: nothing to move, no error
	bs, bm := admittedOnBucket(t, model+"-bucket", "d")
	if err := bs.Calling(ctx, bm, "d"); err != nil {
		t.Fatal(err)
	}
	if err := bs.Sent(ctx, bm, "d", time.Millisecond); err != nil {
		t.Fatal(err)
	}
}

// TestWindowLooksAhead: admission admits a job whose room frees within
// the time its jobs take from admission to their call (the lag to the
// start and the handler's preparation, measured, with twice their
// deviations); the job starts at once, and its call waits for the room
// (and counts from then), so the provider never sees more than the
// limit.
func TestWindowLooksAhead(t *testing.T) {
	model := fmt.Sprintf("m-window-ahead-%d", time.Now().UnixNano())
	l := ratelimit.Limits{RequestsPerPeriod: 100000, TokensPerPeriod: 1000, Period: time.Second, Limiter: ratelimit.LimiterWindow}
	s, _, clk := windowScheduler(t, model, l, admission.Config{})
	ctx := context.Background()
	// a job starts 30 ms after its admission and calls 10 ms after its
	// start: the first samples, each with half of itself as deviation,
	// give a look-ahead of 30 + 10 + 2 × (15 + 5) = 80 ms
	reg(t, s, admission.Ticket{ID: "a", Model: model, Class: "paid", Tenant: "1", Tokens: 1000})
	if a, _, _ := s.Admit(ctx, model, 1); len(a) != 1 {
		t.Fatal("a not admitted")
	}
	clk.advance(30 * time.Millisecond)
	if err := s.Started(ctx, model, "a"); err != nil {
		t.Fatal(err)
	}
	clk.advance(10 * time.Millisecond)
	if w, err := s.TryCalling(ctx, model, "a"); err != nil || w != 0 {
		t.Fatalf("a's call: wait %s, %v", w, err)
	}
	aCall := clk.now()
	st, err := s.Stats(ctx, model)
	if err != nil || st.StartLag != 30*time.Millisecond || st.Prep != 10*time.Millisecond || st.LookAhead != 80*time.Millisecond {
		t.Fatalf("stats: lag %s, prep %s, look-ahead %s, %v; want 30 ms, 10 ms, 80 ms", st.StartLag, st.Prep, st.LookAhead, err)
	}
	// the window frees a's 1000 at aCall + W + margin; 50 ms before,
	// b is admitted (within the 80 ms look-ahead) ...
	free := aCall.Add(time.Second + time.Second/60)
	reg(t, s, admission.Ticket{ID: "b", Model: model, Class: "paid", Tenant: "1", Tokens: 1000})
	// 150 ms before, b waits: the loop is told to come back 80 ms before
	// the room is there (within a slot)
	clk.t = free.Add(-150 * time.Millisecond)
	if got, wait, err := s.Admit(ctx, model, 1); err != nil || len(got) != 0 || wait < 70*time.Millisecond || wait > 70*time.Millisecond+time.Second/120 {
		t.Fatalf("150 ms before b's room: admitted %v, wait %s, %v; want none and a wait of 70 ms (the room's time less the look-ahead)", got, wait, err)
	}
	clk.t = free.Add(-50 * time.Millisecond)
	got, wait, err := s.Admit(ctx, model, 1)
	if err != nil || len(got) != 1 {
		t.Fatalf("b not admitted 50 ms before its room (look-ahead 80 ms): %v, wait %s, %v", got, wait, err)
	}
	// ... and c, which needs 10 more, waits behind it
	reg(t, s, admission.Ticket{ID: "c", Model: model, Class: "paid", Tenant: "1", Tokens: 10})
	if got, _, _ := s.Admit(ctx, model, 1); len(got) != 0 {
		t.Fatalf("c admitted with the window full and b ahead: %v", got)
	}
	// b starts at once; its call must wait for a to leave the window
	if err := s.Started(ctx, model, "b"); err != nil {
		t.Fatal(err)
	}
	w, err := s.TryCalling(ctx, model, "b")
	if err != nil || w <= 0 || w > 50*time.Millisecond+time.Second/120 {
		t.Fatalf("b's early call: wait %s, %v; want up to 50 ms (and a slot)", w, err)
	}
	clk.advance(w)
	if w, err := s.TryCalling(ctx, model, "b"); err != nil || w != 0 {
		t.Fatalf("b's call once the room is there: wait %s, %v", w, err)
	}
	// b counts from its call: c waits a whole window
	_, wait, _ = s.Admit(ctx, model, 1)
	if min := time.Second - 80*time.Millisecond; wait < min {
		t.Fatalf("c may go in %s; b counts until %s from now", wait, time.Second+time.Second/60)
	}
	// b's samples: started at once (0) and called at once (0; the wait
	// for the room is not preparation): 30 → 26.25 and 10 → 8.75 ms
	st, err = s.Stats(ctx, model)
	if err != nil || st.StartLag != 26250*time.Microsecond || st.Prep != 8750*time.Microsecond {
		t.Fatalf("stats after b: lag %s, prep %s, %v; want 26.25 ms and 8.75 ms", st.StartLag, st.Prep, err)
	}
}

// TestWindowBackfill: when the next ticket in order waits for room a
// window frees later, a ticket further back that fits now and still
// leaves that room when it comes is admitted at once (via "backfill");
// one that would delay it waits; and the waiting ticket is admitted no
// later than without backfill.
func TestWindowBackfill(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	model := fmt.Sprintf("m-window-backfill-%d", time.Now().UnixNano())
	l := ratelimit.Limits{RequestsPerPeriod: 100000, TokensPerPeriod: 1000, Period: time.Second, Limiter: ratelimit.LimiterWindow}
	b, err := ratelimit.NewBucket(rdb, model, "sk", l)
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Unix(1_900_000_000, 0)}
	// strict: paid before free, whatever the flows' tags
	s, err := admission.New(redis.UniversalClient(rdb), map[string]*ratelimit.Bucket{model: b}, nil, nil,
		admission.Config{Strict: true, ChatShare: 0.05, NowFunc: clk.now}, discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	chatUses(t, s, model)
	reg(t, s, admission.Ticket{ID: "a", Model: model, Class: "paid", Tenant: "1", Tokens: 600})
	if a, _, err := s.Admit(ctx, model, 10); err != nil || len(a) != 1 {
		t.Fatalf("first: %v %v", a, err)
	}
	start := clk.now()
	clk.advance(500 * time.Millisecond)
	// b waits for a to leave the window; c fits now and in the room b
	// leaves (1000 - 900 - the chat share's 50); d no longer does
	reg(t, s, admission.Ticket{ID: "b", Model: model, Class: "paid", Tenant: "1", Tokens: 900})
	reg(t, s, admission.Ticket{ID: "c", Model: model, Class: "free", Tenant: "2", Tokens: 50})
	reg(t, s, admission.Ticket{ID: "d", Model: model, Class: "free", Tenant: "3", Tokens: 50})
	got, wait, err := s.Admit(ctx, model, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ID != "c" || got[0].Via != "backfill" {
		t.Fatalf("admitted %+v, want c by backfill", got)
	}
	if wait <= 0 {
		t.Fatalf("b should wait, got wait %s", wait)
	}
	rest := drain(t, s, clk, model, 2)
	if len(rest) != 2 || rest[0].ID != "b" || rest[1].ID != "d" {
		t.Fatalf("then %+v, want b then d", rest)
	}
	// b comes when a has left the window and its margin, within a slot:
	// c did not delay it
	if at, free := rest[0].Enqueued.Add(rest[0].Waited).Sub(start), time.Second+time.Second/60; at > free+time.Second/120+time.Microsecond {
		t.Fatalf("b admitted %s after a; a left the window at %s", at, free)
	}
}

// TestWindowBackfillPutsOff: room that only a short delay of the waiting
// ticket frees is taken too, within a tenth of the window over the wait
// it had when it first waited in front; that due holds across attempts,
// so later backfills cannot put it off further. Not on a model chat
// uses (there the room packing leaves lets a chat in at once).
func TestWindowBackfillPutsOff(t *testing.T) {
	t.Run("chat's model", func(t *testing.T) { windowPutOff(t, true) })
	windowPutOff(t, false)
}

func windowPutOff(t *testing.T, chat bool) {
	model := fmt.Sprintf("m-window-putoff-%t-%d", chat, time.Now().UnixNano())
	const W = 10 * time.Second // slots of W/60, margin W/60
	l := ratelimit.Limits{RequestsPerPeriod: 100000, TokensPerPeriod: 10000, Period: W, Limiter: ratelimit.LimiterWindow}
	s, _, clk := windowScheduler(t, model, l, admission.Config{Strict: true, ChatShare: 0.01})
	if chat {
		chatUses(t, s, model)
	}
	ctx := context.Background()
	start := clk.now()
	// the window: 4000 at 0, 2000 at 0.5s, 300 at 1.3s, 1700 at 5s
	for i, at := range []struct {
		at     time.Duration
		tokens int64
	}{{0, 4000}, {500 * time.Millisecond, 2000}, {1300 * time.Millisecond, 300}, {5 * time.Second, 1700}} {
		clk.advance(start.Add(at.at).Sub(clk.now()))
		reg(t, s, admission.Ticket{ID: fmt.Sprint("a", i), Model: model, Class: "paid", Tenant: "0", Tokens: at.tokens})
		if a, _, err := s.Admit(ctx, model, 10); err != nil || len(a) != 1 {
			t.Fatalf("a%d: %v %v", i, a, err)
		}
	}
	clk.advance(500 * time.Millisecond) // 5.5s: 2000 free
	// b needs 6000: it fits when the 4000 leaves (about 10.33s), and its
	// due is a tenth of the window later (about 11.35s). c takes 1500 now
	// and puts b off to when the 2000 of 0.5s leaves (about 10.8s),
	// within its due (without putting b off, c does not fit)
	reg(t, s, admission.Ticket{ID: "b", Model: model, Class: "paid", Tenant: "1", Tokens: 6000})
	reg(t, s, admission.Ticket{ID: "c", Model: model, Class: "free", Tenant: "2", Tokens: 1500})
	got, wait, err := s.Admit(ctx, model, 10)
	if err != nil {
		t.Fatal(err)
	}
	if chat {
		if len(got) != 0 {
			t.Fatalf("admitted %+v on chat's model, want none", got)
		}
		return
	}
	if len(got) != 1 || got[0].ID != "c" || got[0].Via != "backfill" {
		t.Fatalf("admitted %+v, want c by backfill", got)
	}
	if first := clk.now().Add(wait).Sub(start); first < 10*time.Second || first > 10500*time.Millisecond {
		t.Fatalf("b fits at %s, want about 10.33s (when the 4000 leaves)", first)
	}
	// 10.4s: the 4000 has left (4500 free); b waits for the 2000 of 0.5s
	// (10.8s). d would put it off to when the 300 leaves (11.5s): within
	// a tenth of the window of b's wait now, but past b's due
	clk.advance(start.Add(10400 * time.Millisecond).Sub(clk.now()))
	reg(t, s, admission.Ticket{ID: "d", Model: model, Class: "free", Tenant: "4", Tokens: 600})
	if got, _, err := s.Admit(ctx, model, 10); err != nil || len(got) != 0 {
		t.Fatalf("at 10.4s admitted %+v (%v), want none: b's due holds", got, err)
	}
	rest := drain(t, s, clk, model, 1)
	if len(rest) != 1 || rest[0].ID != "b" {
		t.Fatalf("then %+v, want b", rest)
	}
	if at := rest[0].Enqueued.Add(rest[0].Waited).Sub(start); at > 11350*time.Millisecond {
		t.Fatalf("b admitted at %s, past its due (about 11.35s)", at)
	}
}

// TestWindowBackfillLooksIntoFlows: backfill looks at the first few
// tickets of each flow, not only its first: a small ticket behind a big
// one that does not fit takes room the waiting ticket leaves. Not on a
// model chat uses.
func TestWindowBackfillLooksIntoFlows(t *testing.T) {
	for _, chat := range []bool{false, true} {
		t.Run(fmt.Sprint("chat=", chat), func(t *testing.T) {
			model := fmt.Sprintf("m-window-deep-%t-%d", chat, time.Now().UnixNano())
			l := ratelimit.Limits{RequestsPerPeriod: 100000, TokensPerPeriod: 1000, Period: time.Second, Limiter: ratelimit.LimiterWindow}
			s, _, clk := windowScheduler(t, model, l, admission.Config{Strict: true, ChatShare: 0.05})
			if chat {
				chatUses(t, s, model)
			}
			ctx := context.Background()
			reg(t, s, admission.Ticket{ID: "a", Model: model, Class: "paid", Tenant: "1", Tokens: 600})
			if a, _, err := s.Admit(ctx, model, 10); err != nil || len(a) != 1 {
				t.Fatalf("a: %v %v", a, err)
			}
			clk.advance(500 * time.Millisecond)
			// b waits for a to leave; x fits now but would put b off by
			// half a second; y, behind x in tenant 2's flow, fits in what
			// b leaves (150)
			reg(t, s, admission.Ticket{ID: "b", Model: model, Class: "paid", Tenant: "1", Tokens: 850})
			reg(t, s, admission.Ticket{ID: "x", Model: model, Class: "free", Tenant: "2", PRSeq: 1, Tokens: 300})
			reg(t, s, admission.Ticket{ID: "y", Model: model, Class: "free", Tenant: "2", PRSeq: 2, Tokens: 50})
			got, _, err := s.Admit(ctx, model, 10)
			if err != nil {
				t.Fatal(err)
			}
			if chat {
				if len(got) != 0 {
					t.Fatalf("admitted %+v on chat's model, want none", got)
				}
				return
			}
			if len(got) != 1 || got[0].ID != "y" || got[0].Via != "backfill" {
				t.Fatalf("admitted %+v, want y by backfill", got)
			}
			if rest := drain(t, s, clk, model, 1); len(rest) != 1 || rest[0].ID != "b" {
				t.Fatalf("then %+v, want b", rest)
			}
		})
	}
}

// TestWindowSamePR: under a window, while the next ticket in order waits
// for room, another file of the same run (tier, tenant, pull request run)
// that fits now takes its place (via "same_pr"), and the loop is told to
// come back when the soonest of them fits. A later run of the same
// tenant, a run without a sequence (the gateway's) and a token bucket
// keep their order, and so does a window chat uses (the room packing
// leaves there lets a chat in at once).
func TestWindowSamePR(t *testing.T) {
	for _, limiter := range []ratelimit.Limiter{ratelimit.LimiterWindow, ratelimit.LimiterBucket, "window+chat"} {
		for _, seq := range []int64{2, 0} {
			t.Run(fmt.Sprintf("%s/seq%d", limiter, seq), func(t *testing.T) {
				model := fmt.Sprintf("m-same-pr-%s-%d-%d", limiter, seq, time.Now().UnixNano())
				chat, limiter := limiter == "window+chat", limiter
				if chat {
					limiter = ratelimit.LimiterWindow
				}
				l := ratelimit.Limits{RequestsPerPeriod: 100000, TokensPerPeriod: 1000, Period: time.Second, Limiter: limiter}
				s, _, clk := windowScheduler(t, model, l, admission.Config{ChatShare: 0.05})
				if chat {
					chatUses(t, s, model)
				}
				ctx := context.Background()
				reg(t, s, admission.Ticket{ID: "a", Model: model, Class: "paid", Tenant: "1", PRSeq: 1, Tokens: 600})
				if a, _, err := s.Admit(ctx, model, 1); err != nil || len(a) != 1 {
					t.Fatalf("a: %v %v", a, err)
				}
				t0 := clk.now()
				clk.advance(300 * time.Millisecond)
				for i, tokens := range []int64{900, 300, 200} {
					reg(t, s, admission.Ticket{ID: fmt.Sprint("b", i), Model: model, Class: "paid", Tenant: "1", PRSeq: seq, Index: i, Total: 3, Tokens: tokens})
				}
				reg(t, s, admission.Ticket{ID: "c0", Model: model, Class: "paid", Tenant: "1", PRSeq: seq + 1, Tokens: 100})
				got, wait, err := s.Admit(ctx, model, 10)
				if err != nil {
					t.Fatal(err)
				}
				reorders := limiter == ratelimit.LimiterWindow && seq != 0 && !chat
				// a window chat does not use backfills from deeper in a
				// flow: c0, a later run, takes room b0 leaves when its
				// turn comes (100), after what same_pr took
				backfills := limiter == ratelimit.LimiterWindow && !chat
				if backfills {
					if n := len(got); n == 0 || got[n-1].ID != "c0" || got[n-1].Via != "backfill" {
						t.Fatalf("admitted %+v, want c0 last, by backfill", got)
					}
					got = got[:len(got)-1]
				}
				if !reorders {
					// the bucket refills (900 needs 300 ms more); the
					// window frees a's 600 at 1s and a margin: b0 first
					if len(got) != 0 {
						t.Fatalf("admitted %+v ahead of b0", got)
					}
					n := 4
					if backfills {
						n = 3
					}
					rest := drain(t, s, clk, model, n)
					if len(rest) != n || rest[0].ID != "b0" {
						t.Fatalf("then %+v, want b0 first", rest)
					}
					return
				}
				if len(got) != 1 || got[0].ID != "b1" || got[0].Via != "same_pr" {
					t.Fatalf("admitted %+v, want b1 (same run, fits) via same_pr", got)
				}
				// b2 (200) fits when a leaves: 700 ms, its margin and a slot
				// from now; b0 (900) not before b1 leaves, a second from now
				if wait <= 0 || wait > 700*time.Millisecond+time.Second/60+time.Second/120 {
					t.Fatalf("wait %s: want the time b2 fits, not b0's", wait)
				}
				rest := drain(t, s, clk, model, 2)
				var ids []string
				for _, a := range rest {
					ids = append(ids, a.ID+"/"+a.Via)
				}
				if fmt.Sprint(ids) != "[b2/same_pr b0/fair]" {
					t.Fatalf("then %v, want [b2/same_pr b0/fair]", ids)
				}
				adm := []ratelimit.Admission{{At: t0, Cost: 600}, {At: got[0].Enqueued.Add(got[0].Waited), Cost: 300}, {At: got[0].Enqueued.Add(got[0].Waited), Cost: 100}}
				for _, a := range rest {
					adm = append(adm, ratelimit.Admission{At: a.Enqueued.Add(a.Waited), Cost: a.Tokens})
				}
				if rep := ratelimit.CheckWindows(adm, l.TokensPerPeriod, time.Second); rep.Violations != 0 {
					t.Fatalf("%d windows over the limit (worst %.3f)", rep.Violations, rep.Worst)
				}
			})
		}
	}
}

// TestWindowSamePRKeepsFairness: a file admitted in its run's head's place
// is charged to its tenant's flow as what it costs, so tenants of a tier
// still share tokens by their weights: one whose runs start with a big
// file (and reorder) gets what one of small files gets.
func TestWindowSamePRKeepsFairness(t *testing.T) {
	model := fmt.Sprintf("m-same-pr-fair-%d", time.Now().UnixNano())
	l := ratelimit.Limits{RequestsPerPeriod: 100000, TokensPerPeriod: 1000, Period: time.Second, Limiter: ratelimit.LimiterWindow}
	s, _, clk := windowScheduler(t, model, l, admission.Config{})
	for run := int64(1); run <= 10; run++ {
		for i, tokens := range []int64{700, 100, 100, 100, 100, 100} {
			reg(t, s, admission.Ticket{ID: fmt.Sprint("a", run, "-", i), Model: model, Class: "paid", Tenant: "1", PRSeq: run, Index: i, Total: 6, Tokens: tokens})
		}
	}
	for run := int64(1); run <= 20; run++ {
		for i := 0; i < 12; i++ {
			reg(t, s, admission.Ticket{ID: fmt.Sprint("b", run, "-", i), Model: model, Class: "paid", Tenant: "2", PRSeq: run, Index: i, Total: 12, Tokens: 100})
		}
	}
	// until tenant 1's 12,000 tokens are all admitted (tenant 2 has 24,000)
	got := drain(t, s, clk, model, 60+240)
	var tok [2]int64
	reordered, left := 0, 60
	for _, a := range got {
		if left == 0 {
			break
		}
		tok[a.Tenant[0]-'1'] += a.Tokens
		if a.Tenant == "1" {
			left--
		}
		if a.Via == "same_pr" {
			reordered++
		}
	}
	if reordered == 0 {
		t.Fatal("no file was admitted in its run's head's place")
	}
	// equal weights; a window gives tenant 1 less than half (its 700s
	// wait for room the 100s of tenant 2 need not): 42.0% here, with or
	// without reordering. A reordered file charged as its run's head
	// (700) gave tenant 1 33.3%.
	share := float64(tok[0]) / float64(tok[0]+tok[1])
	t.Logf("while both waited: tenant 1 %d tokens, tenant 2 %d (tenant 1 %.1f%%), %d via same_pr", tok[0], tok[1], 100*share, reordered)
	if share < 0.38 || share > 0.62 {
		t.Fatalf("tenant 1 got %.1f%% of the tokens while both waited; equal weights, 42%% without reordering", 100*share)
	}
}

// chatUses registers a chat ticket for the model and cancels it: chat
// uses the model, so a window keeps chat's share.
func chatUses(t *testing.T, s *admission.Scheduler, model string) {
	t.Helper()
	id := fmt.Sprint("chat-seen-", time.Now().UnixNano())
	reg(t, s, admission.Ticket{ID: id, Model: model, Class: "chat", Tenant: "9", Tokens: 1})
	if ok, err := s.Cancel(context.Background(), model, id); err != nil || !ok {
		t.Fatalf("cancel %s: %v %v", id, ok, err)
	}
}

// TestWindowChatShareWhileChatUses: a window keeps chat's share (over
// its horizon) only while chat uses the model: with no chat ticket in the
// last hour, batch fills the window to its limit; once chat registers,
// a batch ticket that would fill the window with nothing leaving it
// within the horizon waits; an hour after the last chat, it goes again.
// The chat model (Config.ChatModels) keeps the share from the start.
func TestWindowChatShareWhileChatUses(t *testing.T) {
	model := fmt.Sprintf("m-window-chatshare-%d", time.Now().UnixNano())
	l := ratelimit.Limits{RequestsPerPeriod: 100000, TokensPerPeriod: 1000, Period: time.Second, Limiter: ratelimit.LimiterWindow}
	s, _, clk := windowScheduler(t, model, l, admission.Config{ChatShare: 0.1})
	chatModel := model + "-chat"
	cs, _, cclk := windowScheduler(t, chatModel, l, admission.Config{ChatShare: 0.1, ChatModels: []string{chatModel}})
	ctx := context.Background()
	n := 0
	// fill admits 500, then 500 half a window later: what it got then
	fill := func() ([]admission.Admitted, time.Duration) {
		t.Helper()
		n++
		reg(t, s, admission.Ticket{ID: fmt.Sprint("a", n), Model: model, Class: "paid", Tenant: "1", Tokens: 500})
		if a, _, err := s.Admit(ctx, model, 1); err != nil || len(a) != 1 {
			t.Fatalf("first half: %v %v", a, err)
		}
		clk.advance(500 * time.Millisecond)
		reg(t, s, admission.Ticket{ID: fmt.Sprint("b", n), Model: model, Class: "paid", Tenant: "1", Tokens: 500})
		got, wait, err := s.Admit(ctx, model, 1)
		if err != nil {
			t.Fatal(err)
		}
		return got, wait
	}
	if got, wait := fill(); len(got) != 1 {
		t.Fatalf("no chat uses the model, yet batch left room in the window: nothing admitted, wait %s", wait)
	}
	clk.advance(3 * time.Second)
	chatUses(t, s, model)
	if got, wait := fill(); len(got) != 0 || wait <= 0 {
		t.Fatalf("chat uses the model, yet batch filled the window with nothing leaving it within the horizon: %v, wait %s", got, wait)
	}
	drain(t, s, clk, model, 1)
	clk.advance(time.Hour + 3*time.Second)
	if got, wait := fill(); len(got) != 1 {
		t.Fatalf("an hour after the last chat batch still left chat's share: nothing admitted, wait %s", wait)
	}
	// the chat model keeps it though no chat came yet
	s, clk, model = cs, cclk, chatModel
	if got, wait := fill(); len(got) != 0 || wait <= 0 {
		t.Fatalf("the chat model, yet batch filled the window with nothing leaving it within the horizon: %v, wait %s", got, wait)
	}
}

// TestWindowRefund: under the refund policy a settled job gives back what
// it did not use in the window slot that holds its charge, so room it
// never used is admitted again at once (a debt policy keeps it).
func TestWindowRefund(t *testing.T) {
	for _, policy := range []ratelimit.Policy{ratelimit.PolicyRefund, ratelimit.PolicyDebt} {
		t.Run(string(policy), func(t *testing.T) {
			model := fmt.Sprintf("m-window-refund-%s-%d", policy, time.Now().UnixNano())
			l := ratelimit.Limits{RequestsPerPeriod: 100000, TokensPerPeriod: 1000, Period: time.Second, Limiter: ratelimit.LimiterWindow, Policy: policy}
			s, _, clk := windowScheduler(t, model, l, admission.Config{})
			ctx := context.Background()
			reg(t, s, admission.Ticket{ID: "a", Model: model, Class: "chat", Tenant: "1", Tokens: 800})
			if a, _, _ := s.Admit(ctx, model, 1); len(a) != 1 {
				t.Fatal("a not admitted")
			}
			clk.advance(100 * time.Millisecond)
			if err := s.Started(ctx, model, "a"); err != nil {
				t.Fatal(err)
			}
			clk.advance(100 * time.Millisecond)
			if err := s.Settle(ctx, model, "a", ratelimit.Cost{Requests: 1, Tokens: 200}); err != nil {
				t.Fatal(err)
			}
			reg(t, s, admission.Ticket{ID: "b", Model: model, Class: "chat", Tenant: "1", Tokens: 700})
			got, _, err := s.Admit(ctx, model, 1)
			if err != nil {
				t.Fatal(err)
			}
			if want := policy == ratelimit.PolicyRefund; (len(got) == 1) != want {
				t.Fatalf("%s: b (700) admitted = %v after a settled 200 of 800; want %v", policy, len(got) == 1, want)
			}
		})
	}
}

// TestSettleWithoutCall: settling a zero cost (no call was made) gives
// the whole reservation back under either policy, to a bucket and to a
// window; a real call's usage under the debt policy keeps the estimate.
func TestSettleWithoutCall(t *testing.T) {
	for _, limiter := range []ratelimit.Limiter{ratelimit.LimiterBucket, ratelimit.LimiterWindow} {
		t.Run(string(limiter), func(t *testing.T) {
			model := fmt.Sprintf("m-nocall-%s-%d", limiter, time.Now().UnixNano())
			l := ratelimit.Limits{RequestsPerPeriod: 100000, TokensPerPeriod: 1000, Period: time.Minute, Limiter: limiter, Policy: ratelimit.PolicyDebt}
			s, b, _ := windowScheduler(t, model, l, admission.Config{})
			ctx := context.Background()
			for _, id := range []string{"called", "refused"} {
				reg(t, s, admission.Ticket{ID: id, Model: model, Class: "chat", Tenant: "1", Tokens: 400})
			}
			if a, _, _ := s.Admit(ctx, model, 2); len(a) != 2 {
				t.Fatalf("admitted %d of 2", len(a))
			}
			avail := func() int64 {
				a, _, err := b.Available(ctx)
				if err != nil {
					t.Fatal(err)
				}
				return a.Tokens
			}
			before := avail()
			if err := s.Settle(ctx, model, "called", ratelimit.Cost{Requests: 1, Tokens: 100}); err != nil {
				t.Fatal(err)
			}
			if got := avail(); got != before {
				t.Fatalf("a call's settle under debt changed the room %d -> %d", before, got)
			}
			if err := s.Settle(ctx, model, "refused", ratelimit.Cost{}); err != nil {
				t.Fatal(err)
			}
			if got := avail(); got != before+400 {
				t.Fatalf("no call made: room %d -> %d, want the 400 back", before, got)
			}
		})
	}
}

// windowScheduler is a scheduler over one model's bucket with limits l on
// the shared test Redis, on a fake clock (cfg.NowFunc is set to it).
func windowScheduler(t *testing.T, model string, l ratelimit.Limits, cfg admission.Config) (*admission.Scheduler, *ratelimit.Bucket, *clock) {
	t.Helper()
	rdb := redistest.Shared(t).Client(t)
	b, err := ratelimit.NewBucket(rdb, model, "sk", l)
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Unix(1_900_000_000, 0)}
	cfg.NowFunc = clk.now
	s, err := admission.New(redis.UniversalClient(rdb), map[string]*ratelimit.Bucket{model: b}, nil, nil, cfg, discard)
	if err != nil {
		t.Fatal(err)
	}
	return s, b, clk
}
