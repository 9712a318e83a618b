package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/internal/dashboard"
	"github.com/prq-dev/prq/internal/metrics"
)

// TestWindowSuspicionShown: when the provider's headers show a window
// limiter while the model is configured limiter: bucket, an operator sees
// it in /metrics (prq_provider_window_suspected) and on the dashboard;
// before that, both say nothing.
func TestWindowSuspicionShown(t *testing.T) {
	s, _ := newTestServer(t, func(c *config.Config) { c.Metrics.CacheFor = config.Duration(-1) })
	model := s.cfg.Jobs.ReviewModel
	b, ok := s.sched.Bucket(model)
	if !ok {
		t.Fatalf("no bucket for %s", model)
	}
	l := b.Limits()
	fake := fakeopenai.New(fakeopenai.Config{Models: []fakeopenai.Model{{Name: model, RPM: 3, TPM: l.TokensPerPeriod}},
		Period: l.Period, Limiter: fakeopenai.LimiterWindow})
	provider := httptest.NewServer(fake)
	defer provider.Close()
	m := metrics.New(s.sched, s.insp, s.rdb, metrics.Config{CacheFor: -1})
	api := dashboard.New(dashSource{s}, s.store, false).AdminAPI(true)
	look := func() (metricsText, dash string) {
		w := httptest.NewRecorder()
		m.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
		d := httptest.NewRecorder()
		api.ServeHTTP(d, httptest.NewRequest("GET", "/api/dashboard", nil))
		return w.Body.String(), d.Body.String()
	}
	series := `prq_provider_window_suspected{model="` + model + `"}`
	mt, dt := look()
	if !strings.Contains(mt, series+" 0") || strings.Contains(dt, `"window_suspected":true`) {
		t.Fatalf("suspected before any reply:\n%s\n%s", grepLines(mt, "window"), dt)
	}
	ctx := context.Background()
	for i := 0; i < 6; i++ { // three fit the window, three are refused
		req, _ := http.NewRequest("POST", provider.URL+"/v1/chat/completions",
			strings.NewReader(`{"model":"`+model+`","max_tokens":20,"messages":[{"role":"user","content":"hello"}]}`))
		req.Header.Set("Authorization", "Bearer sk-window-test")
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if _, err := b.Sync(ctx, resp.StatusCode, resp.Header, time.Since(start)); err != nil {
			t.Fatal(err)
		}
	}
	mt, dt = look()
	if !strings.Contains(mt, series+" 1") {
		t.Fatalf("/metrics does not show the suspicion:\n%s", grepLines(mt, "window"))
	}
	if !strings.Contains(dt, `"window_suspected":true`) {
		t.Fatalf("the dashboard does not show the suspicion:\n%s", dt)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestDeployKnowsEveryMetric: the alert and dashboard checks of
// deploy/validate accept only the metrics listed in its testdata; every
// series serve exports must be listed there, so a new one cannot be
// used in an alert the check would refuse, nor go unnoticed.
func TestDeployKnowsEveryMetric(t *testing.T) {
	s, _ := newTestServer(t, nil)
	m := metrics.New(s.sched, s.insp, s.rdb, metrics.Config{CacheFor: -1})
	m.CountDelivery("pull_request", "accepted")
	m.CountCall(s.cfg.Jobs.ReviewModel, "ok")
	m.CountUnusable(s.cfg.Jobs.ReviewModel, "review")
	m.CountGaveUp("review", "attempts")
	m.CountJobFallback("gpt-4o", "gpt-4.1", "provider")
	m.CountLifecycle("run_finalized", "lost_finalize")
	m.CountDecorationError("check_run_complete", "404")
	m.CountCost(s.cfg.Jobs.ReviewModel, "paid", "sync", 1, 0.01)
	m.Watch(s.rdb, time.Minute) // the series read from the shared Redis too
	m.WatchBudgets(map[string]float64{"paid": 1})
	w := httptest.NewRecorder()
	m.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	listed, err := os.ReadFile("../../deploy/validate/testdata/metrics.txt")
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, l := range strings.Split(string(listed), "\n") {
		if name, _, ok := strings.Cut(l, " "); ok && !strings.HasPrefix(l, "#") {
			known[name] = true
		}
	}
	n := 0
	for _, l := range strings.Split(w.Body.String(), "\n") {
		f := strings.Fields(l)
		if len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			n++
			if !known[f[2]] {
				t.Errorf("serve exports %s, which deploy/validate/testdata/metrics.txt does not list (add %q)", f[2], f[2]+" "+f[3])
			}
		}
	}
	if n < 20 {
		t.Fatalf("the scrape listed %d metrics:\n%.1000s", n, w.Body.String())
	}
}
