package workers

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/internal/redistest"
)

// laneAt drives one installation's lane script at explicit times: a gap
// of 1000 ms, writers stale after 3000 ms.
type laneAt struct {
	t    *testing.T
	rdb  redis.UniversalClient
	keys []string
}

func newLaneAt(t *testing.T) laneAt {
	t.Helper()
	return laneAt{t: t, rdb: redistest.Shared(t).Client(t), keys: pacerKeys(time.Now().UnixNano())}
}

// take asks for the lane at now (ms); 0: the writer writes.
func (l laneAt) take(now int64, me string, class WriteClass, ahead int64) int64 {
	l.t.Helper()
	wait, err := lane.Run(context.Background(), l.rdb, l.keys, "take", now, me, int(class), 1000, 3000, 50, ahead).Int64()
	if err != nil {
		l.t.Fatal(err)
	}
	return wait
}

func (l laneAt) exists(key string) bool {
	l.t.Helper()
	n, err := l.rdb.Exists(context.Background(), key).Result()
	if err != nil {
		l.t.Fatal(err)
	}
	return n == 1
}

// A writer that finds nobody waiting and the slot free writes without
// joining the line; one that finds the slot taken joins it.
func TestPacerFastPathTakesOnlyAnEmptyLanesFreeSlot(t *testing.T) {
	t.Parallel()
	l := newLaneAt(t)
	now := int64(1_800_000_000_000)
	if w := l.take(now, "a", PublishWrite, 0); w != 0 {
		t.Fatalf("first write on an idle lane waits %d ms", w)
	}
	if l.exists(l.keys[1]) || l.exists(l.keys[2]) {
		t.Fatal("a writer that went at once left a place in the line")
	}
	if w := l.take(now+10, "b", PublishWrite, 0); w != 990 {
		t.Fatalf("a write 10 ms after another waits %d ms, want the rest of the gap (990)", w)
	}
	if !l.exists(l.keys[1]) || !l.exists(l.keys[2]) {
		t.Fatal("a writer that must wait did not join the line")
	}
	if w := l.take(now+1000, "b", PublishWrite, 0); w != 0 {
		t.Fatalf("the waiting writer's turn: waits %d ms", w)
	}
	if l.exists(l.keys[1]) || l.exists(l.keys[2]) {
		t.Fatal("the line is not empty after its only writer wrote")
	}
	// a rate limit's hold keeps even a chat reply back on an empty line
	if err := lane.Run(context.Background(), l.rdb, l.keys, "hold", now+1000, 5000).Err(); err != nil {
		t.Fatal(err)
	}
	if w := l.take(now+2000, "c", ChatWrite, 4000); w != 4000 {
		t.Fatalf("a chat reply during GitHub's hold waits %d ms, want 4000", w)
	}
}

// A writer waiting in the line is never overtaken by one that arrives
// when the slot comes free, whatever their classes: the newcomer joins
// the line, and the two go in class order, the waiting writer first
// among equals (or ahead of a lower class).
func TestPacerFastPathNeverOvertakesAWaitingWriter(t *testing.T) {
	t.Parallel()
	classes := []WriteClass{ChatWrite, PublishWrite, CheckWrite}
	for _, waiting := range classes {
		for _, comer := range classes {
			t.Run(fmt.Sprintf("waiting-%d-newcomer-%d", waiting, comer), func(t *testing.T) {
				t.Parallel()
				l := newLaneAt(t)
				now := int64(1_800_000_000_000)
				if w := l.take(now, "first", PublishWrite, 0); w != 0 {
					t.Fatalf("first write waits %d ms", w)
				}
				// no chat burst: every write waits its gap, so the waiting
				// writer cannot take before the slot frees
				if w := l.take(now+100, "waiting", waiting, 0); w == 0 {
					t.Fatal("a second write inside the gap went at once")
				}
				// the slot is free, and the newcomer asks before the
				// waiting writer asks again
				got := l.take(now+1000, "newcomer", comer, 0)
				if comer >= waiting {
					if got == 0 {
						t.Fatal("the newcomer overtook a writer waiting in the line")
					}
					if w := l.take(now+1001, "waiting", waiting, 0); w != 0 {
						t.Fatalf("the waiting writer's turn: waits %d ms", w)
					}
					if w := l.take(now+1002, "newcomer", comer, 0); w == 0 {
						t.Fatal("the newcomer wrote within a gap of the waiting writer")
					}
					return
				}
				// a higher class goes first: the class order among waiting
				// writers, as before any fast path
				if got != 0 {
					t.Fatalf("a newcomer of a higher class waits %d ms on a free slot", got)
				}
				if w := l.take(now+1001, "waiting", waiting, 0); w == 0 {
					t.Fatal("the waiting writer wrote within a gap of the newcomer")
				}
			})
		}
	}
}
