package llm_test

import (
	"context"
	"errors"
	"math"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/llm"
)

// TestPromptCacheUsage: through go-openai against the fake's prompt
// cache, a second call sharing a long prefix reports the cached part of
// its prompt (in 128-token steps from 1,024), a short prompt never does,
// and the cost charges the cached tokens at the cached price.
func TestPromptCacheUsage(t *testing.T) {
	fake := fakeopenai.New(fakeopenai.Config{Models: []fakeopenai.Model{{Name: "gpt-4o-mini", RPM: 1000, TPM: 10000000}}, Period: time.Hour})
	srv := httptest.NewServer(fake)
	defer srv.Close()
	ctx := context.Background()
	c := llm.New("sk-test", srv.URL+"/v1", 5*time.Second, nil)
	system := strings.Repeat("review ", 1300) // 1,300 tokens
	first, err := c.Complete(ctx, llm.Request{Model: "gpt-4o-mini", System: system, User: "File: a.go", MaxOutput: 50})
	if err != nil {
		t.Fatal(err)
	}
	second, err := c.Complete(ctx, llm.Request{Model: "gpt-4o-mini", System: system, User: "File: b.go", MaxOutput: 50})
	if err != nil {
		t.Fatal(err)
	}
	if first.CachedTokens != 0 || second.CachedTokens != 1280 || second.CachedTokens > second.PromptTokens {
		t.Fatalf("cached tokens %d then %d (of %d), want 0 then 1280: the shared prefix in 128-token steps", first.CachedTokens, second.CachedTokens, second.PromptTokens)
	}
	short, err := c.Complete(ctx, llm.Request{Model: "gpt-4o-mini", System: "Summarise.", User: "File: a.go", MaxOutput: 50})
	if err != nil || short.CachedTokens != 0 {
		t.Fatalf("a short prompt: %d cached (%v), want none", short.CachedTokens, err)
	}
	if st := fake.Stats()["gpt-4o-mini"]; st.CachedTokens != 1280 {
		t.Errorf("the fake counted %d cached tokens, want 1280", st.CachedTokens)
	}
	// the fake's bill is the replies' usage, summed
	bill := fake.Stats()["gpt-4o-mini"].Bill[fakeopenai.LaneSync]
	if want := (fakeopenai.Usage{Requests: 3, Prompt: first.PromptTokens + second.PromptTokens + short.PromptTokens, Cached: 1280,
		Output: first.OutputTokens + second.OutputTokens + short.OutputTokens}); bill != want {
		t.Errorf("the fake's bill %+v, want %+v", bill, want)
	}
	p, ok := llm.ListPrices("gpt-4o-mini-2024-07-18")
	if !ok || p.Input != 0.15 || p.CachedInput != 0.075 || p.Output != 0.60 {
		t.Fatalf("list prices %+v %v", p, ok)
	}
	want := (float64(second.PromptTokens-1280)*0.15 + 1280*0.075 + float64(second.OutputTokens)*0.60) / 1e6
	if got := p.Cost(second); math.Abs(got-want) > 1e-12 {
		t.Errorf("cost %.9f, want %.9f", got, want)
	}
	if p.Cost(second) >= p.Cost(llm.Response{PromptTokens: second.PromptTokens, OutputTokens: second.OutputTokens}) {
		t.Errorf("cached input did not cost less")
	}
}

// TestListPrices: the longest prefix decides; unknown models have none;
// Anthropic's cache writes are priced apart.
func TestListPrices(t *testing.T) {
	for model, want := range map[string]float64{"gpt-4o": 2.50, "gpt-4o-mini": 0.15, "gpt-4.1-mini-2025-04-14": 0.40, "claude-opus-4-5-20251101": 5, "claude-opus-4-1-20250805": 15} {
		if p, ok := llm.ListPrices(model); !ok || p.Input != want {
			t.Errorf("%s: %+v %v, want input %.2f", model, p, ok, want)
		}
	}
	if _, ok := llm.ListPrices("my-local-model"); ok {
		t.Error("an unknown model has a list price")
	}
	p, _ := llm.ListPrices("claude-sonnet-4-20250514")
	r := llm.Response{PromptTokens: 1000, CachedTokens: 600, CacheWriteTokens: 300, OutputTokens: 100}
	if got, want := p.Cost(r), (100*3.00+600*0.30+300*3.75+100*15.00)/1e6; math.Abs(got-want) > 1e-12 {
		t.Errorf("anthropic cost %.9f, want %.9f", got, want)
	}
	if (llm.Prices{Input: -1}).Valid() || !(llm.Prices{Input: 1}).Valid() || (llm.Prices{Output: math.Inf(1)}).Valid() {
		t.Error("Valid")
	}
}

