// Package dashboard owns prq's operator pages: the dashboard at / with its
// data at /api/dashboard, the admin API for installation plans, and the
// sampler that turns the shared admission counters into token-rate
// series. It reads everything through the narrow Source and Plans
// interfaces declared here; it does not wire the process, authenticate
// requests (the caller wraps its handlers) or serve /metrics.
package dashboard

import (
	"context"
	_ "embed"
	"encoding/json"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/internal/quantile"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/ratelimit"
	"github.com/prq-dev/prq/store"
)

// Source is what the dashboard reads; nothing in it writes.
type Source interface {
	Models() []string
	Stats(ctx context.Context, model string) (admission.Stats, error)
	// Tokens are a model's incoming and admitted tokens per class, the
	// counters in Stats, read alone (the sampler's every second).
	Tokens(ctx context.Context, model string) (in, adm map[string]int64, err error)
	Bucket(model string) (*ratelimit.Bucket, bool)
	Paused(ctx context.Context) map[string]string
	// PausedKeys are a model's paused API keys (by index) and why.
	PausedKeys(ctx context.Context, model string) map[int]string
	ActiveRuns(ctx context.Context, limit int64) ([]store.Run, error)
	GetQueueInfo(queue string) (*asynq.QueueInfo, error)
	// CallCounts are every process's LLM calls by model and outcome.
	CallCounts(ctx context.Context) map[string]map[string]int64
	// Costs are every process's LLM spend in dollars by model and tier;
	// Spend each installation's this month (UTC), against its tier's
	// monthly budget.
	Costs(ctx context.Context) map[string]map[string]float64
	Spend(ctx context.Context) []Spend
	// GaveUpCounts are every process's jobs that spent their retry
	// budget, by "kind|reason".
	GaveUpCounts(ctx context.Context) map[string]int64
	// Acceptance is the 👍 and 👎 people gave prq's findings, by model
	// and kind, across every process.
	Acceptance(ctx context.Context) []store.Acceptance
	// QuotaUsed is an installation's quota use; ok is false where the
	// tier has no quota (or quotas are split per job kind).
	QuotaUsed(ctx context.Context, installation int64, tier jobs.Tier) (u ratelimit.Usage, limit int64, ok bool)
}

// Plans is what the admin API reads and changes: installation plans.
type Plans interface {
	ListPlans(ctx context.Context) ([]store.Plan, error)
	GetPlan(ctx context.Context, id int64) (store.Plan, error)
	UpdatePlan(ctx context.Context, id int64, fn func(*store.Plan)) error
}

// Dashboard serves the dashboard and the admin API.
type Dashboard struct {
	// PRPages, when set, is where the page of each pull request is
	// (PRPages + "owner/repo/number"): the demo's fake GitHub.
	PRPages string

	src     Source
	plans   Plans
	demo    bool
	sampler *sampler
}

// New returns the dashboard of src and the admin API of plans; demo marks
// the page as the demo's.
func New(src Source, plans Plans, demo bool) *Dashboard {
	return &Dashboard{src: src, plans: plans, demo: demo, sampler: newSampler(src)}
}

// Sample records the token rates every interval until ctx ends: the
// charts' data.
func (d *Dashboard) Sample(ctx context.Context, every time.Duration) { d.sampler.run(ctx, every) }

//go:embed dashboard.html
var dashboardHTML []byte

//go:embed dashboard.js
var dashboardJS []byte

// sample is a model's token flow at one second: tokens per second
// arriving and admitted, each averaged over the limit's last period (a
// minute; the demo compresses it), against the limit and against what
// the bucket allowed in that period — the limit plus the tokens it had
// saved at the period's start: what the limiter guarantees it lets
// through (a bucket spending its saving after a quiet spell rides above
// Limit, under Allowed, as the provider's own bucket allows). Admitted
// counts every admission: a job sent back without a call (a spent
// quota) has its tokens given back to the bucket and counts again when
// admitted again, so Admitted may exceed Allowed by such tokens.
type sample struct {
	T        int64              `json:"t"` // unix ms
	Incoming float64            `json:"incoming"`
	Admitted float64            `json:"admitted"`
	Limit    float64            `json:"limit"`
	Allowed  float64            `json:"allowed"`
	Window   float64            `json:"window_seconds"` // the period averaged over
	ByClass  map[string]float64 `json:"by_class"`       // admitted per second, this second
}

