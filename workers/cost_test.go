package workers_test

import (
	"context"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/llm"
	"github.com/prq-dev/prq/llmcall"
	"github.com/prq-dev/prq/ratelimit"
	"github.com/prq-dev/prq/workers"
)

// A priced model's call is counted in dollars by model, tier and lane
// and for its installation, from its usage with the cached part at the
// cached price, and its result keeps the cost; a model without prices
// counts nothing.
func TestCallCost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	type spent struct {
		model, tier, lane string
		inst              int64
		dollars           float64
	}
	for _, tc := range []struct {
		name   string
		prices llm.Prices
		want   float64
	}{
		{"priced", llm.Prices{Input: 2.50, CachedInput: 1.25, Output: 10}, (60*2.50 + 40*1.25 + 20*10) / 1e6},
		{"unpriced", llm.Prices{}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var got []spent
			st, adm, q := newStore(t), &fakeAdmission{}, &fakeQueue{}
			model := &fakeLLM{CompleteFunc: func(llm.Request) (llm.Response, error) {
				return llm.Response{Text: "Adds b.", PromptTokens: 100, CachedTokens: 40, OutputTokens: 20}, nil
			}}
			caller, err := workers.NewCaller(workers.CallerConfig{LLM: model, Ledger: adm, Requeue: adm, Provider: adm,
				CostFunc: func(m, tier, lane string, inst int64, d float64) {
					mu.Lock()
					defer mu.Unlock()
					got = append(got, spent{m, tier, lane, inst, d})
				}})
			if err != nil {
				t.Fatal(err)
			}
			pr := testPR(t, 251)
			_, task := plannedFile(t, st, pr, jobs.KindSummary)
			models := map[string]workers.Model{"gpt-4o-mini": {Model: llmcall.Model{Name: "gpt-4o-mini", Prices: tc.prices}}}
			w, err := workers.NewFileWorker(workers.FileWorkerConfig{Attempts: newAttempts(t), Store: st, Ledger: adm, Caller: caller, Queue: q, Models: models, Repairs: st, Requeue: adm})
			if err != nil {
				t.Fatal(err)
			}
			if err := w.ProcessTask(ctx, task); err != nil {
				t.Fatal(err)
			}
			results, err := st.Results(ctx, pr, "h1")
			if err != nil || len(results) != 1 || math.Abs(results[0].Cost-tc.want) > 1e-12 {
				t.Fatalf("results %+v (%v), want the cost %.9f kept", results, err, tc.want)
			}
			mu.Lock()
			defer mu.Unlock()
			if tc.want == 0 {
				if len(got) != 0 {
					t.Errorf("an unpriced model counted %+v", got)
				}
				return
			}
			if len(got) != 1 || got[0].model != "gpt-4o-mini" || got[0].tier != "paid" || got[0].lane != workers.LaneSync || got[0].inst != pr.Installation ||
				math.Abs(got[0].dollars-tc.want) > 1e-12 {
				t.Errorf("counted %+v, want one %.9f for gpt-4o-mini, paid, sync, installation %d", got, tc.want, pr.Installation)
			}
		})
	}
}

