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

// reserveScheduler is a scheduler on a fresh bucket of 1000 tokens a
// second (burst 1000) whose chat reserve is tokens, with a stepped clock.
func reserveScheduler(t *testing.T, tokens int64, idle time.Duration) (*admission.Scheduler, *clock, string) {
	t.Helper()
	rdb := redistest.Shared(t).Client(t)
	model := fmt.Sprintf("m-%s-%d", t.Name(), time.Now().UnixNano())
	b, err := ratelimit.NewBucket(rdb, model, "sk", ratelimit.Limits{RequestsPerPeriod: 100000, TokensPerPeriod: 1000, Period: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Unix(1_900_000_000, 0)}
	cfg := admission.Config{ChatShare: 0.05, ChatReserve: map[string]int64{model: tokens}, ChatIdle: idle, NowFunc: clk.now}
	s, err := admission.New(redis.UniversalClient(rdb), map[string]*ratelimit.Bucket{model: b}, nil, nil, cfg, discard)
	if err != nil {
		t.Fatal(err)
	}
	return s, clk, model
}

// TestChatReserveAdmitsChatInOneStep: batch (200-token jobs, a backlog)
// keeps the bucket at its limit, admitted the moment each fits; two
// chats of 150 arriving right after a batch admission are both admitted
// by the next admission step, on the same clock, from the 400-token
// reserve batch had to leave. With only chat's share of the burst (50)
// they wait for refill.
func TestChatReserveAdmitsChatInOneStep(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		reserve int64
		want    int
	}{{"a reserve of 400", 400, 2}, {"the share alone, 50", 0, 0}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s, clk, model := reserveScheduler(t, c.reserve, time.Minute)
			for i := 0; i < 40; i++ {
				reg(t, s, admission.Ticket{ID: fmt.Sprint("p", i), Model: model, Class: "paid", Tenant: "1", PRSeq: 1, Index: i, Total: 40, Tokens: 200})
			}
			if got := drain(t, s, clk, model, 12); len(got) != 12 {
				t.Fatalf("batch admitted %d of 12", len(got))
			}
			reg(t, s, admission.Ticket{ID: "c1", Model: model, Class: "chat", Tenant: "8", Tokens: 150})
			reg(t, s, admission.Ticket{ID: "c2", Model: model, Class: "chat", Tenant: "9", Tokens: 150})
			adm, wait, err := s.Admit(context.Background(), model, 10)
			if err != nil {
				t.Fatal(err)
			}
			chats := 0
			for _, a := range adm {
				if a.Class == "chat" {
					chats++
				}
			}
			if chats != c.want {
				t.Fatalf("one step after batch took its room: %d chats admitted (%v, wait %s), want %d", chats, adm, wait, c.want)
			}
		})
	}
}

// TestChatReserveDecaysIntoBatch: the reserve is kept whole for the idle
// time after the last chat, then decays into batch linearly over as
// long again: a full bucket admits 3 batch jobs of 200 while the 400 are
// kept, 4 halfway through the decay (200 kept), then 5 (none kept).
func TestChatReserveDecaysIntoBatch(t *testing.T) {
	t.Parallel()
	idle := 10 * time.Second
	s, clk, model := reserveScheduler(t, 400, idle)
	for i := 0; i < 20; i++ {
		reg(t, s, admission.Ticket{ID: fmt.Sprint("p", i), Model: model, Class: "paid", Tenant: "1", PRSeq: 1, Index: i, Total: 20, Tokens: 200})
	}
	reg(t, s, admission.Ticket{ID: "c1", Model: model, Class: "chat", Tenant: "9", Tokens: 100})
	chatAt := clk.t
	if adm, _, err := s.Admit(context.Background(), model, 1); err != nil || len(adm) != 1 || adm[0].ID != "c1" {
		t.Fatalf("the chat first: %v %v", adm, err)
	}
	for _, step := range []struct {
		at   time.Duration // after the chat
		want int           // batch jobs a full bucket admits
	}{{time.Second, 3}, {idle, 3}, {idle + idle/2, 4}, {2*idle + time.Second, 5}} {
		clk.t = chatAt.Add(step.at)
		adm, _, err := s.Admit(context.Background(), model, 10)
		if err != nil {
			t.Fatal(err)
		}
		batch := 0
		for _, a := range adm {
			if a.Class != "chat" {
				batch++
			}
		}
		if batch != step.want {
			t.Errorf("%s after the last chat: a full bucket admitted %d batch jobs of 200, want %d", step.at, batch, step.want)
		}
		clk.advance(2 * time.Second) // nothing admitted meanwhile: the bucket refills
	}
}