// sampler keeps the last minutes of token rates per model, read from the
// shared admission counters (so it shows every worker's work) and the
// buckets.
type sampler struct {
	src     Source
	nowFunc func() time.Time
	mu      sync.Mutex
	series  map[string][]sample
	reads   map[string][]reading
}

const keepSamples = 600

func newSampler(src Source) *sampler {
	return &sampler{src: src, nowFunc: time.Now, series: map[string][]sample{}, reads: map[string][]reading{}}
}

// reading is one second's counters of a model: incoming and admitted
// tokens per class (totals since the start), and the tokens its bucket
// had then.
type reading struct {
	at      time.Time
	in, adm map[string]int64
	saved   int64
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
	now := s.nowFunc()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, model := range s.src.Models() {
		b, ok := s.src.Bucket(model)
		if !ok {
			continue
		}
		// the bucket first: what the counters add after it, it had to allow
		avail, err := b.AvailableAll(ctx)
		if err != nil {
			continue
		}
		in, adm, err := s.src.Tokens(ctx, model)
		if err != nil {
			continue
		}
		l := b.Limits()
		rd := reading{at: now, in: in, adm: adm, saved: avail.Tokens}
		reads := append(s.reads[model], rd)
		// keep one reading at or before the period's start: the base
		for len(reads) > 2 && !reads[1].at.After(now.Add(-l.Period)) {
			reads = reads[1:]
		}
		s.reads[model] = reads
		if len(reads) < 2 || now.Sub(reads[0].at) < l.Period*19/20 {
			continue // averages over a whole period only: a shorter one shows the saving spent as a spike
		}
		s.add(model, flowOf(reads[0], reads[len(reads)-2], rd, float64(b.Keys())*float64(l.TokensPerPeriod)/l.Period.Seconds()))
	}
}

// flowOf is the sample at now: the averages since base, and this
// second's admissions per class (since prev).
func flowOf(base, prev, now reading, limit float64) sample {
	dt := now.at.Sub(base.at).Seconds()
	sm := sample{T: now.at.UnixMilli(), Limit: limit, ByClass: map[string]float64{},
		Incoming: float64(sum(now.in)-sum(base.in)) / dt,
		Admitted: float64(sum(now.adm)-sum(base.adm)) / dt,
		Allowed:  limit + float64(base.saved)/dt, Window: dt}
	if d := now.at.Sub(prev.at).Seconds(); d > 0 {
		for _, c := range admission.Classes {
			sm.ByClass[c] = float64(now.adm[c]-prev.adm[c]) / d
		}
	}
	return sm
}

func (s *sampler) add(model string, sm sample) {
	ser := append(s.series[model], sm)
	if len(ser) > keepSamples {
		ser = ser[len(ser)-keepSamples:]
	}
	s.series[model] = ser
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
	GaveUp  map[string]int64            `json:"gave_up"`
	Quotas  []quotaState                `json:"quotas"`
	// Costs are dollars by model and tier; Spend the installations
	// past half their budget this month, most spent first, then those
	// spending most (at most 20).
	Costs   map[string]map[string]float64 `json:"costs"`
	Spend   []tenantSpend                 `json:"spend"`
	Queues  map[string]map[string]int     `json:"queues"`
	Tenants []tenantBacklog               `json:"tenants"`
	// Acceptance is the findings' 👍/👎 by model and kind.
	Acceptance []acceptance `json:"acceptance"`
	Demo       bool         `json:"demo"`
	// PRPages is Dashboard.PRPages: where the PR rows link.
	PRPages string `json:"pr_pages,omitempty"`
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
	// WindowSuspected: the provider's headers look window-limited while
	// the model is configured limiter: bucket.
	WindowSuspected bool `json:"window_suspected,omitempty"`
	// AutoWindow: limiter auto counts in a window now (the provider's
	// headers showed one).
	AutoWindow bool `json:"auto_window,omitempty"`
	// WindowMarginMS: a window limiter holds each admission this much
	// longer than its window now, in this process (measured unless set).
	WindowMarginMS float64 `json:"window_margin_ms,omitempty"`
	// LookAheadMS: a window limiter's admission admits a job whose room
	// frees within this (the measured time from admission to a call).
	LookAheadMS float64 `json:"look_ahead_ms,omitempty"`
	// Keys is each API key's state, with several keys (named by their
	// short hash, never the key).
	Keys []keyState `json:"keys,omitempty"`
}

