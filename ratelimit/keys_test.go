package ratelimit_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/ratelimit"
)

// A model's keys each have a state of their own under the model's tag:
// charging one key, syncing it or penalizing it leaves the others, and
// AvailableAll sums them.
func TestKeyedBucket(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Shared(t).Client(t)
	l := ratelimit.Limits{RequestsPerPeriod: 10, TokensPerPeriod: 1000, Period: time.Hour}
	b, err := ratelimit.NewKeyedBucket(rdb, "keyed-model", []string{"sk-k-0", "sk-k-1", "sk-k-2"}, l)
	if err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	b.NowFunc = clk.now
	if b.Keys() != 3 || b.ForKey(3) != nil || b.ForKey(-1) != nil || b.ForKey(2).Key() != 2 {
		t.Fatalf("keys %d, ForKey out of range not nil, or ForKey(2) is key %d", b.Keys(), b.ForKey(2).Key())
	}
	states := map[string]bool{}
	for i := range 3 {
		k := b.ForKey(i)
		if !strings.HasPrefix(k.StateKey(), b.Tag()) || states[k.StateKey()] {
			t.Fatalf("key %d's state %s: not under the tag %s, or shared", i, k.StateKey(), b.Tag())
		}
		states[k.StateKey()] = true
		if i > 0 && !strings.Contains(k.StateKey(), b.KeyLabel(i)) || strings.Contains(k.StateKey(), "sk-k-") {
			t.Fatalf("key %d's state %s: named by the key's hash, never the key", i, k.StateKey())
		}
	}
	if d, err := b.ForKey(1).Reserve(ctx, "j1", ratelimit.Cost{Requests: 1, Tokens: 400}); err != nil || !d.Admitted {
		t.Fatalf("reserve on key 1: %+v %v", d, err)
	}
	h := http.Header{}
	h.Set("x-ratelimit-remaining-requests", "10")
	h.Set("x-ratelimit-remaining-tokens", "700")
	if _, err := b.ForKey(2).Sync(ctx, http.StatusOK, h, 0); err != nil {
		t.Fatal(err)
	}
	got := make([]int64, 3)
	for i := range got {
		c, _, err := b.ForKey(i).Available(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got[i] = c.Tokens
	}
	if got[0] != 1000 || got[1] != 600 || got[2] != 700 {
		t.Fatalf("tokens per key %v, want [1000 600 700]", got)
	}
	if all, err := b.AvailableAll(ctx); err != nil || all.Tokens != 2300 || all.Requests != 29 {
		t.Fatalf("AvailableAll %+v (%v), want 2300 tokens and 29 requests", all, err)
	}
	if _, err := ratelimit.NewKeyedBucket(rdb, "keyed-model", []string{"sk-k-0", "sk-k-0"}, l); err == nil {
		t.Fatal("one key listed twice: no error")
	}
	if _, err := ratelimit.NewKeyedBucket(rdb, "keyed-model", nil, l); err == nil {
		t.Fatal("no key: no error")
	}
	// keys not read (a process that never calls the provider) may repeat
	if _, err := ratelimit.NewKeyedBucket(rdb, "keyed-model", []string{"", ""}, l); err != nil {
		t.Fatalf("unread keys: %v", err)
	}
}