// TestFlexProcessing: through go-openai against the fake, a flex call
// sends service_tier flex and reads the tier that served it (priced at
// half: batch prices); a refusal for want of capacity, and a model flex
// does not serve, are ErrFlexUnavailable (the job then goes standard),
// never a rate limit.
func TestFlexProcessing(t *testing.T) {
	fake := fakeopenai.New(fakeopenai.Config{Models: []fakeopenai.Model{{Name: "gpt-4o-mini", RPM: 1000, TPM: 10000000, Flex: true}, {Name: "gpt-4o", RPM: 1000, TPM: 10000000}}, Period: time.Hour})
	srv := httptest.NewServer(fake)
	defer srv.Close()
	ctx := context.Background()
	c := llm.New("sk-test", srv.URL+"/v1", 5*time.Second, nil)
	flex, err := c.Complete(ctx, llm.Request{Model: "gpt-4o-mini", User: "File: a.go", MaxOutput: 50, ServiceTier: llm.ServiceTierFlex})
	if err != nil || flex.ServiceTier != "flex" {
		t.Fatalf("flex call: tier %q, %v", flex.ServiceTier, err)
	}
	std, err := c.Complete(ctx, llm.Request{Model: "gpt-4o-mini", User: "File: a.go", MaxOutput: 50})
	if err != nil || std.ServiceTier != "default" {
		t.Fatalf("standard call: tier %q, %v", std.ServiceTier, err)
	}
	p, _ := llm.ListPrices("gpt-4o-mini")
	if got, want := p.Of(flex).Cost(flex), p.Cost(flex)/2; math.Abs(got-want) > 1e-15 || p.Of(std) != p {
		t.Fatalf("flex cost %v, want half the standard %v", got, want)
	}
	_, err = c.Complete(ctx, llm.Request{Model: "gpt-4o", User: "File: a.go", MaxOutput: 50, ServiceTier: llm.ServiceTierFlex})
	if !errors.Is(err, llm.ErrFlexUnavailable) {
		t.Fatalf("flex on a model without it: %v, want ErrFlexUnavailable", err)
	}
	fake.SetFaults(fakeopenai.Faults{FlexUnavailable: 1})
	_, err = c.Complete(ctx, llm.Request{Model: "gpt-4o-mini", User: "File: a.go", MaxOutput: 50, ServiceTier: llm.ServiceTierFlex})
	if !errors.Is(err, llm.ErrFlexUnavailable) || errors.Is(err, llm.ErrRateLimited) {
		t.Fatalf("flex without capacity: %v, want ErrFlexUnavailable", err)
	}
	if _, err := c.Complete(ctx, llm.Request{Model: "gpt-4o-mini", User: "File: a.go", MaxOutput: 50}); err != nil {
		t.Fatalf("a standard call while flex has no capacity: %v", err)
	}
	if st := fake.Stats()["gpt-4o-mini"]; st.Flex != 2 || st.FlexRefused != 1 || st.RateLimited != 0 {
		t.Fatalf("fake stats %+v: want 2 flex requests, 1 refused, no 429 for a limit", st)
	}
	if bill := fake.Stats()["gpt-4o-mini"].Bill; bill[fakeopenai.LaneFlex].Requests != 1 || bill[fakeopenai.LaneSync].Requests != 2 ||
		bill[fakeopenai.LaneFlex].Prompt != flex.PromptTokens || bill[fakeopenai.LaneFlex].Output != flex.OutputTokens {
		t.Fatalf("the fake's bill %+v: want the flex call in lane flex, the two standard ones in sync", bill)
	}
	// a flex call over a rate limit is a rate limit (the provider
	// counted it), not a refusal
	fake.SetFaults(fakeopenai.Faults{})
	tight := fakeopenai.New(fakeopenai.Config{Models: []fakeopenai.Model{{Name: "gpt-4o-mini", RPM: 1, TPM: 10000000, Flex: true}}, Period: time.Hour})
	tsrv := httptest.NewServer(tight)
	defer tsrv.Close()
	tc := llm.New("sk-test", tsrv.URL+"/v1", 5*time.Second, nil)
	if _, err := tc.Complete(ctx, llm.Request{Model: "gpt-4o-mini", User: "File: a.go", MaxOutput: 50, ServiceTier: llm.ServiceTierFlex}); err != nil {
		t.Fatal(err)
	}
	_, err = tc.Complete(ctx, llm.Request{Model: "gpt-4o-mini", User: "File: a.go", MaxOutput: 50, ServiceTier: llm.ServiceTierFlex})
	if !errors.Is(err, llm.ErrRateLimited) || errors.Is(err, llm.ErrFlexUnavailable) {
		t.Fatalf("a flex call over the RPM limit: %v, want ErrRateLimited", err)
	}
}

// TestBatchPrices: the batch APIs' prices are half of every standard
// price (Anthropic's cache reads and writes too), and flex processing is
// priced as a batch.
func TestBatchPrices(t *testing.T) {
	p, _ := llm.ListPrices("claude-sonnet-4-20250514")
	want := llm.Prices{Input: 1.50, CachedInput: 0.15, CacheWrite: 1.875, Output: 7.50}
	if got := p.Batch(); got != want {
		t.Fatalf("batch prices %+v, want %+v", got, want)
	}
	r := llm.Response{PromptTokens: 1000, CachedTokens: 600, CacheWriteTokens: 300, OutputTokens: 100}
	if got, full := p.Batch().Cost(r), p.Cost(r); math.Abs(got-full/2) > 1e-15 {
		t.Errorf("a batch call costs %.9f, want half of %.9f", got, full)
	}
	o, _ := llm.ListPrices("gpt-4o-mini")
	if o.Flex() != o.Batch() || o.Batch().Input != 0.075 {
		t.Errorf("flex %+v, batch %+v: want both half of %+v", o.Flex(), o.Batch(), o)
	}
}
