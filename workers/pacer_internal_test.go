package workers

import (
	"context"
	"fmt"
	"maps"
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

// leave gives up a writer's place at now (ms).
func (l laneAt) leave(now int64, me string) {
	l.t.Helper()
	if err := lane.Run(context.Background(), l.rdb, l.keys, "leave", now, me).Err(); err != nil {
		l.t.Fatal(err)
	}
}

// waiting says whether the lane's mark says someone may be in the line;
// while it does, it lives at least as long as the line.
func (l laneAt) waiting() bool {
	l.t.Helper()
	ctx := context.Background()
	mark, err := l.rdb.PTTL(ctx, l.keys[4]).Result()
	if err != nil {
		l.t.Fatal(err)
	}
	line, err := l.rdb.PTTL(ctx, l.keys[1]).Result() // read second: it can only be shorter
	if err != nil {
		l.t.Fatal(err)
	}
	if mark == -2 { // no mark
		if line != -2 {
			l.t.Fatalf("a line (TTL %v) without the mark that someone waits", line)
		}
		return false
	}
	if mark < 0 || line >= 0 && mark < line {
		l.t.Fatalf("the mark's TTL %v, the line's %v: the mark must expire with the line or after it", mark, line)
	}
	return true
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

// A take on an empty lane with its slot free costs Redis 4 commands:
// the script, its clock, one MGET of the slot, the hold and the line's
// mark, and the SET booking the slot.
func TestPacerFastPathCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.New(t).Client(t)
	if err := lane.Load(ctx, rdb).Err(); err != nil { // and the connection's HELLO
		t.Fatal(err)
	}
	p := NewPacer(rdb, nil)
	var err error
	got := commandsOf(t, rdb, func() {
		err = p.Do(ctx, time.Now().UnixNano(), PublishWrite, func() error { return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int64{"evalsha": 1, "time": 1, "mget": 1, "set": 1}; !maps.Equal(got, want) {
		t.Fatalf("a free slot on an empty lane ran %v, want %v", got, want)
	}
}

// The mark is set while anyone waits in the line and goes when the line
// empties: by a writer's turn, by a writer leaving.
func TestPacerMarksTheLineWhileAnyoneWaits(t *testing.T) {
	t.Parallel()
	l := newLaneAt(t)
	now := int64(1_800_000_000_000)
	if w := l.take(now, "a", PublishWrite, 0); w != 0 || l.waiting() {
		t.Fatalf("a free slot on an idle lane: waits %d ms, marked %v", w, l.waiting())
	}
	for i, me := range []string{"b", "c", "d"} {
		if w := l.take(now+10+int64(i), me, PublishWrite, 0); w == 0 {
			t.Fatalf("%s went within the gap", me)
		}
		if !l.waiting() {
			t.Fatalf("%s waits in the line, and the lane is not marked", me)
		}
	}
	// b's turn: c and d still wait
	if w := l.take(now+1000, "b", PublishWrite, 0); w != 0 {
		t.Fatalf("b's turn: waits %d ms", w)
	}
	if !l.waiting() {
		t.Fatal("c and d wait, and the lane is not marked")
	}
	l.leave(now+1001, "c") // d still waits
	if !l.waiting() {
		t.Fatal("d waits, and the lane is not marked")
	}
	if w := l.take(now+2000, "d", PublishWrite, 0); w != 0 {
		t.Fatalf("d's turn: waits %d ms", w)
	}
	if l.waiting() || l.exists(l.keys[1]) || l.exists(l.keys[2]) {
		t.Fatal("the line emptied by its last writer's turn and is still marked or kept")
	}
	// a writer that joins and leaves takes the mark with it
	if w := l.take(now+2001, "e", ChatWrite, 0); w == 0 || !l.waiting() {
		t.Fatalf("e within the gap: waits %d ms, marked %v", w, l.waiting())
	}
	l.leave(now+2002, "e")
	if l.waiting() {
		t.Fatal("the line emptied by a writer leaving is still marked")
	}
	if w := l.take(now+3000, "f", PublishWrite, 0); w != 0 {
		t.Fatalf("a free slot after the line emptied: waits %d ms", w)
	}
}

// A mark left behind with no one in the line (the line expired, its
// only writer stopped asking) costs one take through the line, which
// finds it empty, takes the free slot and clears the mark.
func TestPacerClearsAStaleMark(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		gone func(l laneAt) // what becomes of the waiting writer
		at   int64          // when the newcomer asks, after the writer joined
	}{
		{"line expired", func(l laneAt) {
			if err := l.rdb.Del(ctx, l.keys[1], l.keys[2]).Err(); err != nil { // as they would expire
				t.Fatal(err)
			}
		}, 1000},
		{"writer stopped asking", func(laneAt) {}, 3001 + 100}, // stale after 3000 ms
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := newLaneAt(t)
			l.t = t
			now := int64(1_800_000_000_000)
			if w := l.take(now, "first", PublishWrite, 0); w != 0 {
				t.Fatalf("first write waits %d ms", w)
			}
			if w := l.take(now+100, "dead", ChatWrite, 0); w == 0 || !l.waiting() {
				t.Fatalf("a writer within the gap: waits %d ms, marked %v", w, l.waiting())
			}
			tc.gone(l)
			if w := l.take(now+100+tc.at, "newcomer", CheckWrite, 0); w != 0 {
				t.Fatalf("a free slot with nobody live in the line: waits %d ms", w)
			}
			if l.waiting() || l.exists(l.keys[1]) || l.exists(l.keys[2]) {
				t.Fatal("the line is empty and still marked or kept")
			}
			// and the next free slot is the fast path's again
			if w := l.take(now+100+tc.at+1000, "next", CheckWrite, 0); w != 0 || l.exists(l.keys[1]) {
				t.Fatalf("the next free slot: waits %d ms, joined the line: %v", w, l.exists(l.keys[1]))
			}
		})
	}
}
