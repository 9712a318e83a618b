package gateway_test

import (
	"context"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prq-dev/prq/internal/gateway"
	"github.com/prq-dev/prq/llm"
)

// TestGatewayPricesCalls: each answered call is priced from its usage at
// the model's prices, the cached input at the cached price (the fake
// caches a repeated prompt of 1,024 tokens and more as OpenAI does), a
// call an agent asked flex processing for at half: the key's spend this
// month, prq_gateway_cost_dollars_total and CostFunc all hold the
// replies' exact cost.
func TestGatewayPricesCalls(t *testing.T) {
	t.Parallel()
	prices := llm.Prices{Input: 2.5, CachedInput: 1.25, Output: 10}
	var mu sync.Mutex
	var told float64
	var tiers []string
	r := newRigWith(t, rigOpts{flex: true, cfg: func(c *gateway.Config) {
		for name, m := range c.Models {
			m.Prices = prices
			c.Models[name] = m
		}
		c.CostFunc = func(model, tier, lane string, dollars float64) {
			mu.Lock()
			defer mu.Unlock()
			told += dollars
			tiers = append(tiers, tier+"/"+lane)
		}
	}})
	secret, k := r.key(t, gateway.Spec{Name: "priced", Tier: "trial"})
	long := strings.Repeat("the same long preamble of an agent's prompt ", 300)
	var want float64
	cachedSeen := int64(0)
	for i := range 3 {
		tier := ""
		if i == 2 { // an agent asking for flex processing: priced at half
			tier = `"service_tier":"flex",`
		}
		res, err := r.post(context.Background(), secret, `{"model":"`+r.model+`",`+tier+`"max_tokens":20,"messages":[{"role":"user","content":"`+long+`"}]}`, nil)
		if err != nil {
			t.Fatal(err)
		}
		var reply struct {
			ServiceTier string `json:"service_tier"`
			Usage       struct {
				PromptTokens        int64 `json:"prompt_tokens"`
				CompletionTokens    int64 `json:"completion_tokens"`
				PromptTokensDetails struct {
					CachedTokens int64 `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		err = jsonDecode(res, &reply)
		res.Body.Close()
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("%d %v", res.StatusCode, err)
		}
		u := reply.Usage
		cachedSeen += u.PromptTokensDetails.CachedTokens
		call := prices.Cost(llm.Response{PromptTokens: u.PromptTokens, OutputTokens: u.CompletionTokens, CachedTokens: u.PromptTokensDetails.CachedTokens})
		if i == 2 {
			if reply.ServiceTier != "flex" {
				t.Fatalf("the flex request was served by %q", reply.ServiceTier)
			}
			call /= 2
		}
		want += call
	}
	if cachedSeen == 0 {
		t.Fatal("the repeated prompt was not served from the fake's cache: the test prices nothing cached")
	}
	close := func(a, b float64) bool { return math.Abs(a-b) <= 1e-12 }
	eventually(t, "every call priced", func() bool { return close(r.metric(t, "prq_gateway_cost_dollars_total"), want) }) // counted last
	spend, err := r.keys.Spend(context.Background(), time.Now())
	if err != nil || !close(spend[k.ID], want) {
		t.Fatalf("the key's spend %v (%v), want %v", spend[k.ID], err, want)
	}
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(tiers)
	if !close(told, want) || !slices.Equal(tiers, []string{"trial/flex", "trial/sync", "trial/sync"}) {
		t.Fatalf("CostFunc told %v for %q, want %v for trial, once in lane flex", told, tiers, want)
	}
}
