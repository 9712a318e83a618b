package admission

import (
	"context"
	"testing"
	"time"

	"github.com/prq-dev/prq/internal/redistest"
)

// TestAnnounceAlone: a loop whose announcement reached nobody else
// publishes the next ones at most once a second, and hears them itself
// meanwhile (what it covered counts as covered); another process's
// announcement ends the quiet.
func TestAnnounceAlone(t *testing.T) {
	t.Parallel()
	rdb := redistest.New(t).Client(t)
	ctx := context.Background()
	w := newWakes("me")
	w.hear("t|paid|100") // a ticket at µs 100
	publishes := func() int64 { return commandCalls(t, rdb, "publish") }
	before := publishes()
	w.announce(ctx, rdb, "ch", announcement("me", 200, 0, true, 0))
	if n := publishes() - before; n != 1 {
		t.Fatalf("the first announcement: %d PUBLISH, want 1", n)
	}
	w.hear("t|paid|300")
	w.announce(ctx, rdb, "ch", announcement("me", 400, 0, true, 0))
	if n := publishes() - before; n != 1 {
		t.Fatalf("alone, a second announcement within a second: %d PUBLISH in all, want still 1", n)
	}
	if any, _, _ := w.uncovered(); any {
		t.Fatal("the unpublished announcement did not cover the ticket before it")
	}
	w.hear(announcement("other", 500, 0, true, 0)) // another process attempts
	w.announce(ctx, rdb, "ch", announcement("me", 600, 0, true, 0))
	if n := publishes() - before; n != 2 {
		t.Fatalf("after another process announced: %d PUBLISH in all, want 2", n)
	}
	w.mu.Lock()
	w.announced = time.Now().Add(-2 * announceAlone)
	w.mu.Unlock()
	w.announce(ctx, rdb, "ch", announcement("me", 700, 0, true, 0))
	if n := publishes() - before; n != 3 {
		t.Fatalf("alone, a second after the last: %d PUBLISH in all, want 3", n)
	}
}