// keyState is one API key of a model: what its bucket could admit now
// (input and output where the model limits them apart) and its pause.
type keyState struct {
	Hash      string `json:"hash"`
	Available int64  `json:"available"`
	Input     int64  `json:"available_input,omitempty"`
	Output    int64  `json:"available_output,omitempty"`
	Paused    string `json:"paused,omitempty"`
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
	PR string `json:"pr"`
	// Link is the pull request's page (with PRPages set).
	Link     string  `json:"link,omitempty"`
	Tier     string  `json:"tier"`
	Done     int     `json:"done"`
	Total    int     `json:"total"`
	Progress float64 `json:"progress"`
	AgeSec   float64 `json:"age_seconds"`
}

// Spend is an installation's spend this month (UTC) in dollars, with
// the tier of its latest call and that tier's monthly budget (0: none).
type Spend struct {
	Installation    int64
	Tier            string
	Dollars, Budget float64
}

type tenantSpend struct {
	Tenant  string  `json:"tenant"`
	Tier    string  `json:"tier,omitempty"`
	Dollars float64 `json:"dollars"`
	// Budget is the tier's monthly budget (omitted: none), Share the
	// part of it spent.
	Budget float64 `json:"budget,omitempty"`
	Share  float64 `json:"share,omitempty"`
}

// nearBudget is the share of a budget from which an installation is
// listed before those that spend more without one.
const nearBudget = 0.5

// acceptance is one model's findings of one kind: the 👍 and 👎 people
// gave them, and the share that are 👍 (0 with none).
type acceptance struct {
	Model string  `json:"model"`
	Kind  string  `json:"kind"`
	Up    int64   `json:"up"`
	Down  int64   `json:"down"`
	Rate  float64 `json:"rate"`
}

type quotaState struct {
	Tenant string `json:"tenant"`
	Tier   string `json:"tier"`
	Used   int64  `json:"used"`
	Limit  int64  `json:"limit"`
	Reset  string `json:"reset"`
}