// A tier's quota in dollars reserves each call's input and output cap
// at the model's prices: the output asked for is cut to what is left,
// the quota is settled with the call's cost, and a tenant whose dollars
// are spent gets no call.
func TestDollarQuota(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	qu, err := ratelimit.NewQuota(redistest.Shared(t).Client(t), ratelimit.QuotaConfig{})
	if err != nil {
		t.Fatal(err)
	}
	prices := llm.Prices{Input: 0.15, CachedInput: 0.075, Output: 0.60} // 150 and 600 nano-dollars a token
	models := map[string]workers.Model{"gpt-4o-mini": {Model: llmcall.Model{Name: "gpt-4o-mini", Prices: prices}}}
	for _, tc := range []struct {
		name    string
		inst    int64
		dollars float64
		called  bool
	}{
		// at most 2,000 input tokens: between 400 and 900 output tokens are left
		{"capped", 261, (400*600 + 2000*150) / 1e9, true},
		{"spent", 262, 1000 / 1e9, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var asked int64
			st, adm, q := newStore(t), &fakeAdmission{}, &fakeQueue{}
			model := &fakeLLM{CompleteFunc: func(r llm.Request) (llm.Response, error) {
				asked = r.MaxOutput
				return llm.Response{Text: "Adds b.", PromptTokens: 100, CachedTokens: 40, OutputTokens: 20}, nil
			}}
			caller, err := workers.NewCaller(workers.CallerConfig{LLM: model, Ledger: adm, Requeue: adm, Provider: adm, Quota: qu, QuotaSkip: true,
				Tiers: map[jobs.Tier]workers.TierSpec{jobs.TierPaid: {QuotaDollars: tc.dollars}}})
			if err != nil {
				t.Fatal(err)
			}
			pr := testPR(t, tc.inst)
			_, task := plannedFile(t, st, pr, jobs.KindSummary)
			w, err := workers.NewFileWorker(workers.FileWorkerConfig{Attempts: newAttempts(t), Store: st, Ledger: adm, Caller: caller, Queue: q, Models: models, Repairs: st, Requeue: adm})
			if err != nil {
				t.Fatal(err)
			}
			if err := w.ProcessTask(ctx, task); err != nil {
				t.Fatal(err)
			}
			results, _ := st.Results(ctx, pr, "h1")
			u, err := qu.UsedDollars(ctx, strconv.FormatInt(tc.inst, 10), "", int64(tc.dollars*ratelimit.NanoDollars))
			if err != nil {
				t.Fatal(err)
			}
			if !tc.called {
				if model.Calls() != 0 || len(results) != 1 || !strings.HasPrefix(results[0].Skipped, "skipped: quota reached") || u.Used != 0 {
					t.Fatalf("%d calls, results %+v, %d nano-dollars used: want no call, the file skipped, nothing spent", model.Calls(), results, u.Used)
				}
				return
			}
			if model.Calls() != 1 || asked < 400 || asked > 900 {
				t.Fatalf("%d calls asking for %d output tokens, want one cut to what the dollars left (400 to 900)", model.Calls(), asked)
			}
			// 60 input at 150, 40 cached at 75, 20 output at 600
			if want := int64(60*150 + 40*75 + 20*600); u.Used != want {
				t.Errorf("the dollar quota counts %d nano-dollars, want the call's cost %d", u.Used, want)
			}
		})
	}
}

// TestFileWorkerFlexLane: a job of a tier whose lane is flex, on a model
// that serves flex, is called at flex processing and priced at half
// (lane flex); one that flex refuses is refunded, goes back to
// admission and is called at the standard tier from then on, priced at
// the standard prices. A tier without the lane never asks for flex.
func TestFileWorkerFlexLane(t *testing.T) {
	t.Parallel()
	prices := llm.Prices{Input: 0.15, CachedInput: 0.075, Output: 0.6}
	models := map[string]workers.Model{"gpt-4o-mini": {Model: llmcall.Model{Name: "gpt-4o-mini", Flex: true, Prices: prices}}, "gpt-4o": {Model: llmcall.Model{Name: "gpt-4o", Prices: prices}}}
	for _, tc := range []struct {
		name    string
		lane    bool
		refuse  bool
		tiers   []string // the service tiers asked, in order
		laneCut string   // the cost lane counted
	}{
		{"flex answers", true, false, []string{"flex"}, "flex"},
		{"flex refuses", true, true, []string{"flex", ""}, "sync"},
		{"standard tier", false, false, []string{""}, "sync"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			st, adm, q := newStore(t), &fakeAdmission{}, &fakeQueue{}
			var mu sync.Mutex
			var asked []string
			model := &fakeLLM{CompleteFunc: func(r llm.Request) (llm.Response, error) {
				mu.Lock()
				defer mu.Unlock()
				asked = append(asked, r.ServiceTier)
				if r.ServiceTier == llm.ServiceTierFlex && tc.refuse {
					return llm.Response{}, &llm.Error{Kind: llm.ErrFlexUnavailable, Status: 429, Message: "Resource Unavailable"}
				}
				tier := "default"
				if r.ServiceTier != "" {
					tier = r.ServiceTier
				}
				return llm.Response{Text: "Adds b.", PromptTokens: 100, OutputTokens: 20, ServiceTier: tier}, nil
			}}
			var lanes []string
			var dollars float64
			caller, err := workers.NewCaller(workers.CallerConfig{LLM: model, Ledger: adm, Requeue: adm, Provider: adm,
				Tiers: map[jobs.Tier]workers.TierSpec{jobs.TierPaid: {Flex: tc.lane}},
				CostFunc: func(_, _, lane string, _ int64, d float64) {
					mu.Lock()
					defer mu.Unlock()
					lanes, dollars = append(lanes, lane), dollars+d
				}})
			if err != nil {
				t.Fatal(err)
			}
			attempts := newAttempts(t)
			w, err := workers.NewFileWorker(workers.FileWorkerConfig{Attempts: attempts, Store: st, Ledger: adm, Caller: caller, Queue: q, Models: models, Repairs: st, Requeue: adm})
			if err != nil {
				t.Fatal(err)
			}
			pr := testPR(t, 281)
			f, task := plannedFile(t, st, pr, jobs.KindSummary)
			err = w.ProcessTask(ctx, task)
			if tc.refuse {
				if err == nil || workers.IsFailure(err) {
					t.Fatalf("a flex refusal: %v, want back to admission", err)
				}
				if got := adm.Events("settle"); len(got) != 1 || !strings.HasSuffix(got[0], " 0") {
					t.Fatalf("settled %q, want the refused call refunded", got)
				}
				if mv, err := attempts.Moved(ctx, jobs.FileTaskID(f)); err != nil || !mv.Standard || mv.Model != "" {
					t.Fatalf("record %+v (%v), want the standard lane kept, no move", mv, err)
				}
				err = w.ProcessTask(ctx, task)
			}
			if err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(asked, tc.tiers) {
				t.Fatalf("service tiers asked %q, want %q", asked, tc.tiers)
			}
			want := prices.Cost(llm.Response{PromptTokens: 100, OutputTokens: 20})
			if tc.laneCut == "flex" {
				want /= 2
			}
			results, _ := st.Results(ctx, pr, "h1")
			if len(results) != 1 || math.Abs(results[0].Cost-want) > 1e-15 || math.Abs(dollars-want) > 1e-15 || len(lanes) != 1 || lanes[0] != tc.laneCut {
				t.Fatalf("results %+v, counted $%v in lanes %q; want $%v in %s", results, dollars, lanes, want, tc.laneCut)
			}
		})
	}
}

