package workers

import (
	"context"
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

// A file job reads its installation's state with its other checks
// (ReadFileJob) only when the gate keeps no fresh answer, and the gate
// keeps what that read found; a gate without a cache reads every time,
// one without state never.
func TestGateKnowsWhatTheJobsReadFound(t *testing.T) {
	t.Parallel()
	st := store.New(redistest.Shared(t).Client(t), jobs.TierFree)
	now := time.Unix(1_800_000_000, 0)
	g := installGate{state: newInstallCache(st, installsFor, func() time.Time { return now })}
	const inst = 9702
	if _, ok := g.known(inst); ok {
		t.Fatal("nothing read yet, yet the gate knows the installation")
	}
	g.learned(inst, store.DisabledDeleted)
	if why, ok := g.known(inst); !ok || why != store.DisabledDeleted {
		t.Fatalf("after a read: %q (known %v), want %q kept", why, ok, store.DisabledDeleted)
	}
	now = now.Add(installsFor)
	if _, ok := g.known(inst); ok {
		t.Fatalf("%s after the read, the answer is still kept", installsFor)
	}
	if _, ok := (installGate{state: st}).known(inst); ok {
		t.Fatal("a gate without a cache knows an installation without reading it")
	}
	installGate{state: st}.learned(inst, store.DisabledDeleted) // nowhere to keep it: a no-op
	if why, ok := (installGate{}).known(inst); !ok || why != "" {
		t.Fatalf("a gate without state: %q (known %v), want every installation running", why, ok)
	}
}
