package harness

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/internal/render"
)

// TestCostEndToEnd: through prq serve with github.summary_cost, the
// dollars counted in prq_llm_cost_dollars_total are exactly what the
// heads' recorded results cost at the bench models' list prices; each
// summary's footer says its head's cost; the dashboard shows the spend
// by model and tier, and per tenant.
func TestCostEndToEnd(t *testing.T) {
	t.Parallel()
	const budget = 1e-6 // dollars a month: every tenant spends past it
	s, ps := reviewAll(t, fakeopenai.ReplyJSON, 3, func(c *config.Config) {
		c.GitHub.SummaryCost = true
		paid := c.Tiers["paid"]
		paid.BudgetDollars = budget
		c.Tiers["paid"] = paid
	})
	ctx := context.Background()
	var total float64
	for _, p := range ps {
		results, err := s.app.Store().Results(ctx, p.pr, p.head)
		if err != nil {
			t.Fatal(err)
		}
		var head float64
		for _, r := range results {
			head += r.Cost
		}
		if head <= 0 {
			t.Fatalf("%s: its results cost %v, want the calls priced", p.pr, head)
		}
		total += head
		if want := "The calls of this review cost " + render.Dollars(head) + " at the models' prices."; !strings.Contains(p.summaryText(), want) {
			t.Errorf("%s: the summary's footer lacks %q:\n%s", p.pr, want, p.summaryText())
		}
	}
	if got := s.metric("prq_llm_cost_dollars_total", map[string]string{"tier": "paid", "lane": "sync"}); math.Abs(got-total) > 1e-9 {
		t.Errorf("prq_llm_cost_dollars_total %.9f, want the results' %.9f", got, total)
	}
	code, body := get(t, "http://"+s.app.ListenAddr()+"/api/dashboard", string(s.app.Config().Admin.Token))
	if code != 200 {
		t.Fatalf("/api/dashboard: %d", code)
	}
	var d struct {
		Costs map[string]map[string]float64 `json:"costs"`
		Spend []struct {
			Tenant  string  `json:"tenant"`
			Tier    string  `json:"tier"`
			Dollars float64 `json:"dollars"`
			Budget  float64 `json:"budget"`
			Share   float64 `json:"share"`
		} `json:"spend"`
	}
	if err := json.Unmarshal([]byte(body), &d); err != nil {
		t.Fatal(err)
	}
	var byModel, byTenant float64
	for _, tiers := range d.Costs {
		byModel += tiers["paid"]
	}
	for _, sp := range d.Spend {
		byTenant += sp.Dollars
		if sp.Tier != "paid" || sp.Budget != budget || math.Abs(sp.Share-sp.Dollars/budget) > 1e-6*sp.Share {
			t.Errorf("dashboard spend %+v, want paid against its budget of $%v", sp, budget)
		}
	}
	for _, th := range []string{"50", "100"} {
		if got := s.metric("prq_budget_installations", map[string]string{"tier": "paid", "threshold": th}); got != float64(len(ps)) {
			t.Errorf("prq_budget_installations{tier=paid,threshold=%s} = %v, want every one of the %d tenants", th, got, len(ps))
		}
	}
	if math.Abs(byModel-total) > 1e-9 || math.Abs(byTenant-total) > 1e-9 || len(d.Spend) != len(ps) {
		t.Errorf("dashboard: %.9f by model, %.9f over %d tenants; want %.9f over %d", byModel, byTenant, len(d.Spend), total, len(ps))
	}
}