// TestCachedInputSettles: a call's usage is settled to the limiter as
// its provider counts it — all of its prompt tokens where cached input
// counts (OpenAI), its uncached input only where it does not
// (Anthropic's ITPM) — and priced with the cached part at the cached
// price either way.
func TestCachedInputSettles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		free bool
		want ratelimit.Cost
	}{
		{"cached input counts", false, ratelimit.Cost{Requests: 1, Tokens: 1320, Input: 1300, Output: 20}},
		{"cached input free", true, ratelimit.Cost{Requests: 1, Tokens: 296, Input: 276, Output: 20}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var settled []ratelimit.Cost
			st, q := newStore(t), &fakeQueue{}
			adm := &fakeAdmission{SettleFunc: func(id string, c ratelimit.Cost) error {
				mu.Lock()
				defer mu.Unlock()
				settled = append(settled, c)
				return nil
			}}
			model := &fakeLLM{CompleteFunc: func(llm.Request) (llm.Response, error) {
				return llm.Response{Text: "Adds b.", PromptTokens: 1300, CachedTokens: 1024, CacheWriteTokens: 0, OutputTokens: 20}, nil
			}}
			caller, err := workers.NewCaller(workers.CallerConfig{LLM: model, Ledger: adm, Requeue: adm, Provider: adm})
			if err != nil {
				t.Fatal(err)
			}
			pr := testPR(t, 252)
			_, task := plannedFile(t, st, pr, jobs.KindSummary)
			prices := llm.Prices{Input: 3, CachedInput: 0.3, Output: 15}
			models := map[string]workers.Model{"gpt-4o-mini": {Model: llmcall.Model{Name: "gpt-4o-mini", Prices: prices, CachedInputFree: tc.free}}}
			w, err := workers.NewFileWorker(workers.FileWorkerConfig{Attempts: newAttempts(t), Store: st, Ledger: adm, Caller: caller, Queue: q, Models: models, Repairs: st, Requeue: adm})
			if err != nil {
				t.Fatal(err)
			}
			if err := w.ProcessTask(ctx, task); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(settled) != 1 || settled[0] != tc.want {
				t.Fatalf("settled %+v, want %+v", settled, tc.want)
			}
			results, err := st.Results(ctx, pr, "h1")
			want := (276*3 + 1024*0.3 + 20*15) / 1e6
			if err != nil || len(results) != 1 || math.Abs(results[0].Cost-want) > 1e-12 {
				t.Fatalf("results %+v (%v), want the cost %.9f", results, err, want)
			}
		})
	}
}
