package workers

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prq-dev/prq/internal/redistest"
)

// A job's first run is fresh (nothing of an earlier run to read: no
// reply to repair); a later run, a run after a wait for a twin, and a
// run after its budget was started again are not.
func TestFirstRunFresh(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := NewAttempts(redistest.Shared(t).Client(t))
	id := fmt.Sprintf("fresh-%d", time.Now().UnixNano())
	budget := RetryBudget{MaxAttempts: 10, MaxAge: time.Hour}
	now := time.UnixMilli(1_800_000_000_000)
	run := func() attempt {
		t.Helper()
		at, err := budgeted(ctx, a, id, 0, budget, now)
		if err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Second)
		return at
	}
	if at := run(); !at.fresh || at.n != 1 {
		t.Fatalf("first run: fresh %v, n %d; want fresh, 1", at.fresh, at.n)
	}
	if at := run(); at.fresh {
		t.Fatal("second run: fresh")
	}
	if _, err := a.ReuseWait(ctx, id, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := a.ReuseWait(ctx, id, time.Hour); err != nil {
		t.Fatal(err)
	}
	if at := run(); at.fresh || at.n != 1 {
		t.Fatalf("after two waits: fresh %v, n %d; want not fresh, 1", at.fresh, at.n)
	}
	if err := a.Rebase(ctx, id, now, time.Hour); err != nil {
		t.Fatal(err)
	}
	if at := run(); at.fresh {
		t.Fatal("after a rebase: fresh")
	}
}
