package metrics

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prq-dev/prq/internal/redistest"
)

// Spend counted by a worker is measured by serve against each tier's
// monthly budget: prq_budget_installations counts the installations
// past 50, 75, 90 and 100% of theirs, by tier; a tier without a budget
// has no series; Spendings names each installation with its tier.
func TestBudgetsExported(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	worker := New(nil, nil, rdb, Config{})
	for _, c := range []struct {
		inst    int64
		tier    string
		dollars float64
	}{{1, "paid", 4}, {2, "paid", 7.5}, {2, "paid", 0.5}, {3, "trial", 1}, {3, "paid", 11}, {4, "free", 100}, {5, "paid", 9}} {
		worker.CountCost("gpt-4o", c.tier, "sync", c.inst, c.dollars)
	}
	serve := New(emptyAdmission{}, noQueues{}, rdb, Config{CacheFor: -1})
	serve.Watch(rdb, time.Minute)
	serve.WatchBudgets(map[string]float64{"paid": 10, "trial": 5})
	w := httptest.NewRecorder()
	serve.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	body := w.Body.String()
	// paid: 1 at 40%, 2 at 80%, 3 at 120% (its latest call was paid), 5 at 90%
	for _, want := range []string{
		`prq_budget_installations{threshold="50",tier="paid"} 3`,
		`prq_budget_installations{threshold="75",tier="paid"} 3`,
		`prq_budget_installations{threshold="90",tier="paid"} 2`,
		`prq_budget_installations{threshold="100",tier="paid"} 1`,
		`prq_budget_installations{threshold="50",tier="trial"} 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the scrape lacks %s", want)
		}
	}
	if strings.Contains(body, `tier="free"`) {
		t.Error("a tier without a budget has budget series")
	}
	got := map[int64]Spending{}
	spent, err := Spendings(t.Context(), rdb, time.Now(), map[string]float64{"paid": 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range spent {
		got[s.Installation] = s
	}
	if s := got[3]; s.Tier != "paid" || s.Dollars != 12 || s.Budget != 10 || s.Share() != 1.2 {
		t.Errorf("installation 3: %+v (share %v), want $12 of paid's $10", s, s.Share())
	}
	if s := got[4]; s.Tier != "free" || s.Budget != 0 || s.Share() != 0 {
		t.Errorf("installation 4: %+v, want free without a budget", s)
	}
}

// A job moved to a fallback in one process is exported by serve as
// prq_jobs_fallbacks_total by model, fallback and reason.
func TestJobFallbacksExported(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	worker := New(nil, nil, rdb, Config{})
	worker.CountJobFallback("gpt-4o", "claude-sonnet", "provider")
	worker.CountJobFallback("gpt-4o", "claude-sonnet", "provider")
	worker.CountJobFallback("gpt-4o-mini", "claude-haiku", "paused")
	serve := New(emptyAdmission{}, noQueues{}, rdb, Config{CacheFor: -1})
	serve.Watch(rdb, time.Minute)
	w := httptest.NewRecorder()
	serve.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{`prq_jobs_fallbacks_total{from="gpt-4o",reason="provider",to="claude-sonnet"} 2`,
		`prq_jobs_fallbacks_total{from="gpt-4o-mini",reason="paused",to="claude-haiku"} 1`} {
		if !strings.Contains(w.Body.String(), want) {
			t.Errorf("the scrape lacks %s", want)
		}
	}
}
