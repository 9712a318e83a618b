package admission

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/ratelimit"
)

// TestReservationsOfAnOlderPrq: a reservation an older prq wrote keeps
// its charge's time in the resage zset, not in an " @<µs>" part. The
// reconciler still expires it by that time, a settle takes it out of
// the zset, and a window's start that moves its charge writes the time
// into the reservation and takes it out of the zset (which would
// otherwise expire it by its old time).
func TestReservationsOfAnOlderPrq(t *testing.T) {
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
			ids := []string{"exp", "set", "mov", "new"}
			for i, id := range ids {
				if _, err := s.Register(ctx, Ticket{ID: id, Queue: "q", Model: "m", Class: "paid", Tenant: "1", PRSeq: 1, Index: i, Total: len(ids), Tokens: 1000}); err != nil {
					t.Fatal(err)
				}
			}
			if adm, _, err := s.Admit(ctx, "m", len(ids)); err != nil || len(adm) != len(ids) {
				t.Fatalf("admitted %d of %d: %v", len(adm), len(ids), err)
			}
			// the first three as an older prq wrote them
			for _, id := range ids[:3] {
				r := rdb.HGet(ctx, keys.Reservations, id).Val()
				parts := atPart.FindStringSubmatch(r)
				if parts == nil {
					t.Fatalf("%s's reservation %q has no charge time", id, r)
				}
				us, _ := strconv.ParseFloat(parts[1], 64)
				rdb.HSet(ctx, keys.Reservations, id, atPart.ReplaceAllString(r, ""))
				rdb.ZAdd(ctx, keys.ReservationAge, redis.Z{Score: us, Member: id})
			}
			if err := s.Settle(ctx, "m", "set", ratelimit.Cost{}); err != nil {
				t.Fatal(err)
			}
			if rdb.HExists(ctx, keys.Reservations, "set").Val() || rdb.ZScore(ctx, keys.ReservationAge, "set").Err() != redis.Nil {
				t.Fatal("the settled reservation is still kept")
			}
			clk.t = clk.t.Add(time.Second)
			if err := s.Started(ctx, "m", "mov"); err != nil {
				t.Fatal(err)
			}
			if lim == ratelimit.LimiterWindow {
				r := rdb.HGet(ctx, keys.Reservations, "mov").Val()
				if want := " @" + strconv.FormatInt(clk.t.UnixMicro(), 10); !strings.Contains(r, want) {
					t.Fatalf("the moved reservation %q, want its charge at the start (%s)", r, want)
				}
				if rdb.ZScore(ctx, keys.ReservationAge, "mov").Err() != redis.Nil {
					t.Fatal("the moved reservation is still in the zset")
				}
			}
			// a minute after the admission: the charges at admission
			// expire ("exp", the older prq's, by its zset score; "new"; and
			// "mov" on a bucket, whose start kept its time), a window's
			// "mov", moved a second later, stays
			clk.t = clk.t.Add(time.Minute - time.Second)
			if err := s.Reconcile(ctx, RunConfig{}, true); err != nil {
				t.Fatal(err)
			}
			left := rdb.HKeys(ctx, keys.Reservations).Val()
			want := "[]"
			if lim == ratelimit.LimiterWindow {
				want = "[mov]"
			}
			if got := strings.Join(strings.Fields(strings.Trim(strings.Join(left, " "), " ")), " "); "["+got+"]" != want {
				t.Fatalf("after expiry the reservations are %v, want %s", left, want)
			}
			if n := rdb.ZCard(ctx, keys.ReservationAge).Val(); n != 0 {
				t.Fatalf("after expiry the zset holds %d members, want none", n)
			}
		})
	}
}
