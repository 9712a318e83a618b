package workers

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
)

// An installation's state is read once per installsFor by a worker
// process, not once per job: a change shows after that, at the latest;
// a token refused by GitHub shows at once.
func TestInstallStateCached(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Shared(t).Client(t)
	st := store.New(rdb, jobs.TierFree)
	now := time.Unix(1_800_000_000, 0)
	c := newInstallCache(st, installsFor, func() time.Time { return now })
	const inst = 9701
	if why, err := c.Disabled(ctx, inst); err != nil || why != "" {
		t.Fatalf("a new installation: %q (%v), want enabled", why, err)
	}
	if err := st.SetInstallation(ctx, inst, "acme", 0, "deleted"); err != nil {
		t.Fatal(err)
	}
	if why, _ := c.Disabled(ctx, inst); why != "" {
		t.Fatalf("within %s of the last reading: %q, want the answer kept", installsFor, why)
	}
	now = now.Add(installsFor)
	if why, _ := c.Disabled(ctx, inst); why != store.DisabledDeleted {
		t.Fatalf("%s later: %q, want %q", installsFor, why, store.DisabledDeleted)
	}
	if err := st.SetInstallation(ctx, inst, "acme", 0, "created"); err != nil {
		t.Fatal(err)
	}
	now = now.Add(installsFor)
	if why, _ := c.Disabled(ctx, inst); why != "" {
		t.Fatalf("installed again: %q, want enabled", why)
	}
	if err := c.MarkTokenRefused(ctx, inst, "suspended"); err != nil {
		t.Fatal(err)
	}
	if why, _ := c.Disabled(ctx, inst); why != store.DisabledTokenRefused {
		t.Fatalf("right after a refused token: %q, want %q", why, store.DisabledTokenRefused)
	}
}

// A file job reads its installation's record with its other checks
// (ReadFileJob) only when the gate has no answer without it, and the
// gate's cache keeps what that read found, aged from when it was asked;
// a state other than the store's record is asked apart, as check asks
// it; a gate without state lets every job run.
func TestGateAsksWhatTheJobsReadCannotAnswer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := store.New(redistest.Shared(t).Client(t), jobs.TierFree)
	now := time.Unix(1_800_000_000, 0)
	g := installGate{state: newInstallCache(st, installsFor, func() time.Time { return now })}
	const inst = 9702
	q := g.ask(ctx, inst)
	if !q.fold || !q.at.Equal(now) {
		t.Fatalf("nothing kept yet: %+v, want the record read with the job's checks, asked now", q)
	}
	now = now.Add(time.Second) // a slow read
	if got := g.learned(inst, q, store.DisabledDeleted, nil); got.why != store.DisabledDeleted || got.err != nil || got.fold {
		t.Fatalf("learned %+v, want the answer read", got)
	}
	if q := g.ask(ctx, inst); q.fold || q.why != store.DisabledDeleted {
		t.Fatalf("after the read: %+v, want %q kept", q, store.DisabledDeleted)
	}
	now = now.Add(installsFor - time.Second) // installsFor after the question
	if q := g.ask(ctx, inst); !q.fold {
		t.Fatalf("%s after it was asked, the answer is still kept: %+v", installsFor, q)
	}
	failed := errors.New("no Redis")
	if got := g.learned(inst, g.ask(ctx, inst), "", failed); !errors.Is(got.err, failed) {
		t.Fatalf("learned %+v, want the read's error", got)
	}
	if q := g.ask(ctx, inst); !q.fold {
		t.Fatalf("a failed read was kept as an answer: %+v", q)
	}
	if q := (installGate{state: st}).ask(ctx, inst); !q.fold {
		t.Fatalf("a gate on the store without a cache: %+v, want every job's read to carry the record", q)
	}
	if q := (installGate{state: suspendedAll{st}}).ask(ctx, inst); q.fold || q.why != store.DisabledSuspended {
		t.Fatalf("a state of its own: %+v, want it asked apart (suspended)", q)
	}
	if q := (installGate{}).ask(ctx, inst); q.fold || q.why != "" || q.err != nil {
		t.Fatalf("a gate without state: %+v, want every installation running", q)
	}
}

// suspendedAll is an InstallState of an embedder's own: every
// installation suspended.
type suspendedAll struct{ *store.Store }

func (suspendedAll) Disabled(context.Context, int64) (string, error) {
	return store.DisabledSuspended, nil
}
