package validate

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
)

const alertsFile = "../prometheus/alerts.yml"

// loadRules parses the alert rules as Prometheus does at startup (rule
// syntax, PromQL, label and annotation templates).
func loadRules(t *testing.T) []rulefmt.Rule {
	t.Helper()
	groups, errs := rulefmt.ParseFile(alertsFile, false, model.UTF8Validation, promParser, slog.New(slog.NewTextHandler(io.Discard, nil)))
	for _, err := range errs {
		t.Errorf("%v", err)
	}
	if len(errs) > 0 {
		t.FailNow()
	}
	var out []rulefmt.Rule
	for _, g := range groups.Groups {
		out = append(out, g.Rules...)
	}
	return out
}

func TestAlertRulesParseAndNameKnownMetrics(t *testing.T) {
	known := knownMetrics(t)
	for _, r := range loadRules(t) {
		if r.Alert == "" {
			continue
		}
		for _, name := range metricNames(t, r.Expr) {
			if !known[name] {
				t.Errorf("%s: metric %q is not among prq's (testdata/metrics.txt)", r.Alert, name)
			}
		}
		for _, a := range []string{"summary", "description", "runbook"} {
			if r.Annotations[a] == "" {
				t.Errorf("%s: no %s annotation", r.Alert, a)
			}
		}
	}
}

// scenario is recorded series, in promqltest's load notation (one sample
// per minute from time 0), and whether the alert must fire at its end.
type scenario struct {
	name   string
	series string
	fires  bool
}

// alertScenarios holds, for every alert, series on which it must fire and
// series on which it must stay quiet.
var alertScenarios = map[string][]scenario{
	"PrqProviderRateLimited": {
		{"429s for 15 minutes", `prq_llm_calls_all_total{model="gpt-4o",outcome="rate_limited"} 0+2x20
			prq_llm_calls_all_total{model="gpt-4o",outcome="ok"} 0+50x20`, true},
		{"only successful calls", `prq_llm_calls_all_total{model="gpt-4o",outcome="rate_limited"} 3x20
			prq_llm_calls_all_total{model="gpt-4o",outcome="ok"} 0+50x20`, false},
		{"one burst long ago", `prq_llm_calls_all_total{model="gpt-4o",outcome="rate_limited"} 0 0 5 5x17`, false},
	},
	"PrqBacklogOverAgingBound": {
		{"oldest job keeps ageing past 10m", `prq_admission_oldest_wait_seconds{model="gpt-4o"} 0+60x20
			prq_admission_aging_seconds 600x20`, true},
		{"jobs admitted within the bound", `prq_admission_oldest_wait_seconds{model="gpt-4o"} 30 90 20 400 10 550 5x15
			prq_admission_aging_seconds 600x20`, false},
		{"over the bound only briefly", `prq_admission_oldest_wait_seconds{model="gpt-4o"} 0x15 700 0x4
			prq_admission_aging_seconds 600x20`, false},
	},
	"PrqModelPaused": {
		{"paused", `prq_model_paused{model="gpt-4o"} 0x10 1x10
			prq_model_paused{model="gpt-4o-mini"} 0x20`, true},
		{"running", `prq_model_paused{model="gpt-4o"} 0x20`, false},
	},
	"PrqWebhookUnavailable": {
		{"503s in the last minutes", `prq_webhook_deliveries_total{event="pull_request",outcome="unavailable"} 0x17 1 2 4
			prq_webhook_deliveries_total{event="pull_request",outcome="enqueued"} 0+10x20`, true},
		{"all enqueued", `prq_webhook_deliveries_total{event="pull_request",outcome="unavailable"} 2x20
			prq_webhook_deliveries_total{event="pull_request",outcome="enqueued"} 0+10x20`, false},
	},
	"PrqRedisDown": {
		{"PING fails", `prq_redis_up{instance="serve-a"} 1x10 0x10
			prq_redis_up{instance="serve-b"} 1x10 0x10`, true},
		{"PING answers", `prq_redis_up{instance="serve-a"} 1x20`, false},
		{"one failed scrape", `prq_redis_up{instance="serve-a"} 1x18 0 1`, false},
	},
	"PrqDown": {
		{"target down", `up{job="prq",instance="serve-a"} 1x10 0x10`, true},
		{"target up", `up{job="prq",instance="serve-a"} 1x20
			up{job="other",instance="x"} 0x20`, false},
	},
	"PrqArchivedJobs": {
		{"jobs archived recently", `prq_queue_tasks{queue="prq:paid",state="archived"} 0x15 3x5`, true},
		{"old archive, nothing new", `prq_queue_tasks{queue="prq:paid",state="archived"} 5x20
			prq_queue_tasks{queue="prq:paid",state="pending"} 0+3x20`, false},
	},
	"PrqProviderLooksWindowLimited": {
		{"window-like headers", `prq_provider_window_suspected{model="gpt-4o"} 0x5 1x15`, true},
		{"bucket-like headers", `prq_provider_window_suspected{model="gpt-4o"} 0x20`, false},
	},
	"PrqBudgetThresholdReached": {
		{"an installation past 75%", `prq_budget_installations{tier="paid",threshold="50"} 0x10 1x10
			prq_budget_installations{tier="paid",threshold="75"} 0x15 1x5
			prq_budget_installations{tier="paid",threshold="90"} 0x20
			prq_budget_installations{tier="paid",threshold="100"} 0x20`, true},
		{"every installation under half", `prq_budget_installations{tier="paid",threshold="50"} 0x20
			prq_budget_installations{tier="paid",threshold="75"} 0x20
			prq_budget_installations{tier="paid",threshold="90"} 0x20
			prq_budget_installations{tier="paid",threshold="100"} 0x20`, false},
	},
	"PrqBudgetSpent": {
		{"an installation spent it all", `prq_budget_installations{tier="trial",threshold="90"} 0x10 1x10
			prq_budget_installations{tier="trial",threshold="100"} 0x18 1x2`, true},
		{"past 90% only", `prq_budget_installations{tier="trial",threshold="90"} 0x10 2x10
			prq_budget_installations{tier="trial",threshold="100"} 0x20`, false},
	},
	"PrqRedisMemoryHigh": {
		{"90% of maxmemory", `prq_redis_memory_used_bytes 900x20
			prq_redis_memory_max_bytes 1000x20`, true},
		{"half of maxmemory", `prq_redis_memory_used_bytes 500x20
			prq_redis_memory_max_bytes 1000x20`, false},
		{"no maxmemory", `prq_redis_memory_used_bytes 900x20
			prq_redis_memory_max_bytes 0x20`, false},
	},
}

