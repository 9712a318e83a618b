package admission_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/ratelimit"
)

// TestSettleSyncsAsTheSyncDid: a settle given the reply's headers
// (CallWay.Sync) leaves the key's state as the bucket's own sync
// (Bucket.SyncBetween) followed by the settle did, field for field, for
// a token bucket and a window (the report as of some moment between the
// write and the reply's bound), and still lowers the bucket when the
// reservation is gone.
func TestSettleSyncsAsTheSyncDid(t *testing.T) {
	for _, limiter := range []ratelimit.Limiter{ratelimit.LimiterBucket, ratelimit.LimiterWindow, ratelimit.LimiterAuto} {
		t.Run(string(limiter), func(t *testing.T) {
			ctx := context.Background()
			l := ratelimit.Limits{RequestsPerPeriod: 100000, TokensPerPeriod: 1000, Period: time.Second, Limiter: limiter}
			h := http.Header{}
			h.Set("x-ratelimit-limit-tokens", "1000")
			h.Set("x-ratelimit-remaining-tokens", "150")
			const age, upto = 300 * time.Millisecond, 100 * time.Millisecond
			way := admission.CallWay{Written: -1, Arrival: 40 * time.Millisecond}
			states := map[bool]map[string]string{}
			for _, folded := range []bool{false, true} {
				model := fmt.Sprintf("m-settlesync-%s-%v-%d", limiter, folded, time.Now().UnixNano())
				s, b, clk := windowScheduler(t, model, l, admission.Config{})
				b.NowFunc = clk.now
				for _, id := range []string{"a", "b"} {
					reg(t, s, admission.Ticket{ID: id, Model: model, Class: "chat", Tenant: "1", Tokens: 300})
				}
				if a, _, _ := s.Admit(ctx, model, 2); len(a) != 2 {
					t.Fatalf("admitted %d of 2", len(a))
				}
				clk.advance(50 * time.Millisecond)
				for _, id := range []string{"a", "b"} {
					if err := s.Calling(ctx, model, id); err != nil {
						t.Fatal(err)
					}
				}
				clk.advance(400 * time.Millisecond)
				settle := func(id string) error {
					cost := ratelimit.Cost{Requests: 1, Tokens: 120}
					if !folded {
						if _, err := b.SyncBetween(ctx, http.StatusOK, h, age, upto); err != nil {
							t.Fatal(err)
						}
						return s.SettleCall(ctx, model, id, cost, way)
					}
					now := clk.now()
					rep, _, err := b.Report(ctx, http.StatusOK, h, now.Add(-age), now.Add(-upto))
					if err != nil || rep == nil {
						t.Fatalf("report %v, %v", rep, err)
					}
					w := way
					w.Sync = rep
					return s.SettleCall(ctx, model, id, cost, w)
				}
				if err := settle("a"); err != nil {
					t.Fatal(err)
				}
				clk.advance(10 * time.Millisecond)
				states[folded] = map[string]string{"after a": stateOf(t, b)}
				// settled already: no reservation, the report still lowers
				h.Set("x-ratelimit-remaining-tokens", "20")
				if err := settle("a"); err == nil {
					t.Fatal("a settled twice")
				}
				states[folded]["again"] = stateOf(t, b)
				h.Set("x-ratelimit-remaining-tokens", "150")
			}
			for k, want := range states[false] {
				if got := states[true][k]; got != want {
					t.Errorf("%s: the folded sync left\n  %s\nthe sync and settle\n  %s", k, got, want)
				}
			}
			if states[true]["after a"] == states[true]["again"] {
				t.Error("a report without a reservation did not lower the bucket")
			}
		})
	}
}

// stateOf is b's state hash, its fields sorted.
func stateOf(t *testing.T, b *ratelimit.Bucket) string {
	t.Helper()
	m, err := redistest.Shared(t).Client(t).HGetAll(context.Background(), b.StateKey()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(m) // fmt sorts a map's keys
}
