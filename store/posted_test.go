package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
)

// PostedEach reads several posted marks at once: 0 where none.
func TestPostedEach(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := store.New(redistest.Shared(t).Client(t), jobs.TierFree)
	pr := jobs.PR{Installation: 1, Owner: "o", Repo: "posted-each", Number: int(time.Now().UnixNano() % 1_000_000)}
	if err := st.SetPosted(ctx, pr, "b", 7); err != nil {
		t.Fatal(err)
	}
	got, err := st.PostedEach(ctx, pr, "a", "b")
	if err != nil || len(got) != 2 || got[0] != 0 || got[1] != 7 {
		t.Fatalf("PostedEach = %v (%v), want [0 7]", got, err)
	}
}
