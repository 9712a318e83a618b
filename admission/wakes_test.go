package admission

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/ratelimit"
)

// The loops count the chat tickets that may still wait: a chat ticket
// counts, an attempt that admitted chats takes them off, one that found
// nothing waiting at all clears the count; batch tickets do not count.
func TestWakesCountWaitingChats(t *testing.T) {
	w := newWakes("me")
	w.hear("t|paid|10")
	if w.chatWaits() {
		t.Fatal("a batch ticket counts as a waiting chat")
	}
	w.hear("t|chat|11")
	w.hear("t|chat|12")
	if !w.chatWaits() {
		t.Fatal("chat tickets heard, none counted")
	}
	w.hear(announcement("other", 13, 5000, true, 1))
	if !w.chatWaits() {
		t.Fatal("one of two chats admitted, none left counted")
	}
	if leads(w) {
		t.Fatal("another process announced last, yet this one leads")
	}
	w.hear(announcement("me", 14, 5000, true, 1))
	if !leads(w) {
		t.Fatal("this process announced last, yet does not lead")
	}
	if w.chatWaits() {
		t.Fatal("both chats admitted, one still counted")
	}
	w.hear("t|chat|15")
	w.hear(announcement("other", 16, 0, true, 0)) // nothing waits at all
	if w.chatWaits() {
		t.Fatal("an attempt found nothing waiting, a chat still counted")
	}
	if any, _, _ := w.uncovered(); any {
		t.Fatal("a ticket registered before a complete attempt is not covered")
	}
	w.hear("t|chat|20")
	if any, chat, _ := w.uncovered(); !any || !chat {
		t.Fatal("a chat ticket after the last attempt is not uncovered chat")
	}
}

// An idle loop sleeps until a wake (IdleSleep, an hour here, only bounds
// a lost one). A ticket whose wake was lost while the subscription was
// down is admitted once the subscription is back: the resubscription
// wakes every loop.
func TestResubscriptionWakesIdleLoops(t *testing.T) {
	r := redistest.New(t)
	rdb := r.Client(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b, err := ratelimit.NewBucket(rdb, "m", "sk", ratelimit.Limits{RequestsPerPeriod: 1000, TokensPerPeriod: 1_000_000, Period: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(rdb, map[string]*ratelimit.Bucket{"m": b}, nil, nil, Config{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx, RunConfig{Capacity: func() int { return 8 }, IdleSleep: time.Hour, ReconcileEvery: time.Hour})
	}()
	defer func() { cancel(); <-done }()
	waiting := func() int64 {
		st, err := s.Stats(ctx, "m")
		if err != nil {
			t.Fatal(err)
		}
		return st.Backlog["paid"]
	}
	// the loop's first attempt, then idle: a ticket announced as usual is
	// admitted
	if _, err := s.Register(ctx, Ticket{ID: "heard", Queue: NotifyQueue, Model: "m", Class: "paid", Tenant: "a", Tokens: 10}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return waiting() == 0 }, "the announced ticket admitted")
	// a ticket registered with its wake lost stays waiting while the loop
	// is idle; a wake still on its way from the first ticket (a loaded
	// machine delivers it late) may admit one: then another is tried
	keys, _, _ := s.keys("m")
	for try := 0; ; try++ {
		silent := Ticket{ID: fmt.Sprintf("silent-%d", try), Queue: NotifyQueue, Model: "m", Class: "paid", Tenant: "a", Tokens: 10}
		if err := registerScript.Run(ctx, rdb, keys.list(), s.now(), "", silent.ID, encodeTicket(silent.stored())).Err(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
		if waiting() == 1 {
			break
		}
		if try == 4 {
			t.Fatal("five tickets nobody announced were admitted by an idle loop: the test shows nothing")
		}
	}
	if err := rdb.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return waiting() == 0 }, "the silent ticket admitted after the resubscription")
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Two processes, the same channel: "me" announced an attempt begun
// before a ticket, published after the ticket reached the channel; the
// other announced before. At the ticket each heard the other last, so
// the other leads it; when "me" takes the wake, its own late
// announcement has made it the last to announce. Asked then, each would
// think the other leads and both stay Behind: the ticket waits a whole
// Behind. Who leads a ticket is settled where it is heard.
func TestTheLeaderOfATicketIsWhoLedWhenItWasHeard(t *testing.T) {
	me, other := newWakes("me"), newWakes("other")
	for _, m := range []string{
		announcement("me", 10, 0, true, 0),
		announcement("other", 11, 0, true, 0),
		"t|paid|13",
		announcement("me", 12, 0, true, 0), // began before the ticket
		"d|20",
	} {
		me.hear(m)
		other.hear(m)
	}
	any, _, meLeads := me.uncovered()
	_, _, otherLeads := other.uncovered()
	if !any || meLeads || !otherLeads {
		t.Fatalf("uncovered %v, me leads %v, other leads %v: want the ticket uncovered and led by other alone", any, meLeads, otherLeads)
	}
	if d := me.dues(); len(d) != 1 || !d[0].lead {
		t.Fatalf("me heard the due time as %+v, want it led by me (the last to announce before it)", d)
	}
	if d := other.dues(); len(d) != 1 || d[0].lead {
		t.Fatalf("other heard the due time as %+v, want it led by me", d)
	}
	// a resubscription (heard outside the channel's order: wakes may
	// have been lost) has every loop look, the one that led included
	other.hear(resubscribed)
	me.hear(resubscribed)
	if _, _, lead := other.uncovered(); !lead {
		t.Fatal("after a resubscription the ticket's leader no longer leads it")
	}
	if _, _, lead := me.uncovered(); !lead {
		t.Fatal("after a resubscription a loop that did not lead does not look")
	}
	// a later ticket is led by whoever announced last before it
	other.hear("t|chat|14")
	if _, _, lead := other.uncovered(); lead {
		t.Fatal("a ticket after me announced is led by other")
	}
	me.hear("t|chat|14")
	if _, chat, lead := me.uncovered(); !chat || !lead {
		t.Fatalf("chat %v, lead %v: want a chat ticket led by me", chat, lead)
	}
}

// leads reports whether w's process announced last, or nobody has.
func leads(w *wakes) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.leadsLocked()
}
