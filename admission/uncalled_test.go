package admission

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/ratelimit"
)

// TestUncalledSums follows a token bucket's uncalled sums (what the call's
// correction reads instead of every reservation) through admission, a
// call, a settle before the call, the reconciler's expiry of a
// reservation nobody settled, and its recount of sums gone wrong; and a
// window's, which keeps none.
func TestUncalledSums(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, lim := range []ratelimit.Limiter{ratelimit.LimiterBucket, ratelimit.LimiterWindow} {
		t.Run(string(lim), func(t *testing.T) {
			rdb := redistest.New(t).Client(t)
			clk := &memoClock{t: time.Unix(1_900_000_000, 0)}
			b, err := ratelimit.NewBucket(rdb, "m", "sk", ratelimit.Limits{Limiter: lim, RequestsPerPeriod: 100, TokensPerPeriod: 100000, Period: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			b.NowFunc = clk.now
			s, err := New(rdb, map[string]*ratelimit.Bucket{"m": b}, nil, nil, Config{NowFunc: clk.now, ReservationTTL: time.Minute}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			keys, _, _ := s.keys("m")
			sums := func() string { return rdb.HGet(ctx, keys.State, "uncalled").Val() }
			want := func(step, bucket string) {
				t.Helper()
				w := bucket
				if lim == ratelimit.LimiterWindow {
					w = "" // a window's call reads none
				}
				if got := sums(); got != w {
					t.Fatalf("%s: uncalled sums %q, want %q", step, got, w)
				}
			}
			admit := func(ids ...string) {
				t.Helper()
				for i, id := range ids {
					if _, err := s.Register(ctx, Ticket{ID: id, Queue: "q", Model: "m", Class: "paid", Tenant: "1", PRSeq: 1, Index: i, Total: len(ids), Tokens: int64(1000 * (i + 1))}); err != nil {
						t.Fatal(err)
					}
				}
				if adm, _, err := s.Admit(ctx, "m", len(ids)); err != nil || len(adm) != len(ids) {
					t.Fatalf("admitted %d of %d: %v", len(adm), len(ids), err)
				}
			}
			// requests are dimension 1, tokens 2: "<key>:<id>:<sum>"
			admit("a", "b", "c")
			want("admitted", "0:1:3 0:2:6000")
			if err := s.Started(ctx, "m", "a"); err != nil {
				t.Fatal(err)
			}
			want("started (not called yet)", "0:1:3 0:2:6000")
			if err := s.Calling(ctx, "m", "a"); err != nil {
				t.Fatal(err)
			}
			want("a called", "0:1:2 0:2:5000")
			if err := s.Calling(ctx, "m", "a"); err != nil {
				t.Fatal(err)
			}
			want("a called again", "0:1:2 0:2:5000")
			if err := s.Settle(ctx, "m", "a", ratelimit.Cost{Requests: 1, Tokens: 700}); err != nil {
				t.Fatal(err)
			}
			want("a settled after its call", "0:1:2 0:2:5000")
			if err := s.Settle(ctx, "m", "b", ratelimit.Cost{}); err != nil {
				t.Fatal(err)
			}
			want("b settled before a call", "0:1:1 0:2:3000")
			clk.t = clk.t.Add(30 * time.Second)
			admit("d")
			want("d admitted", "0:1:2 0:2:4000")
			// c, charged 80 s ago, expires; d, 50 s ago, stays
			clk.t = clk.t.Add(50 * time.Second)
			if err := s.Reconcile(ctx, RunConfig{}, true); err != nil {
				t.Fatal(err)
			}
			if rdb.HExists(ctx, keys.Reservations, "c").Val() || !rdb.HExists(ctx, keys.Reservations, "d").Val() {
				t.Fatal("the reconciler expired the wrong reservations")
			}
			want("c expired", "0:1:1 0:2:1000")
			// sums gone wrong (a key dropped, a lost write) are recounted
			rdb.HSet(ctx, keys.State, "uncalled", "0:1:9 0:2:77 3:2:5")
			if err := s.Reconcile(ctx, RunConfig{}, true); err != nil {
				t.Fatal(err)
			}
			want("recounted", "0:1:1 0:2:1000")
			if err := s.Settle(ctx, "m", "d", ratelimit.Cost{}); err != nil {
				t.Fatal(err)
			}
			if sums() != "" {
				t.Fatalf("nothing open: the sums' field is still there (%q)", sums())
			}
		})
	}
}

// TestUncalledSumsOfAnExpiredState: a one-key model's sums live in its
// state; when the state has expired (an idle bucket) while a
// reservation is open, the recount writes the state whole, with its
// TTL, not a hash of the sums alone that would never expire.
func TestUncalledSumsOfAnExpiredState(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.New(t).Client(t)
	b, err := ratelimit.NewBucket(rdb, "m", "sk", ratelimit.Limits{RequestsPerPeriod: 100, TokensPerPeriod: 100000, Period: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(rdb, map[string]*ratelimit.Bucket{"m": b}, nil, nil, Config{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	keys, _, _ := s.keys("m")
	if _, err := s.Register(ctx, Ticket{ID: "a", Queue: "q", Model: "m", Class: "paid", Tenant: "1", PRSeq: 1, Total: 1, Tokens: 1000}); err != nil {
		t.Fatal(err)
	}
	if adm, _, err := s.Admit(ctx, "m", 1); err != nil || len(adm) != 1 {
		t.Fatalf("admit: %v %v", adm, err)
	}
	rdb.Del(ctx, keys.State) // expired
	if err := s.Reconcile(ctx, RunConfig{}, true); err != nil {
		t.Fatal(err)
	}
	if got := rdb.HGet(ctx, keys.State, "uncalled").Val(); got != "0:1:1 0:2:1000" {
		t.Fatalf("after the recount the sums are %q, want the open reservation's", got)
	}
	if ttl := rdb.PTTL(ctx, keys.State).Val(); ttl <= 0 {
		t.Fatalf("the state the recount wrote has TTL %v, want one", ttl)
	}
}
