package llmcall_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/llmcall"
	"github.com/prq-dev/prq/ratelimit"
)

// sentRecorder is admission with its Sents and the ways its settles were
// given recorded.
type sentRecorder struct {
	*admission.Scheduler
	mu    sync.Mutex
	sents int
	ways  []admission.CallWay
}

func (r *sentRecorder) Sent(ctx context.Context, model, id string, after time.Duration) error {
	r.mu.Lock()
	r.sents++
	r.mu.Unlock()
	return r.Scheduler.Sent(ctx, model, id, after)
}

func (r *sentRecorder) SettleCall(ctx context.Context, model, id string, c ratelimit.Cost, way admission.CallWay) error {
	r.mu.Lock()
	r.ways = append(r.ways, way)
	r.mu.Unlock()
	return r.Scheduler.SettleCall(ctx, model, id, c, way)
}

func (r *sentRecorder) seen() (int, []admission.CallWay) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sents, append([]admission.CallWay(nil), r.ways...)
}

// TestCallHoldsItsWrite: a window's call settled soon after its write
// takes the write along to its settle (no Sent of its own), with its
// reply's way; one whose settle comes later than a tenth of the window
// has its write recorded by Sent, and its settle carries only the way.
func TestCallHoldsItsWrite(t *testing.T) {
	t.Parallel()
	rdb := redistest.Shared(t).Client(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("openai-processing-ms", "0")
		fmt.Fprint(w, "{}")
	}))
	t.Cleanup(up.Close)
	for _, c := range []struct {
		name   string
		window time.Duration
		late   bool // settled after the held Sent went
	}{{"settled within the hold", time.Minute, false}, {"settled after it", 100 * time.Millisecond, true}} {
		t.Run(c.name, func(t *testing.T) {
			model := fmt.Sprintf("hold-%d", time.Now().UnixNano())
			b, err := ratelimit.NewBucket(rdb, model, "sk", ratelimit.Limits{RequestsPerPeriod: 1000, TokensPerPeriod: 1_000_000, Period: c.window, Limiter: ratelimit.LimiterWindow})
			if err != nil {
				t.Fatal(err)
			}
			sched, err := admission.New(rdb, map[string]*ratelimit.Bucket{model: b}, nil, nil, admission.Config{}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			adm := &sentRecorder{Scheduler: sched}
			ctx := context.Background()
			if _, err := sched.Register(ctx, admission.Ticket{ID: "j", Queue: "q", Model: model, Class: "paid", Tenant: "1", Tokens: 100}); err != nil {
				t.Fatal(err)
			}
			if a, _, err := sched.Admit(ctx, model, 1); err != nil || len(a) != 1 {
				t.Fatalf("admitted %v: %v", a, err)
			}
			if err := sched.Started(ctx, model, "j"); err != nil {
				t.Fatal(err)
			}
			call := llmcall.New(adm, nil, 0).Begin(ctx, llmcall.Model{Name: model, Keys: 1}, "j")
			req, _ := http.NewRequestWithContext(call.Calling(ctx, ctx), http.MethodPost, up.URL, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			call.Observe(ctx, resp.StatusCode, resp.Header)
			if c.late {
				// the hold is 10 ms: wait for its Sent
				for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
					if n, _ := adm.seen(); n == 1 {
						break
					}
					if time.Now().After(deadline) {
						t.Fatal("the held write's Sent never went")
					}
				}
			}
			call.Settle(ctx, ratelimit.Cost{Requests: 1, Tokens: 50})
			sents, ways := adm.seen()
			if len(ways) != 1 || ways[0].Arrival < 0 {
				t.Fatalf("settles given %+v, want one with the reply's way", ways)
			}
			if c.late != (sents == 1) || c.late != (ways[0].Written < 0) {
				t.Fatalf("%d Sent, the settle given the write %v: want the write recorded once, by Sent only when the settle came late", sents, ways[0].Written)
			}
		})
	}
}

// TestObserveSettleCarriesTheReport: a call observed with its settle
// gives admission the reply's rate-limit headers with the settle, as of
// some moment between its send and its reply's bound on its arrival
// (its first byte, less the provider's processing when it says), and
// the settle lowers the key's bucket to them.
func TestObserveSettleCarriesTheReport(t *testing.T) {
	t.Parallel()
	rdb := redistest.Shared(t).Client(t)
	for _, bounded := range []bool{false, true} {
		t.Run(fmt.Sprint("processing time ", bounded), func(t *testing.T) {
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if bounded {
					w.Header().Set("openai-processing-ms", "0")
				}
				w.Header().Set("x-ratelimit-remaining-tokens", "1000")
				fmt.Fprint(w, "{}")
			}))
			t.Cleanup(up.Close)
			model := fmt.Sprintf("report-%d", time.Now().UnixNano())
			b, err := ratelimit.NewBucket(rdb, model, "sk", ratelimit.Limits{RequestsPerPeriod: 1000, TokensPerPeriod: 1_000_000, Period: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			sched, err := admission.New(rdb, map[string]*ratelimit.Bucket{model: b}, nil, nil, admission.Config{}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			adm := &sentRecorder{Scheduler: sched}
			ctx := context.Background()
			if _, err := sched.Register(ctx, admission.Ticket{ID: "j", Queue: "q", Model: model, Class: "paid", Tenant: "1", Tokens: 100}); err != nil {
				t.Fatal(err)
			}
			if a, _, err := sched.Admit(ctx, model, 1); err != nil || len(a) != 1 {
				t.Fatalf("admitted %v: %v", a, err)
			}
			call := llmcall.New(adm, nil, 0).Begin(ctx, llmcall.Model{Name: model, Keys: 1}, "j")
			req, _ := http.NewRequestWithContext(call.Calling(ctx, ctx), http.MethodPost, up.URL, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			call.ObserveSettle(ctx, resp.StatusCode, resp.Header, ratelimit.Cost{Requests: 1, Tokens: 50})
			_, ways := adm.seen()
			if len(ways) != 1 || ways[0].Sync == nil {
				t.Fatalf("settles given %+v, want one carrying the report", ways)
			}
			r := ways[0].Sync
			if r.Remaining.Tokens != 1000 || r.Written.IsZero() || r.Latest.Before(r.Written) || r.Latest.After(time.Now()) {
				t.Fatalf("report %+v: want 1000 tokens remaining, as of a moment between the send and now", r)
			}
			avail, _, err := b.Available(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if avail.Tokens > 500_000 {
				t.Fatalf("the bucket holds %d tokens: not lowered to the report", avail.Tokens)
			}
		})
	}
}
