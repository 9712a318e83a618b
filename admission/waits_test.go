package admission_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/ratelimit"
)

// TestWaitsKeepsTheNewest: the admission waits list keeps the newest
// 2000 (admit trims it only when its push made it longer).
func TestWaitsKeepsTheNewest(t *testing.T) {
	ctx := context.Background()
	model := fmt.Sprintf("m-waits-%d", time.Now().UnixNano())
	l := ratelimit.Limits{RequestsPerPeriod: 100000, TokensPerPeriod: 10_000_000, Period: time.Second}
	s, b, _ := windowScheduler(t, model, l, admission.Config{})
	rdb := redistest.Shared(t).Client(t)
	waits := b.Tag() + ":adm:waits"
	for _, step := range []struct {
		n    int
		want int64
	}{{1500, 1500}, {600, 2000}, {10, 2000}} {
		n := step.n
		registerN(t, s, model, fmt.Sprintf("w%d-", n), n, 10)
		for left := n; left > 0; {
			a, _, err := s.Admit(ctx, model, left)
			if err != nil {
				t.Fatal(err)
			}
			if len(a) == 0 {
				t.Fatalf("admitted none of %d", left)
			}
			left -= len(a)
		}
		if got := rdb.LLen(ctx, waits).Val(); got != step.want {
			t.Fatalf("after admitting %d: %d waits kept, want %d", n, got, step.want)
		}
	}
}
