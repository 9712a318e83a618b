package store_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
)

// A delivery body's digest is held by the first delivery id that claims
// it, for the window, in one command: a replay under a new id reads the
// first id, a redelivery under the same id its own; released, the next
// claim takes it.
func TestClaimDelivery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.New(t).Client(t)
	st := store.New(rdb, jobs.TierFree)
	commands := func() int64 {
		for l := range strings.SplitSeq(rdb.Info(ctx, "stats").Val(), "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "total_commands_processed:"); ok {
				c, _ := strconv.ParseInt(v, 10, 64)
				return c
			}
		}
		t.Fatal("no total_commands_processed in INFO")
		return 0
	}
	claim := func(id, want string) {
		t.Helper()
		if held, err := st.ClaimDelivery(ctx, "d1", id, time.Hour); err != nil || held != want {
			t.Fatalf("claim by %s: %q (%v), want %q", id, held, err, want)
		}
	}
	before := commands()
	claim("a", "a")
	if n := commands() - before - 1; n != 1 { // less the first INFO
		t.Errorf("a claim took %d commands, want 1", n)
	}
	claim("b", "a") // a replay of the body under a new id
	claim("a", "a") // GitHub's redelivery under the same id
	if ttl := rdb.PTTL(ctx, "prq:wh:replay:d1").Val(); ttl <= 59*time.Minute || ttl > time.Hour {
		t.Fatalf("the claim's TTL %v, want the window", ttl)
	}
	if err := st.ReleaseDelivery(ctx, "d1", "b"); err != nil { // not b's: nothing changes
		t.Fatal(err)
	}
	claim("c", "a")
	if err := st.ReleaseDelivery(ctx, "d1", "a"); err != nil {
		t.Fatal(err)
	}
	claim("c", "c")
}
