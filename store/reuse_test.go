package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
)

// A prompt is claimed by the first job that finds no result: its twins
// see the claim (and wait), its own retry holds it still; once its
// result is kept, every twin reads the result and none claims.
func TestReusableOrClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Shared(t).Client(t)
	st := store.New(rdb, jobs.TierFree)
	key := fmt.Sprintf("m:%d", time.Now().UnixNano())
	claim := func(id string, wantFound, wantMine bool) store.Result {
		t.Helper()
		r, found, mine, err := st.ReusableOrClaim(ctx, key, id)
		if err != nil || found != wantFound || mine != wantMine {
			t.Fatalf("%s: found=%v mine=%v (%v), want found=%v mine=%v", id, found, mine, err, wantFound, wantMine)
		}
		return r
	}
	claim("job-1", false, true)
	claim("job-2", false, false) // a twin: job-1 answers it
	claim("job-1", false, true)  // job-1 again (a retry): still its own
	if _, ok, err := st.Reusable(ctx, key); err != nil || ok {
		t.Fatalf("claimed, no result: reusable %v (%v), want none", ok, err)
	}
	if ttl := rdb.PTTL(ctx, "prq:reuse:"+key).Val(); ttl <= 0 || ttl > 20*time.Minute {
		t.Fatalf("the claim's TTL %v, want at most 20 min", ttl)
	}
	if err := st.SaveReusable(ctx, key, store.Result{Kind: jobs.KindSummary, Text: "Adds b."}); err != nil {
		t.Fatal(err)
	}
	if r := claim("job-2", true, false); r.Text != "Adds b." {
		t.Fatalf("a twin after the save: %+v, want the kept summary", r)
	}
	if r, ok, err := st.Reusable(ctx, key); err != nil || !ok || r.Text != "Adds b." {
		t.Fatalf("after the save: %+v %v (%v), want the kept summary", r, ok, err)
	}
	if ttl := rdb.PTTL(ctx, "prq:reuse:"+key).Val(); ttl <= 20*time.Minute {
		t.Fatalf("the kept result's TTL %v, want the result's own", ttl)
	}
	// an unreadable value: as if absent, the job pays (and its result
	// replaces it)
	rdb.Set(ctx, "prq:reuse:"+key, "{not json", time.Hour)
	claim("job-3", false, true)
}