// TestChatModelReservesATenth: the chat model on a token bucket keeps a
// tenth of its tokens' burst for chat unless ChatReserve names it (0
// included): 100 of 1000, so two chats of 50 find room in the step after
// batch took its own, where chat's share alone (50) fits one.
func TestChatModelReservesATenth(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		reserve map[string]int64
		want    int
	}{{"unset: a tenth", nil, 2}, {"set to 0: the share alone", map[string]int64{}, 1}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			rdb := redistest.Shared(t).Client(t)
			model := fmt.Sprintf("m-%s-%d", t.Name(), time.Now().UnixNano())
			b, err := ratelimit.NewBucket(rdb, model, "sk", ratelimit.Limits{RequestsPerPeriod: 100000, TokensPerPeriod: 1000, Period: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			clk := &clock{t: time.Unix(1_900_000_000, 0)}
			cfg := admission.Config{ChatShare: 0.05, ChatModels: []string{model}, NowFunc: clk.now}
			if c.reserve != nil {
				cfg.ChatReserve = map[string]int64{model: 0}
			}
			s, err := admission.New(redis.UniversalClient(rdb), map[string]*ratelimit.Bucket{model: b}, nil, nil, cfg, discard)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 20; i++ {
				reg(t, s, admission.Ticket{ID: fmt.Sprint("p", i), Model: model, Class: "paid", Tenant: "1", PRSeq: 1, Index: i, Total: 20, Tokens: 200})
			}
			if got := drain(t, s, clk, model, 8); len(got) != 8 {
				t.Fatalf("batch admitted %d of 8", len(got))
			}
			reg(t, s, admission.Ticket{ID: "c1", Model: model, Class: "chat", Tenant: "8", Tokens: 50})
			reg(t, s, admission.Ticket{ID: "c2", Model: model, Class: "chat", Tenant: "9", Tokens: 50})
			adm, _, err := s.Admit(context.Background(), model, 10)
			if err != nil {
				t.Fatal(err)
			}
			if len(adm) != c.want {
				t.Fatalf("admitted %v in the step after the chats came, want %d chats", adm, c.want)
			}
		})
	}
}

// TestWindowChatModelKeepsItsReserveNow: the chat model on a sliding
// window (1000 tokens a second) keeps its reserve (a tenth, 100) as a
// floor on the window's room: with batch (100-token jobs, a backlog)
// taking the window's room as it frees (its last window holds the limit
// less the reserve, 900), two chats of 50 registered
// right after a batch admission are both admitted by the next admission
// step, on the same clock. Another model's window keeps the same reserve
// over a horizon (chat finds it within a tenth of the window): there
// they wait. Once chat has been idle twice ChatIdle, the chat model's
// reserve is batch's again: its windows hold 1000.
func TestWindowChatModelKeepsItsReserveNow(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		chatModel bool
		want      int
	}{{"the chat model: now", true, 2}, {"another model: over a horizon", false, 0}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			model := fmt.Sprintf("m-window-chat-%v-%d", c.chatModel, time.Now().UnixNano())
			l := ratelimit.Limits{RequestsPerPeriod: 100000, TokensPerPeriod: 1000, Period: time.Second, Limiter: ratelimit.LimiterWindow}
			idle := 5 * time.Second
			cfg := admission.Config{ChatShare: 0.05, ChatIdle: idle}
			if c.chatModel {
				cfg.ChatModels = []string{model} // its reserve: a tenth
			} else {
				cfg.ChatReserve = map[string]int64{model: 100}
			}
			s, _, clk := windowScheduler(t, model, l, cfg)
			start := clk.now()
			if !c.chatModel {
				chatUses(t, s, model)
			}
			ctx := context.Background()
			for i := 0; i < 200; i++ {
				reg(t, s, admission.Ticket{ID: fmt.Sprint("p", i), Model: model, Class: "paid", Tenant: "1", PRSeq: 1, Index: i, Total: 200, Tokens: 100})
			}
			// batch spread over a window, one job every 100 ms, then each
			// taken the moment the window frees its room
			var batch []admission.Admitted
			for range 15 {
				clk.advance(100 * time.Millisecond)
				adm, _, err := s.Admit(ctx, model, 1)
				if err != nil {
					t.Fatal(err)
				}
				batch = append(batch, adm...)
			}
			got := drain(t, s, clk, model, 10)
			if len(got) != 10 {
				t.Fatalf("batch admitted %d of 10", len(got))
			}
			// batch keeps the window at its limit, less the reserve on
			// the chat model: its last window holds 900
			inWindow := int64(0)
			for _, a := range append(batch, got...) {
				if clk.now().Sub(a.Enqueued.Add(a.Waited)) < time.Second {
					inWindow += a.Tokens
				}
			}
			if c.chatModel && inWindow != 900 {
				t.Fatalf("batch's last window holds %d, want 900: the limit less the reserve", inWindow)
			}
			reg(t, s, admission.Ticket{ID: "c1", Model: model, Class: "chat", Tenant: "8", Tokens: 50})
			reg(t, s, admission.Ticket{ID: "c2", Model: model, Class: "chat", Tenant: "9", Tokens: 50})
			adm, wait, err := s.Admit(ctx, model, 10)
			if err != nil {
				t.Fatal(err)
			}
			chats := 0
			for _, a := range adm {
				if a.Class == "chat" {
					chats++
				}
			}
			if chats != c.want {
				t.Fatalf("one step after batch took its room: %d chats admitted (%v, wait %s), want %d", chats, adm, wait, c.want)
			}
			if !c.chatModel {
				return
			}
			// chat idle: batch alone past twice ChatIdle, then its windows
			var after []ratelimit.Admission
			for clk.now().Sub(start) < 2*idle+4*time.Second {
				got := drain(t, s, clk, model, 1)
				if len(got) != 1 {
					t.Fatalf("batch ran out at %s", clk.now().Sub(start))
				}
				if at := got[0].Enqueued.Add(got[0].Waited); at.Sub(start) > 2*idle+time.Second {
					after = append(after, ratelimit.Admission{At: at, Cost: got[0].Tokens})
				}
			}
			if rep := ratelimit.CheckWindows(after, l.TokensPerPeriod, time.Second); rep.Violations != 0 || rep.Worst < 1 {
				t.Fatalf("after chat went idle: fullest window %.3f (%d over), want 1: the reserve back in batch", rep.Worst, rep.Violations)
			}
		})
	}
}