func (d *Dashboard) state(ctx context.Context, smp *sampler) dashState {
	src := d.src
	st := dashState{Now: time.Now().UnixMilli(), Classes: map[string]classState{}, Calls: src.CallCounts(ctx), GaveUp: src.GaveUpCounts(ctx), Queues: map[string]map[string]int{}, Demo: d.demo, PRPages: d.PRPages}
	if smp != nil {
		st.Series = smp.snapshot()
	}
	paused := src.Paused(ctx)
	waits := map[string][]time.Duration{}
	for _, model := range src.Models() {
		s, err := src.Stats(ctx, model)
		if err != nil {
			continue
		}
		b, _ := src.Bucket(model)
		l := b.Limits()
		avail, _ := b.AvailableAll(ctx)
		suspected, _ := b.WindowSuspected(ctx)
		counting, _ := b.Counting(ctx)
		ms := modelState{Name: model, LimitPerSecond: float64(b.Keys()) * float64(l.TokensPerPeriod) / l.Period.Seconds(),
			Available: avail.Tokens, Paused: paused[model], Released: s.Released, WindowSuspected: suspected,
			AutoWindow: l.Limiter == ratelimit.LimiterAuto && counting == ratelimit.LimiterWindow}
		if counting == ratelimit.LimiterWindow {
			ms.WindowMarginMS = float64(b.WindowMargin().Microseconds()) / 1000
			ms.LookAheadMS = float64(s.LookAhead.Microseconds()) / 1000
		}
		if b.Keys() > 1 {
			pk := src.PausedKeys(ctx, model)
			for i := range b.Keys() {
				k := keyState{Hash: b.KeyLabel(i), Paused: pk[i]}
				if c, _, err := b.ForKey(i).Available(ctx); err == nil {
					k.Available, k.Input, k.Output = c.Tokens, c.Input, c.Output
				}
				ms.Keys = append(ms.Keys, k)
			}
		}
		st.Models = append(st.Models, ms)
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
		cs.WaitP50, cs.WaitP95 = quantile.Of(ws, .5).Seconds(), quantile.Of(ws, .95).Seconds()
		st.Classes[c] = cs
	}
	runs, _ := src.ActiveRuns(ctx, 25)
	tenants := map[int64]jobs.Tier{}
	for _, r := range runs {
		total := r.SummaryTotal + r.ReviewTotal
		done := r.SummaryDone + r.ReviewDone
		p := 1.0
		if total > 0 {
			p = float64(done) / float64(total)
		}
		ps := prState{PR: r.PR.String(), Tier: string(r.Tier), Done: done, Total: total, Progress: p, AgeSec: time.Since(r.CreatedAt).Seconds()}
		if d.PRPages != "" {
			ps.Link = d.PRPages + url.PathEscape(r.PR.Owner) + "/" + url.PathEscape(r.PR.Repo) + "/" + strconv.Itoa(r.PR.Number)
		}
		st.PRs = append(st.PRs, ps)
		tenants[r.PR.Installation] = r.Tier
	}
	for inst, tier := range tenants {
		if u, limit, ok := src.QuotaUsed(ctx, inst, tier); ok {
			st.Quotas = append(st.Quotas, quotaState{Tenant: strconv.FormatInt(inst, 10), Tier: string(tier), Used: u.Used, Limit: limit, Reset: u.Reset.Format(time.RFC3339)})
		}
	}
	st.Acceptance = []acceptance{}
	for _, a := range src.Acceptance(ctx) {
		st.Acceptance = append(st.Acceptance, acceptance{Model: a.Model, Kind: a.Kind, Up: a.Up, Down: a.Down, Rate: a.Rate()})
	}
	st.Costs = src.Costs(ctx)
	for _, sp := range src.Spend(ctx) {
		ts := tenantSpend{Tenant: strconv.FormatInt(sp.Installation, 10), Tier: sp.Tier, Dollars: sp.Dollars, Budget: sp.Budget}
		if sp.Budget > 0 {
			ts.Share = sp.Dollars / sp.Budget
		}
		st.Spend = append(st.Spend, ts)
	}
	// those past half their budget first, most spent first; then by dollars
	sort.Slice(st.Spend, func(i, j int) bool {
		a, b := st.Spend[i], st.Spend[j]
		if na, nb := a.Share >= nearBudget, b.Share >= nearBudget; na != nb {
			return na
		} else if na && a.Share != b.Share {
			return a.Share > b.Share
		}
		if a.Dollars != b.Dollars {
			return a.Dollars > b.Dollars
		}
		return a.Tenant < b.Tenant
	})
	if len(st.Spend) > 20 {
		st.Spend = st.Spend[:20]
	}
	for _, q := range jobs.Queues {
		if info, err := src.GetQueueInfo(q); err == nil {
			st.Queues[q] = map[string]int{"held": info.Scheduled, "pending": info.Pending, "active": info.Active, "retry": info.Retry, "archived": info.Archived, "completed": info.Completed}
		}
	}
	return st
}

// Page serves the page at / and its script at /dashboard.js (a file, so
// that the page needs no inline script).
func (d *Dashboard) Page() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Write(dashboardHTML)
		case "/dashboard.js":
			w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
			w.Write(dashboardJS)
		default:
			http.NotFound(w, r)
		}
	})
}

// AdminAPI serves /api/: installation plans, and the dashboard's data
// at /api/dashboard unless withDashboard is false.
func (d *Dashboard) AdminAPI(withDashboard bool) http.Handler {
	mux := http.NewServeMux()
	if withDashboard {
		mux.HandleFunc("GET /api/dashboard", func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, http.StatusOK, d.state(r.Context(), d.sampler))
		})
	}
	mux.HandleFunc("GET /api/plans", func(w http.ResponseWriter, r *http.Request) {
		plans, err := d.plans.ListPlans(r.Context())
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
		p, err := d.plans.GetPlan(r.Context(), id)
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
		err = d.plans.UpdatePlan(r.Context(), id, func(p *store.Plan) { p.Tier, p.Reason, p.Explicit = tier, in.Reason, true })
		if err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": err.Error()})
			return
		}
		p, _ := d.plans.GetPlan(r.Context(), id)
		writeJSON(w, http.StatusOK, p)
	})
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
