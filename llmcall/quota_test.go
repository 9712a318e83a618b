package llmcall_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/llmcall"
	"github.com/prq-dev/prq/ratelimit"
)

// The one quota reservation, on a real Redis: the output cut to what
// the tighter quota leaves, the tokens reserved again when the dollars
// cut further, and a quota that cannot pay giving all back with what
// each quota has left.
func TestReserveQuota(t *testing.T) {
	t.Parallel()
	rdb := redistest.Shared(t).Client(t)
	q, err := ratelimit.NewQuota(rdb, ratelimit.QuotaConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// a token costs 1,000 nano-dollars in, 2,000 out
	const in, out = 1000, 2000
	for _, tc := range []struct {
		name string
		ask  llmcall.QuotaAsk
		// spent beforehand: tokens, nano-dollars
		spentTokens, spentNano int64
		// a hold: its cap, its tokens' and dollars' reservations (-1: none)
		cap, tokens, nano int64
		// or a refusal
		short *llmcall.QuotaShort
	}{
		{name: "no quota", ask: llmcall.QuotaAsk{Input: 100, Output: 500}, cap: 500, tokens: -1, nano: -1},
		{name: "tokens cut the output", ask: llmcall.QuotaAsk{Tokens: 400, Input: 100, Output: 500}, cap: 300, tokens: 400, nano: -1},
		{name: "tokens bind before dollars", ask: llmcall.QuotaAsk{Tokens: 400, Nano: 10_000_000, Input: 100, Output: 500, InPrice: in, OutPrice: out},
			cap: 300, tokens: 400, nano: 100*in + 300*out},
		{name: "dollars cut further: the tokens reserved again", ask: llmcall.QuotaAsk{Tokens: 400, Nano: 300_000, Input: 100, Output: 500, InPrice: in, OutPrice: out},
			cap: 100, tokens: 200, nano: 300_000},
		{name: "tokens spent, the dollars read", ask: llmcall.QuotaAsk{Tokens: 400, Nano: 300_000, Input: 100, Output: 500, InPrice: in, OutPrice: out}, spentTokens: 350, spentNano: 50_000,
			short: &llmcall.QuotaShort{LeftTokens: 50, LeftNano: 250_000}},
		{name: "dollars spent, the tokens given back", ask: llmcall.QuotaAsk{Tokens: 400, Nano: 300_000, Input: 100, Output: 500, InPrice: in, OutPrice: out}, spentNano: 250_000,
			short: &llmcall.QuotaShort{Dollars: true, LeftTokens: 400, LeftNano: 50_000}},
		{name: "room for the input, not the least output", ask: llmcall.QuotaAsk{Tokens: 400, Input: 100, Output: 500, Least: 64}, spentTokens: 260,
			short: &llmcall.QuotaShort{LeftTokens: 140}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := tc.ask
			a.Tenant, a.ID = fmt.Sprintf("t-%s-%d", t.Name(), time.Now().UnixNano()), "call"
			if tc.spentTokens > 0 {
				spend(t, q)(q.Reserve(ctx, a.Tenant, a.Agent, "before", a.Tokens, tc.spentTokens, 0))
			}
			if tc.spentNano > 0 {
				spend(t, q)(q.ReserveDollars(ctx, a.Tenant, a.DollarAgent, "before$", a.Nano, tc.spentNano/in, 0, in, out))
			}
			h, err := llmcall.ReserveQuota(ctx, q, a)
			if tc.short != nil {
				var s *llmcall.QuotaShort
				if !errors.As(err, &s) {
					t.Fatalf("reserved %+v (%v), want a refusal", h, err)
				}
				if s.Dollars != tc.short.Dollars || s.LeftTokens != tc.short.LeftTokens || s.LeftNano != tc.short.LeftNano {
					t.Errorf("refused %+v, want %+v", *s, *tc.short)
				}
				if (s.Refused == nil) != (a.Least > 0) || (s.Refused != nil && !errors.Is(err, ratelimit.ErrQuotaExceeded)) {
					t.Errorf("refusal %v, want the quota's unless the least output did not fit", s.Refused)
				}
				if h != (llmcall.QuotaHold{}) {
					t.Errorf("a refusal holds %+v", h)
				}
				usedTokens, usedNano := used(t, q, a)
				if usedTokens != tc.spentTokens || usedNano != tc.spentNano {
					t.Errorf("after the refusal the quotas hold %d tokens, %d nano-dollars; want what was spent before (%d, %d)", usedTokens, usedNano, tc.spentTokens, tc.spentNano)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.Cap != tc.cap || reserved(h.Tokens) != tc.tokens || reserved(h.Dollars) != tc.nano {
				t.Errorf("held cap %d, %d tokens, %d nano-dollars; want %d, %d, %d", h.Cap, reserved(h.Tokens), reserved(h.Dollars), tc.cap, tc.tokens, tc.nano)
			}
			if usedTokens, usedNano := used(t, q, a); usedTokens != max(tc.tokens, 0) || usedNano != max(tc.nano, 0) {
				t.Errorf("the quotas hold %d tokens, %d nano-dollars; want the hold's", usedTokens, usedNano)
			}
			// settled with the call's usage (all given back here)
			if err := llmcall.SettleQuotas(ctx, q, h, llmcall.Settlement{}); err != nil {
				t.Fatal(err)
			}
			if usedTokens, usedNano := used(t, q, a); usedTokens != 0 || usedNano != 0 {
				t.Errorf("settled to nothing, the quotas hold %d tokens, %d nano-dollars", usedTokens, usedNano)
			}
		})
	}
}

// spend spends a reservation in full.
func spend(t *testing.T, q *ratelimit.Quota) func(ratelimit.Grant, error) {
	return func(g ratelimit.Grant, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Settle(context.Background(), g, g.Reserved); err != nil {
			t.Fatal(err)
		}
	}
}

func used(t *testing.T, q *ratelimit.Quota, a llmcall.QuotaAsk) (tokens, nano int64) {
	t.Helper()
	ctx := context.Background()
	u, err := q.Used(ctx, a.Tenant, a.Agent, max(a.Tokens, 1))
	if err != nil {
		t.Fatal(err)
	}
	d, err := q.UsedDollars(ctx, a.Tenant, a.DollarAgent, max(a.Nano, 1))
	if err != nil {
		t.Fatal(err)
	}
	return u.Used, d.Used
}

func reserved(g *ratelimit.Grant) int64 {
	if g == nil {
		return -1
	}
	return g.Reserved
}