// TestWindowChatModelDoesNotLookAheadIntoTheReserve: a window admits a
// job whose room frees within its look-ahead (the time from admission to
// the call), charging it before the room is there; on the chat model,
// whose window keeps chat's reserve now, that room would be the
// reserve's and a chat admitted meanwhile would wait for it at its call
// (the window bench on a loaded machine: a look-ahead of a tenth of the
// window, as large as the reserve). So while it keeps the reserve the
// chat model's window does not look ahead: batch taking the window's room
// as it frees (a look-ahead of 80 ms measured) never holds more than the
// limit less the reserve at its admission, and a chat registered right
// after a batch admission is admitted by the next step and calls at
// once.
func TestWindowChatModelDoesNotLookAheadIntoTheReserve(t *testing.T) {
	t.Parallel()
	model := fmt.Sprintf("m-window-chat-ahead-%d", time.Now().UnixNano())
	l := ratelimit.Limits{RequestsPerPeriod: 100000, TokensPerPeriod: 1000, Period: time.Second, Limiter: ratelimit.LimiterWindow}
	s, _, clk := windowScheduler(t, model, l, admission.Config{ChatShare: 0.05, ChatIdle: time.Minute, ChatModels: []string{model}})
	ctx := context.Background()
	// the look-ahead measured: a job starts 30 ms after its admission and
	// calls 10 ms after its start (80 ms, as TestWindowLooksAhead)
	reg(t, s, admission.Ticket{ID: "a", Model: model, Class: "paid", Tenant: "1", Tokens: 100})
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
	if ahead := lookAhead(t, s, model); ahead != 80*time.Millisecond {
		t.Fatalf("look-ahead %s, want 80 ms measured", ahead)
	}
	for i := range 200 {
		reg(t, s, admission.Ticket{ID: fmt.Sprint("p", i), Model: model, Class: "paid", Tenant: "1", PRSeq: 1, Index: i, Total: 200, Tokens: 100})
	}
	// batch spread over a window, one job every 70 ms, then each taken
	// the moment the window frees its room, for two windows
	var batch []admission.Admitted
	held := func() int64 {
		var n int64
		for _, a := range batch {
			if clk.now().Sub(a.Enqueued.Add(a.Waited)) < time.Second {
				n += a.Tokens
			}
		}
		return n
	}
	for range 14 {
		clk.advance(70 * time.Millisecond)
		adm, _, err := s.Admit(ctx, model, 1)
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, adm...)
	}
	for range 20 {
		got := drain(t, s, clk, model, 1)
		if len(got) != 1 {
			t.Fatalf("batch ran out")
		}
		batch = append(batch, got...)
		// batch's charges within the last window, at each admission
		if n := held(); n > 900 {
			t.Fatalf("batch holds %d of the window at %s: over the limit less the reserve (900)", n, clk.now())
		}
	}
	reg(t, s, admission.Ticket{ID: "c1", Model: model, Class: "chat", Tenant: "8", Tokens: 100})
	adm, wait, err := s.Admit(ctx, model, 10)
	if err != nil || len(adm) != 1 || adm[0].ID != "c1" {
		t.Fatalf("one step after batch took its room: admitted %v (wait %s, %v), want c1", adm, wait, err)
	}
	if err := s.Started(ctx, model, "c1"); err != nil {
		t.Fatal(err)
	}
	if w, err := s.TryCalling(ctx, model, "c1"); err != nil || w != 0 {
		t.Fatalf("c1's call waits %s (%v): its room is the reserve, there now", w, err)
	}
}