// TestAlertsFireOnTheirCondition evaluates each alert with Prometheus's
// rule engine every 30s over 20 minutes of recorded series, and checks
// that it is firing at the end exactly when the scenario says so.
func TestAlertsFireOnTheirCondition(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range loadRules(t) {
		if r.Alert == "" {
			continue
		}
		seen[r.Alert] = true
		cases := alertScenarios[r.Alert]
		var fire, quiet bool
		for _, c := range cases {
			fire, quiet = fire || c.fires, quiet || !c.fires
		}
		if !fire || !quiet {
			t.Errorf("%s: needs a scenario where it fires and one where it does not", r.Alert)
		}
		for _, c := range cases {
			t.Run(r.Alert+"/"+c.name, func(t *testing.T) {
				if got := firingAtEnd(t, r, c.series); got != c.fires {
					t.Errorf("firing at 20m = %v, want %v", got, c.fires)
				}
			})
		}
	}
	for name := range alertScenarios {
		if !seen[name] {
			t.Errorf("scenarios for %s, which alerts.yml does not define", name)
		}
	}
}

func firingAtEnd(t *testing.T, r rulefmt.Rule, series string) bool {
	t.Helper()
	storage := promqltest.LoadedStorage(t, "load 1m\n"+indentLines(series))
	engine := promqltest.NewTestEngine(t, false, 5*time.Minute, promqltest.DefaultMaxSamplesPerQuery)
	expr, err := promParser.ParseExpr(r.Expr)
	if err != nil {
		t.Fatal(err)
	}
	rule := rules.NewAlertingRule(r.Alert, expr, time.Duration(r.For), time.Duration(r.KeepFiringFor),
		labels.FromMap(r.Labels), labels.FromMap(r.Annotations), labels.EmptyLabels(), "", true, slog.New(slog.NewTextHandler(io.Discard, nil)))
	query := rules.EngineQueryFunc(engine, storage)
	end := 20 * time.Minute
	for at := time.Duration(0); at <= end; at += 30 * time.Second {
		if _, err := rule.Eval(context.Background(), 0, time.Unix(0, 0).Add(at), query, nil, 0); err != nil {
			t.Fatalf("eval at %s: %v", at, err)
		}
	}
	for _, a := range rule.ActiveAlerts() {
		if a.State == rules.StateFiring {
			return true
		}
	}
	return false
}

func indentLines(s string) string {
	out := ""
	for _, l := range splitLines(s) {
		out += "  " + l + "\n"
	}
	return out
}
