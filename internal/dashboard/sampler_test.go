package dashboard

import (
	"context"
	"testing"
	"time"

	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/ratelimit"
)

// counters is a Source whose admission counters a test sets; only what
// the sampler reads is implemented.
type counters struct {
	Source
	b       *ratelimit.Bucket
	in, adm int64
}

func (c *counters) Models() []string                        { return []string{"m"} }
func (c *counters) Bucket(string) (*ratelimit.Bucket, bool) { return c.b, true }
func (c *counters) Tokens(context.Context, string) (in, adm map[string]int64, err error) {
	return map[string]int64{"paid": c.in}, map[string]int64{"paid": c.adm}, nil
}

// TestSamplerAveragesOverThePeriod: the chart's points are averages over
// the limit's period, drawn only once a whole period is read; a full
// bucket's saving raises Allowed above Limit (with no tokens given back,
// Admitted stays under it); a steady flow at the limit reads as the
// limit.
func TestSamplerAveragesOverThePeriod(t *testing.T) {
	rdb := redistest.New(t).Client(t)
	b, err := ratelimit.NewBucket(rdb, "m", "k", ratelimit.Limits{RequestsPerPeriod: 1000, TokensPerPeriod: 600, Period: 6 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	src := &counters{b: b}
	smp := newSampler(src)
	clock := time.Unix(1_000_000, 0)
	smp.nowFunc = func() time.Time { return clock }
	ctx := context.Background()
	step := func(in, adm int64) {
		clock = clock.Add(time.Second)
		src.in += in
		src.adm += adm
		smp.tick(ctx)
	}
	smp.tick(ctx)
	// the whole saving (600 tokens) in the first second, then 100 a second
	step(1000, 600)
	for i := 0; i < 4; i++ {
		step(100, 100)
	}
	if got := len(smp.snapshot()["m"]); got != 0 {
		t.Fatalf("%d points before a whole period was read, want none", got)
	}
	step(100, 100)
	ser := smp.snapshot()["m"]
	if len(ser) != 1 {
		t.Fatalf("%d points after one period, want 1", len(ser))
	}
	first := ser[0]
	// 1100 tokens over 6s, under the limit (100/s) plus the 600 saved
	if first.Limit != 100 || first.Admitted != 1100.0/6 || first.Allowed != 200 || first.Window != 6 {
		t.Errorf("after the saving was spent: %+v, want limit 100, admitted 183.3, allowed 200 over 6s", first)
	}
	for i := 0; i < 6; i++ {
		step(100, 100)
	}
	ser = smp.snapshot()["m"]
	last := ser[len(ser)-1]
	if last.Admitted != 100 || last.Incoming != 100 || last.ByClass["paid"] != 100 {
		t.Errorf("a steady flow at the limit: %+v, want admitted and incoming 100", last)
	}
	for _, s := range ser {
		if s.Admitted > s.Allowed {
			t.Errorf("admitted %.1f over allowed %.1f", s.Admitted, s.Allowed)
		}
	}
}
