package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/ratelimit"
	"github.com/prq-dev/prq/store"
)

//go:embed dashboard.html
var dashboardHTML []byte

// sample is one second of a model's token flow.
type sample struct {
	T        int64              `json:"t"` // unix ms
	Incoming float64            `json:"incoming"`
	Admitted float64            `json:"admitted"`
	Limit    float64            `json:"limit"`
	ByClass  map[string]float64 `json:"by_class"`
}

// sampler keeps the last minutes of token rates per model, read from the
// shared admission counters (so it shows every worker's work).
type sampler struct {
	a      *app
	mu     sync.Mutex
	series map[string][]sample
	last   map[string]admission.Stats
	lastAt time.Time
}

const keepSamples = 600

func newSampler(a *app) *sampler {
	return &sampler{a: a, series: map[string][]sample{}, last: map[string]admission.Stats{}}
}

func sum(m map[string]int64) (t int64) {
	for _, v := range m {
		t += v
	}
	return t
}

func (s *sampler) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		s.tick(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *sampler) tick(ctx context.Context) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	dt := now.Sub(s.lastAt).Seconds()
	for _, model := range s.a.sched.Models() {
		st, err := s.a.sched.Stats(ctx, model)
		if err != nil {
			continue
		}
		prev, ok := s.last[model]
		s.last[model] = st
		if !ok || dt <= 0 {
			continue
		}
		b, _ := s.a.sched.Bucket(model)
		l := b.Limits()
		sm := sample{T: now.UnixMilli(), Limit: float64(l.TokensPerPeriod) / l.Period.Seconds(),
			Incoming: float64(sum(st.InTokens)-sum(prev.InTokens)) / dt,
			Admitted: float64(sum(st.AdmTokens)-sum(prev.AdmTokens)) / dt, ByClass: map[string]float64{}}
		for _, c := range admission.Classes {
			sm.ByClass[c] = float64(st.AdmTokens[c]-prev.AdmTokens[c]) / dt
		}
		ser := append(s.series[model], sm)
		if len(ser) > keepSamples {
			ser = ser[len(ser)-keepSamples:]
		}
		s.series[model] = ser
	}
	s.lastAt = now
}

func (s *sampler) snapshot() map[string][]sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]sample, len(s.series))
	for k, v := range s.series {
		out[k] = append([]sample(nil), v...)
	}
	return out
}

// dashState is what /api/dashboard returns.
type dashState struct {
	Now     int64                       `json:"now"`
	Series  map[string][]sample         `json:"series"`
	Models  []modelState                `json:"models"`
	Classes map[string]classState       `json:"classes"`
	PRs     []prState                   `json:"prs"`
	Calls   map[string]map[string]int64 `json:"calls"`
	Quotas  []quotaState                `json:"quotas"`
	Queues  map[string]map[string]int   `json:"queues"`
	Tenants []tenantBacklog             `json:"tenants"`
	Demo    bool                        `json:"demo"`
}

type tenantBacklog struct {
	Tier    string `json:"tier"`
	Tenant  string `json:"tenant"`
	Backlog int64  `json:"backlog"`
}

type modelState struct {
	Name           string  `json:"name"`
	LimitPerSecond float64 `json:"limit_per_second"`
	Available      int64   `json:"available"`
	Paused         string  `json:"paused,omitempty"`
	Released       int64   `json:"released"`
}

type classState struct {
	Backlog      int64   `json:"backlog"`
	WaitP50      float64 `json:"wait_p50_seconds"`
	WaitP95      float64 `json:"wait_p95_seconds"`
	Admitted     int64   `json:"admitted_jobs"`
	AheadTokens  int64   `json:"ahead_tokens"`
	BehindTokens int64   `json:"behind_tokens"`
}

type prState struct {
	PR       string  `json:"pr"`
	Tier     string  `json:"tier"`
	Done     int     `json:"done"`
	Total    int     `json:"total"`
	Progress float64 `json:"progress"`
	AgeSec   float64 `json:"age_seconds"`
}

type quotaState struct {
	Tenant string `json:"tenant"`
	Tier   string `json:"tier"`
	Used   int64  `json:"used"`
	Limit  int64  `json:"limit"`
	Reset  string `json:"reset"`
}

func quantile(ds []time.Duration, q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, int(q*float64(len(s))))].Seconds()
}

