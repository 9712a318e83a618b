package admission_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/ratelimit"
)

// steppedClock is a clock a test moves.
type steppedClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *steppedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *steppedClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// A waiting pull request's position counts its own tenant's tickets
// ahead of it, other tenants' turns and the other tiers by weight; it
// falls as work is admitted, and with the admission rate measured on a
// stepped clock, so does the estimate.
func TestPositionFallsAsWorkIsAdmitted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Shared(t).Client(t)
	model := fmt.Sprintf("pos-%d", time.Now().UnixNano())
	b, err := ratelimit.NewBucket(rdb, model, "sk", ratelimit.Limits{RequestsPerPeriod: 100000, TokensPerPeriod: 100000000, Period: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	clk := &steppedClock{now: time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)}
	s, err := admission.New(rdb, map[string]*ratelimit.Bucket{model: b}, nil, nil, admission.Config{NowFunc: clk.Now}, discard)
	if err != nil {
		t.Fatal(err)
	}
	register := func(id, class, tenant string, seq int64, i int) {
		t.Helper()
		tk := admission.Ticket{ID: id, Queue: class, Model: model, Class: class, Tenant: tenant, PRSeq: seq, Index: i, Total: 10, Tokens: 100}
		if _, err := s.Register(ctx, tk); err != nil {
			t.Fatal(err)
		}
	}
	// tenant 1's older pull request (10 jobs), then the one we watch (3)
	for i := range 10 {
		register(fmt.Sprintf("older-%d", i), "paid", "1", 1, i)
	}
	var mine []string
	for i := range 3 {
		id := fmt.Sprintf("mine-%d", i)
		mine = append(mine, id)
		register(id, "paid", "1", 2, i)
	}
	// tenant 2 in paid (4 jobs), tenant 3 in trial (6)
	for i := range 4 {
		register(fmt.Sprintf("two-%d", i), "paid", "2", 1, i)
	}
	for i := range 6 {
		register(fmt.Sprintf("three-%d", i), "trial", "3", 1, i)
	}
	pos := func() admission.Position {
		t.Helper()
		p, err := s.Position(ctx, model, append(mine, "unknown-id"))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	p0 := pos()
	// 10 of its own flow; tenant 2's 4 (as many turns as it has, up to
	// 11); trial by weight 2 of 8: (10+4)*2/8 = 3 of its 6
	if p0.Found != 3 || p0.Ahead != 17 || p0.Class != "paid" || p0.Rate != 0 || p0.ETA() != 0 {
		t.Fatalf("first position %+v, want 3 found, 17 ahead in paid, no rate yet", p0)
	}
	clk.Add(10 * time.Second)
	if adm, _, err := s.Admit(ctx, model, 5); err != nil || len(adm) != 5 {
		t.Fatalf("admit: %v %v", adm, err)
	}
	p1 := pos()
	if p1.Ahead >= p0.Ahead || p1.Rate != 0.5 || p1.ETA() <= 0 {
		t.Fatalf("after 5 admissions in 10 s: %+v, want fewer ahead than %d, 0.5 admissions/s", p1, p0.Ahead)
	}
	clk.Add(10 * time.Second)
	if adm, _, err := s.Admit(ctx, model, 5); err != nil || len(adm) != 5 {
		t.Fatalf("admit: %v %v", adm, err)
	}
	p2 := pos()
	if p2.Ahead >= p1.Ahead || p2.ETA() >= p1.ETA() || p2.Found != 3 {
		t.Fatalf("after 5 more: %+v (ETA %s), want fewer ahead and a sooner estimate than %+v (ETA %s)", p2, p2.ETA(), p1, p1.ETA())
	}
	// once one of its jobs is admitted, fewer of them wait
	for range 20 {
		if pos().Found < 3 {
			return
		}
		clk.Add(time.Second)
		if _, _, err := s.Admit(ctx, model, 1); err != nil {
			t.Fatal(err)
		}
	}
	t.Fatalf("the watched jobs never left the line: %+v", pos())
}
