package admission_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prq-dev/prq/admission"
)

// flood drives one tenant's chat at the bucket's rate (after a backlog of
// comments) on a fake clock for simulated dur; five seconds in, when the
// flood has the bucket, another tenant's paid backlog arrives. It returns
// how long the victim's first paid job waited (ok false: it was never
// admitted) and the tokens admitted per class from a second after the
// paid work arrived.
func flood(t *testing.T, cfg admission.Config, dur time.Duration) (firstPaid time.Duration, ok bool, tokens map[string]int64) {
	t.Helper()
	const (
		tps       = 1000 // bucket: 1000 tokens a second
		chatCost  = 100  // so 10 chats a second is the bucket's rate
		paidCost  = 500
		paidJobs  = 400
		chatEvery = 100 * time.Millisecond
	)
	s, clk, model := newOrdered(t, tps, cfg)
	ctx := context.Background()
	start := clk.now()
	n := 0
	addChat := func() {
		reg(t, s, admission.Ticket{ID: fmt.Sprint("spam-", n), Model: model, Class: admission.ClassChat, Tenant: "spammer", Tokens: chatCost})
		n++
	}
	for i := 0; i < 30; i++ { // the commenters' backlog
		addChat()
	}
	nextChat := start.Add(chatEvery)
	paidAt := start.Add(5 * time.Second)
	paid := false
	tokens = map[string]int64{}
	for clk.now().Before(paidAt.Add(dur)) {
		for !nextChat.After(clk.now()) {
			addChat()
			nextChat = nextChat.Add(chatEvery)
		}
		if !paid && !clk.now().Before(paidAt) {
			for i := 0; i < paidJobs; i++ {
				reg(t, s, admission.Ticket{ID: fmt.Sprint("paid-", i), Model: model, Class: "paid", Tenant: "victim", PRSeq: 1, Index: i, Total: paidJobs, Tokens: paidCost})
			}
			paid = true
		}
		adm, wait, err := s.Admit(ctx, model, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range adm {
			if a.Class == "paid" && !ok {
				firstPaid, ok = clk.now().Sub(paidAt), true
			}
			if paid && clk.now().Sub(paidAt) >= time.Second {
				k := "batch"
				if a.Class == admission.ClassChat {
					k = "chat"
				}
				tokens[k] += a.Tokens
			}
		}
		if len(adm) == 0 {
			step := nextChat.Sub(clk.now())
			if wait > 0 && wait < step {
				step = wait
			}
			if !paid && paidAt.Sub(clk.now()) < step {
				step = paidAt.Sub(clk.now())
			}
			clk.advance(step)
		}
	}
	return firstPaid, ok, tokens
}

// TestChatFloodKeepsPaidWithinAgingBound: one tenant's commenters at the
// bucket's rate must not hold another tenant's paid job past the aging
// bound, and batch keeps at least its share (1 - ChatCap) of the tokens.
func TestChatFloodKeepsPaidWithinAgingBound(t *testing.T) {
	t.Parallel()
	const aging = 2 * time.Second
	const dur = 60 * time.Second
	refill := 500 * time.Millisecond // one paid job's tokens at 1000/s
	for name, cfg := range map[string]admission.Config{
		"default cap (0.5)": {Aging: aging},
		"cap 0.2":           {Aging: aging, ChatCap: 0.2},
		// chat may go ahead of batch through a reserve of three chats
		"default cap, reserve 300": {Aging: aging, ChatShare: 0.3},
		"no cap: aging alone":      {Aging: aging, ChatCap: 1},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			first, admitted, tok := flood(t, cfg, dur)
			total := tok["chat"] + tok["batch"]
			share := 0.0
			if total > 0 {
				share = float64(tok["batch"]) / float64(total)
			}
			shown := first.String()
			if !admitted {
				shown = "forever (not admitted in " + dur.String() + ")"
			}
			t.Logf("%s: chat flood at bucket rate: victim's paid job waited %s (aging bound %s); batch got %.1f%% of %d tokens (chat %d)",
				name, shown, aging, 100*share, total, tok["chat"])
			if !admitted || first > aging+refill {
				t.Fatalf("the paid job waited %s under a chat flood, past the aging bound %s plus one refill", shown, aging)
			}
			if cfg.ChatCap == 1 {
				return
			}
			c := cfg.ChatCap
			if c == 0 {
				c = 0.5
			}
			if want := 1 - c - 0.02; share < want {
				t.Fatalf("batch got %.3f of the tokens while both waited, want at least %.3f", share, want)
			}
		})
	}
}

// TestChatFairAcrossTenants: a tenant with a few chats is not queued
// behind another tenant's hundred.
func TestChatFairAcrossTenants(t *testing.T) {
	t.Parallel()
	s, clk, model := newOrdered(t, 1000, admission.Config{})
	for i := 0; i < 100; i++ {
		reg(t, s, admission.Ticket{ID: fmt.Sprint("a-", i), Model: model, Class: admission.ClassChat, Tenant: "a", Tokens: 200})
	}
	clk.advance(time.Millisecond)
	for i := 0; i < 3; i++ {
		reg(t, s, admission.Ticket{ID: fmt.Sprint("b-", i), Model: model, Class: admission.ClassChat, Tenant: "b", Tokens: 200})
	}
	got := drain(t, s, clk, model, 103)
	var order []string
	lastB, aSeq := -1, 0
	for i, a := range got {
		order = append(order, a.ID)
		switch a.Tenant {
		case "b":
			lastB = i
		case "a":
			if a.ID != fmt.Sprint("a-", aSeq) {
				t.Fatalf("tenant a's chat out of arrival order: %s at %d, want a-%d", a.ID, i, aSeq)
			}
			aSeq++
		}
	}
	t.Logf("tenant b's 3 chats done at admission %d of 103 (FIFO: 103); first 12: %v", lastB+1, order[:min(12, len(order))])
	if lastB < 0 || lastB > 9 {
		t.Fatalf("tenant b's last chat was admission %d behind tenant a's flood: %v", lastB+1, order)
	}
}
