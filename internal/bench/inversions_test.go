package bench

import (
	"testing"
	"time"
)

func TestInversionsCountOnlyWhatChatsCapForbids(t *testing.T) {
	chat := func(created, at, tokens int64) callRecord {
		return callRecord{Class: "chat", Model: "m", Created: created, At: at, Tokens: tokens}
	}
	batch := func(created, at, tokens int64) callRecord {
		return callRecord{Class: "paid", Model: "m", Created: created, At: at, Tokens: tokens}
	}
	for _, tc := range []struct {
		name  string
		cap   float64
		calls []callRecord
		want  int
	}{
		{"batch while no chat waits", 0.5, []callRecord{chat(0, 10, 100), batch(0, 20, 100)}, 0},
		{"uncapped chat: any batch while it waits", 1, []callRecord{chat(0, 30, 100), batch(0, 10, 100), batch(0, 20, 100)}, 2},
		{"capped: batch's first turn while chat waits is its share", 0.5, []callRecord{chat(0, 30, 100), batch(0, 10, 100)}, 0},
		{"capped: a second batch ahead of chat's share", 0.5, []callRecord{chat(0, 30, 100), batch(0, 10, 100), batch(0, 20, 100)}, 1},
		{"capped: batch and chat take turns", 0.5, []callRecord{chat(0, 5, 100), chat(0, 30, 100), batch(0, 10, 100), batch(0, 20, 100)}, 0},
		{"another model's chat does not wait for this batch", 1, []callRecord{{Class: "chat", Model: "other", Created: 0, At: 30}, batch(0, 10, 100)}, 0},
		{"a batch job past the aging bound goes first", 1, []callRecord{chat(0, 700_000, 100), batch(0, 650_000, 100)}, 0},
		{"a refused chat call is not a waiting chat", 1, []callRecord{{Class: "chat", Model: "m", Created: 0, At: 30, Outcome: "429"}, batch(0, 10, 100)}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := inversions(tc.calls, tc.cap, 10*time.Minute); got != tc.want {
				t.Fatalf("inversions %d, want %d", got, tc.want)
			}
		})
	}
}