func (a *app) dashState(ctx context.Context, smp *sampler) dashState {
	st := dashState{Now: time.Now().UnixMilli(), Classes: map[string]classState{}, Calls: a.callCounts(ctx), Queues: map[string]map[string]int{}, Demo: a.demo}
	if smp != nil {
		st.Series = smp.snapshot()
	}
	paused := a.sched.Paused(ctx)
	waits := map[string][]time.Duration{}
	for _, model := range a.sched.Models() {
		s, err := a.sched.Stats(ctx, model)
		if err != nil {
			continue
		}
		b, _ := a.sched.Bucket(model)
		l := b.Limits()
		avail, _, _ := b.Available(ctx)
		st.Models = append(st.Models, modelState{Name: model, LimitPerSecond: float64(l.TokensPerPeriod) / l.Period.Seconds(),
			Available: avail.Tokens, Paused: paused[model], Released: s.Released})
		for _, c := range admission.Classes {
			cs := st.Classes[c]
			cs.Backlog += s.Backlog[c]
			cs.Admitted += s.AdmJobs[c]
			cs.AheadTokens += s.AheadTokens[c]
			cs.BehindTokens += s.BehindTokens[c]
			st.Classes[c] = cs
			waits[c] = append(waits[c], s.Waits[c]...)
		}
		for k, n := range s.TenantBacklog {
			tier, tenant, _ := strings.Cut(k, "|")
			st.Tenants = append(st.Tenants, tenantBacklog{Tier: tier, Tenant: tenant, Backlog: n})
		}
	}
	sort.Slice(st.Models, func(i, j int) bool { return st.Models[i].Name < st.Models[j].Name })
	sort.Slice(st.Tenants, func(i, j int) bool { return st.Tenants[i].Backlog > st.Tenants[j].Backlog })
	if len(st.Tenants) > 20 {
		st.Tenants = st.Tenants[:20]
	}
	for c, ws := range waits {
		cs := st.Classes[c]
		cs.WaitP50, cs.WaitP95 = quantile(ws, .5), quantile(ws, .95)
		st.Classes[c] = cs
	}
	runs, _ := a.store.ActiveRuns(ctx, 25)
	tenants := map[int64]jobs.Tier{}
	for _, r := range runs {
		total := r.SummaryTotal + r.ReviewTotal
		done := r.SummaryDone + r.ReviewDone
		p := 1.0
		if total > 0 {
			p = float64(done) / float64(total)
		}
		st.PRs = append(st.PRs, prState{PR: r.PR.String(), Tier: string(r.Tier), Done: done, Total: total, Progress: p, AgeSec: time.Since(r.CreatedAt).Seconds()})
		tenants[r.PR.Installation] = r.Tier
	}
	period, _ := ratelimit.ParsePeriod(a.cfg.Quota.Period)
	if q, err := ratelimit.NewQuota(a.rdb, ratelimit.QuotaConfig{Period: period}); err == nil {
		for inst, tier := range tenants {
			limit := a.cfg.Tiers[string(tier)].QuotaTokens
			if limit <= 0 || a.cfg.Quota.PerKind {
				continue
			}
			u, err := q.Used(ctx, strconv.FormatInt(inst, 10), "", limit)
			if err == nil {
				st.Quotas = append(st.Quotas, quotaState{Tenant: strconv.FormatInt(inst, 10), Tier: string(tier), Used: u.Used, Limit: limit, Reset: u.Reset.Format(time.RFC3339)})
			}
		}
	}
	for _, q := range jobs.Queues {
		if info, err := a.insp.GetQueueInfo(q); err == nil {
			st.Queues[q] = map[string]int{"held": info.Scheduled, "pending": info.Pending, "active": info.Active, "retry": info.Retry, "archived": info.Archived, "completed": info.Completed}
		}
	}
	return st
}

// dashboard serves the page at / and its data at /api/dashboard.
func (a *app) dashboard() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write(dashboardHTML)
	})
}

// adminAPI serves /api/: the dashboard's data and installation plans.
func (a *app) adminAPI() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/dashboard", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, a.dashState(r.Context(), a.sampler))
	})
	mux.HandleFunc("GET /api/plans", func(w http.ResponseWriter, r *http.Request) {
		plans, err := a.store.ListPlans(r.Context())
		if err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, plans)
	})
	mux.HandleFunc("GET /api/plans/{id}", func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
		if err != nil || id <= 0 {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "installation id must be a positive integer"})
			return
		}
		p, err := a.store.GetPlan(r.Context(), id)
		if err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, p)
	})
	mux.HandleFunc("PUT /api/plans/{id}", func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
		if err != nil || id <= 0 {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "installation id must be a positive integer"})
			return
		}
		var in struct{ Tier, Reason string }
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&in); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "body must be JSON {\"tier\": ..., \"reason\": ...}"})
			return
		}
		tier, err := jobs.ParseTier(in.Tier)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		err = a.store.UpdatePlan(r.Context(), id, func(p *store.Plan) { p.Tier, p.Reason, p.Explicit = tier, in.Reason, true })
		if err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
			return
		}
		p, _ := a.store.GetPlan(r.Context(), id)
		writeJSON(w, http.StatusOK, p)
	})
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func splitComma(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
