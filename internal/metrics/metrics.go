// Package metrics owns prq's Prometheus series: counters the process
// bumps (webhook deliveries, LLM calls, admissions) and gauges read from
// the shared admission state at scrape time (at most once per
// Config.CacheFor, however many scrapes arrive), plus the cross-process LLM
// call counts kept in Redis. It reads the scheduler and the queues through
// small interfaces and knows nothing of how the process is wired.
package metrics

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/ratelimit"
	"github.com/prq-dev/prq/store"
)

// Admission is what the metrics read of the admission scheduler.
type Admission interface {
	Models() []string
	Stats(ctx context.Context, model string) (admission.Stats, error)
	Bucket(model string) (*ratelimit.Bucket, bool)
	Paused(ctx context.Context) map[string]string
	PausedKeys(ctx context.Context, model string) map[int]string
}

// Queues is what the metrics read of asynq's queues.
type Queues interface {
	GetQueueInfo(queue string) (*asynq.QueueInfo, error)
}

// Counts is the Redis hash of LLM calls by model and outcome, shared by
// every process.
type Counts interface {
	HIncrBy(ctx context.Context, key, field string, incr int64) *redis.IntCmd
	HGetAll(ctx context.Context, key string) *redis.MapStringStringCmd
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
}

// Metrics are prq's Prometheus series. Labels stay low-cardinality:
// model, class (chat or tier), event, outcome, queue, state.
type Metrics struct {
	counts     *Deferred
	reg        *prometheus.Registry
	deliveries *prometheus.CounterVec
	calls      *prometheus.CounterVec
	unusable   *prometheus.CounterVec
	ignored    *prometheus.CounterVec
	reused     *prometheus.CounterVec
	gaveUp     *prometheus.CounterVec
	admitted   *prometheus.CounterVec
	cost       *prometheus.CounterVec
	wait       *prometheus.HistogramVec
	state      *stateCollector
}

// Config configures the series read from Redis.
type Config struct {
	// CacheFor is how long a reading of the shared state (about 40 Redis
	// commands per model and queue set) serves further scrapes. Defaults
	// to 5s; negative reads on every scrape.
	CacheFor time.Duration
	// NowFunc is the clock. Defaults to time.Now.
	NowFunc func() time.Time
	// SendEvery is how often the hot counters (LLM calls, forge
	// requests) are sent to Redis (Deferred). Defaults to 1s.
	SendEvery time.Duration
}

// New registers the series; adm and queues are read at scrape time, at
// most once per cfg.CacheFor however many scrapes arrive.
func New(adm Admission, queues Queues, counts Counts, cfg Config) *Metrics {
	if cfg.CacheFor == 0 {
		cfg.CacheFor = 5 * time.Second
	}
	if cfg.NowFunc == nil {
		cfg.NowFunc = time.Now
	}
	if cfg.SendEvery <= 0 {
		cfg.SendEvery = time.Second
	}
	d := NewDeferred(counts, cfg.SendEvery)
	m := &Metrics{counts: d, reg: prometheus.NewRegistry(), state: &stateCollector{adm: adm, queues: queues, cacheFor: cfg.CacheFor, now: cfg.NowFunc, flush: d.Flush}}
	m.deliveries = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "prq_webhook_deliveries_total", Help: "Webhook deliveries by event and outcome."}, []string{"event", "outcome"})
	m.calls = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "prq_llm_calls_total", Help: "LLM calls by model and outcome (ok, rate_limited, transient, account, context_length, failed, quota, flex_unavailable: flex processing refused the call, which then goes standard; batch_expired, batch_cancelled, batch_failed, batch_transient: the batch lane did not answer the job, which then goes standard)."}, []string{"model", "outcome"})
	m.unusable = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "prq_llm_unusable_replies_total", Help: "Model replies that could not be read as what was asked for (a review not in the schema), by model and job kind."}, []string{"model", "kind"})
	m.gaveUp = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "prq_jobs_gave_up_total", Help: "Jobs that spent their retry budget and ended with a recorded reason, by job kind (summary, review, chat, plan, finalize) and reason (rate_limited, account, transient, github_rate_limited, failed)."}, []string{"kind", "reason"})
	m.admitted = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "prq_admitted_jobs_total", Help: "Jobs admitted by this process, by model, class and path (chat, fair, aged, reserve, backfill, same_pr, reject)."}, []string{"model", "class", "via"})
	m.wait = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "prq_admission_wait_seconds", Help: "Time from a ticket's registration to its admission.",
		Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}}, []string{"model", "class"})
	m.ignored = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "prq_llm_reply_ignored_fields_total", Help: "Fields of readable model replies that prq ignored (fields of the model's own beside the review asked for), by model and job kind: a model drifting from the shape asked for."}, []string{"model", "kind"})
	m.reused = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "prq_llm_reused_total", Help: "File results reused instead of bought: the same prompt (file, context, model) was answered already, for a head this one replaced or a run reopened; by model and job kind."}, []string{"model", "kind"})
	m.cost = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "prq_llm_cost_dollars_total", Help: "What LLM calls cost at their models' prices, in US dollars, by model, tier (chat counts under its tenant's tier) and lane (sync: the standard synchronous API; flex: OpenAI's flex processing, at half price). Calls of a model without prices are not counted."}, []string{"model", "tier", "lane"})
	m.reg.MustRegister(m.cost, m.reused, m.deliveries, m.calls, m.unusable, m.ignored, m.gaveUp, m.admitted, m.wait, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), m.state)
	return m
}

// Counts are the process's counters in Redis, the hot ones deferred
// (Deferred): for GitHubCounter and GitLabCounter, and for reading the
// counts with this process's own included.
func (m *Metrics) Counts() *Deferred { return m.counts }

// Close sends the deferred counters (before the process closes Redis).
func (m *Metrics) Close(ctx context.Context) error { return m.counts.Close(ctx) }

// Register adds another component's series (the gateway's).
func (m *Metrics) Register(cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := m.reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// Handler serves /metrics.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// CountDelivery counts a webhook delivery (webhook.Handler.Count).
func (m *Metrics) CountDelivery(event, outcome string) {
	switch event {
	case "pull_request", "issue_comment", "pull_request_review_comment", "installation", "installation_repositories", "marketplace_purchase", "ping",
		"gitlab_merge_request", "gitlab_note", "gitlab_other":
	default:
		event = "other" // bounded labels, whatever arrives
	}
	m.deliveries.WithLabelValues(event, outcome).Inc()
}

// CountIgnored counts the fields of a readable model reply that prq
// ignored (a model adding its own, e.g. "comments[].severity"). The
// names stay out of the labels (a model may invent any number); they
// are logged at debug.
func (m *Metrics) CountIgnored(model, kind string, fields []string) {
	m.ignored.WithLabelValues(model, kind).Add(float64(len(fields)))
}

// CountReused counts a file result reused instead of bought.
func (m *Metrics) CountReused(model, kind string) {
	m.reused.WithLabelValues(model, kind).Inc()
}

// CountCost adds a priced call's cost here and in Redis: by model and
// tier for every process's dashboard, and by installation for the
// month (UTC) it was made in, kept 400 days.
func (m *Metrics) CountCost(model, tier, lane string, installation int64, dollars float64) {
	if dollars <= 0 {
		return
	}
	m.cost.WithLabelValues(model, tier, lane).Add(dollars)
	ctx := context.Background()
	k := spendKey(time.Now())
	// one round trip for the three writes
	inst := strconv.FormatInt(installation, 10)
	_, _ = m.counts.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.HIncrByFloat(ctx, costKey, model+"|"+tier, dollars)
		p.HIncrByFloat(ctx, k, inst, dollars)
		p.Expire(ctx, k, 400*24*time.Hour)
		p.HSet(ctx, k+":tier", inst, tier) // the tier whose budget it is measured against
		p.Expire(ctx, k+":tier", 400*24*time.Hour)
		return nil
	})
}

// CountGatewayCost adds a priced gateway call's cost by model, the
// key's tier and the lane that served it, here and in Redis (the dashboard's cost by model and
// tier); the key's own spend the gateway keeps.
func (m *Metrics) CountGatewayCost(model, tier, lane string, dollars float64) {
	if dollars <= 0 {
		return
	}
	m.cost.WithLabelValues(model, tier, lane).Add(dollars)
	ctx := context.Background()
	_, _ = m.counts.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.HIncrByFloat(ctx, costKey, model+"|"+tier, dollars)
		return nil
	})
}

const costKey = "prq:llm:cost"

func spendKey(t time.Time) string { return "prq:spend:" + t.UTC().Format("2006-01") }

// Costs returns every process's LLM spend in dollars by model and tier.
func Costs(ctx context.Context, counts Counts) map[string]map[string]float64 {
	out := map[string]map[string]float64{}
	m, err := counts.HGetAll(ctx, costKey).Result()
	if err != nil {
		return out
	}
	for k, v := range m {
		model, tier, ok := strings.Cut(k, "|")
		if !ok {
			continue
		}
		f, _ := strconv.ParseFloat(v, 64)
		if out[model] == nil {
			out[model] = map[string]float64{}
		}
		out[model][tier] = f
	}
	return out
}

// BudgetThresholds are the shares of a monthly budget, in percent, that
// prq_budget_installations counts installations past.
var BudgetThresholds = []int{50, 75, 90, 100}

// Spending is an installation's spend in a month (UTC) against its
// tier's monthly budget (0: the tier has none).
type Spending struct {
	Installation int64
	// Tier is the tier of its latest priced call this month.
	Tier            string
	Dollars, Budget float64
}

// Share is the part of the budget spent (0 without a budget).
func (s Spending) Share() float64 {
	if s.Budget <= 0 {
		return 0
	}
	return s.Dollars / s.Budget
}

// Spendings returns each installation's spend in the month (UTC)
// holding t, with its tier and that tier's budget in budgets (dollars
// per month by tier name).
func Spendings(ctx context.Context, counts Counts, t time.Time, budgets map[string]float64) ([]Spending, error) {
	dollars, err := counts.HGetAll(ctx, spendKey(t)).Result()
	if err != nil {
		return nil, fmt.Errorf("metrics: read the month's spend: %w", err)
	}
	tiers, err := counts.HGetAll(ctx, spendKey(t)+":tier").Result()
	if err != nil {
		return nil, fmt.Errorf("metrics: read the month's tiers: %w", err)
	}
	out := make([]Spending, 0, len(dollars))
	for field, v := range dollars {
		inst, err := strconv.ParseInt(field, 10, 64)
		if err != nil {
			continue
		}
		d, _ := strconv.ParseFloat(v, 64)
		tier := tiers[field]
		out = append(out, Spending{Installation: inst, Tier: tier, Dollars: d, Budget: budgets[tier]})
	}
	return out, nil
}

// WatchBudgets sets the monthly budget of each tier that has one
// (tiers.<name>.budget_dollars): prq_budget_installations counts the
// installations past each of BudgetThresholds of theirs.
func (m *Metrics) WatchBudgets(budgets map[string]float64) {
	m.state.mu.Lock()
	defer m.state.mu.Unlock()
	m.state.budgets = maps.Clone(budgets)
}

// descBudget is prq_budget_installations, from Redis.
var descBudget = prometheus.NewDesc("prq_budget_installations", "Installations of a tier with a monthly budget (tiers.<name>.budget_dollars) whose spend this month (UTC, at the models' prices) "+
	"has reached the threshold's percent of it (50, 75, 90, 100). The dashboard names them.", []string{"tier", "threshold"}, nil)

// budgetMetrics counts the installations past each threshold of their
// tier's budget, for every tier with one.
func budgetMetrics(ctx context.Context, counts Counts, now time.Time, budgets map[string]float64, ch chan<- prometheus.Metric) {
	spent, err := Spendings(ctx, counts, now, budgets)
	if err != nil {
		return // no figure rather than a wrong one (prq_redis_up says why)
	}
	past := map[string][]int{}
	for tier := range budgets {
		past[tier] = make([]int, len(BudgetThresholds))
	}
	for _, s := range spent {
		if s.Budget <= 0 {
			continue
		}
		for i, th := range BudgetThresholds {
			if s.Dollars*100 >= float64(th)*s.Budget {
				past[s.Tier][i]++
			}
		}
	}
	for tier, n := range past {
		for i, th := range BudgetThresholds {
			ch <- prometheus.MustNewConstMetric(descBudget, prometheus.GaugeValue, float64(n[i]), tier, strconv.Itoa(th))
		}
	}
}

// CountUnusable counts a model reply that could not be read; the
// dashboard shows it with the calls (outcome "unusable").
func (m *Metrics) CountUnusable(model, kind string) {
	m.unusable.WithLabelValues(model, kind).Inc()
	m.counts.HIncrBy(context.Background(), callsKey, model+"|unusable", 1)
}

// CountCall counts an LLM call here and in Redis (the dashboard may run
// in another process).
func (m *Metrics) CountCall(model, outcome string) {
	m.calls.WithLabelValues(model, outcome).Inc()
	m.counts.HIncrBy(context.Background(), callsKey, model+"|"+outcome, 1)
}

const callsKey = "prq:llm:calls"

// CountGaveUp counts a job that spent its retry budget
// (workers.Config.GaveUpFunc), here and in Redis for the dashboard.
func (m *Metrics) CountGaveUp(kind, reason string) {
	m.gaveUp.WithLabelValues(kind, reason).Inc()
	m.counts.HIncrBy(context.Background(), gaveUpKey, kind+"|"+reason, 1)
}

const gaveUpKey = "prq:jobs:gave_up"

// CountLifecycle counts a life-cycle repair or refusal in Redis, where
// serve exports every process's as prq_lifecycle_total (event and
// reason are prq's own bounded words: see the series' help).
func (m *Metrics) CountLifecycle(event, reason string) {
	m.counts.HIncrBy(context.Background(), lifecycleKey, event+"|"+reason, 1)
}

const lifecycleKey = "prq:lifecycle"

// CountDecorationError counts a failed decoration write (a check run's)
// in Redis, where serve exports every process's as
// prq_github_decoration_errors_total (workers.Config.DecorationErrorFunc).
func (m *Metrics) CountDecorationError(kind, status string) {
	m.counts.HIncrBy(context.Background(), decorationKey, kind+"|"+status, 1)
}

const decorationKey = "prq:github:decoration_errors"

// CountJobFallback counts a summary or review job that moved to a
// fallback model (workers.Config.FallbackFunc) in Redis, where serve
// exports every process's as prq_jobs_fallbacks_total (models are
// configured names; reason is provider or paused).
func (m *Metrics) CountJobFallback(from, to, reason string) {
	m.counts.HIncrBy(context.Background(), fallbackKey, from+"|"+to+"|"+reason, 1)
}

const fallbackKey = "prq:jobs:fallbacks"

// FallbackCounts returns every process's job moves to a fallback model,
// by "from|to|reason".
func FallbackCounts(ctx context.Context, counts Counts) map[string]int64 {
	return hashCounts(ctx, counts, fallbackKey)
}

// GaveUpCounts returns every process's jobs that spent their retry
// budget, by "kind|reason".
func GaveUpCounts(ctx context.Context, counts Counts) map[string]int64 {
	return hashCounts(ctx, counts, gaveUpKey)
}

// hashCounts reads a hash of counters (none when it cannot be read).
func hashCounts(ctx context.Context, counts Counts, key string) map[string]int64 {
	out := map[string]int64{}
	m, err := counts.HGetAll(ctx, key).Result()
	if err != nil {
		return out
	}
	for k, v := range m {
		n, _ := strconv.ParseInt(v, 10, 64)
		out[k] = n
	}
	return out
}

// CallCounts returns every process's LLM call counts by model and outcome.
func CallCounts(ctx context.Context, counts Counts) map[string]map[string]int64 {
	out := map[string]map[string]int64{}
	m, err := counts.HGetAll(ctx, callsKey).Result()
	if err != nil {
		return out
	}
	for k, v := range m {
		model, outcome, ok := strings.Cut(k, "|")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		if out[model] == nil {
			out[model] = map[string]int64{}
		}
		out[model][outcome] = n
	}
	return out
}

// ObserveAdmission records an admission (admission.Scheduler.Observe).
func (m *Metrics) ObserveAdmission(a admission.Admitted) {
	m.admitted.WithLabelValues(a.Model, a.Class, a.Via).Inc()
	m.wait.WithLabelValues(a.Model, a.Class).Observe(a.Waited.Seconds())
}

var (
	descBacklog    = prometheus.NewDesc("prq_admission_backlog_jobs", "Tickets waiting for admission.", []string{"model", "class"}, nil)
	descInTok      = prometheus.NewDesc("prq_admission_incoming_tokens_total", "Estimated tokens of jobs registered for admission.", []string{"model", "class"}, nil)
	descAdmTok     = prometheus.NewDesc("prq_admission_admitted_tokens_total", "Estimated tokens admitted (all processes).", []string{"model", "class"}, nil)
	descAhead      = prometheus.NewDesc("prq_admission_ahead_of_fifo_tokens_total", "Tokens admitted ahead of an older job (what prioritisation moved forward).", []string{"model", "class"}, nil)
	descBehind     = prometheus.NewDesc("prq_admission_behind_fifo_tokens_total", "Tokens by which a class's oldest job was passed.", []string{"model", "class"}, nil)
	descReleased   = prometheus.NewDesc("prq_admission_released_jobs", "Admitted jobs not yet started.", []string{"model"}, nil)
	descAvail      = prometheus.NewDesc("prq_bucket_available_tokens", "Tokens the model's shared bucket could admit now (summed over its API keys).", []string{"model"}, nil)
	descLimit      = prometheus.NewDesc("prq_bucket_limit_tokens_per_second", "The model's token limit, per second (its per-key limit times its API keys).", []string{"model"}, nil)
	descPaused     = prometheus.NewDesc("prq_model_paused", "1 when the model's admissions are paused (account problem).", []string{"model"}, nil)
	descKeysPaused = prometheus.NewDesc("prq_model_keys_paused", "How many of a model's several API keys are paused (an account problem on that key); its other keys keep serving.", []string{"model"}, nil)
	descQueue      = prometheus.NewDesc("prq_queue_tasks", "asynq tasks per queue and state (scheduled holds the jobs waiting for admission).", []string{"queue", "state"}, nil)
	descWindow     = prometheus.NewDesc("prq_provider_window_suspected", "1 when the provider's rate-limit headers look window-limited while the model is configured limiter: bucket (set limiter: window).", []string{"model"}, nil)
	descCounting   = prometheus.NewDesc("prq_limiter_counts_in_window", "1 when the model's limiter counts in a window now: limiter window, or limiter auto once the provider's headers showed one (its first API key's).", []string{"model"}, nil)
	descLookAhead  = prometheus.NewDesc("prq_admission_lookahead_seconds", "How far ahead admission of a window-limited model admits now: the measured time its jobs take from admission to their call (the lag to the start and the handler's preparation, smoothed, each with twice its mean deviation; at most a tenth of the window). A job admitted for room that has not freed yet waits for it at its call. 0 for a token bucket.", []string{"model"}, nil)
	descMargin     = prometheus.NewDesc("prq_window_margin_seconds", "How much longer than its window the model's window limiter holds each admission now, in this process: window_margin as set, else twice the longest way to the provider its calls measured over the last two windows (at least 5 ms, at most window/60; window/60 until measured). 0 for a token bucket.", []string{"model"}, nil)
	descWinLike    = prometheus.NewDesc("prq_provider_window_like_reports", "Provider replies in the last day whose rate-limit headers only a window limiter explains (all processes).", []string{"model"}, nil)
	descOldest     = prometheus.NewDesc("prq_admission_oldest_wait_seconds", "Age of the oldest ticket waiting for admission (0 when none waits).", []string{"model"}, nil)
	descAging      = prometheus.NewDesc("prq_admission_aging_seconds", "The aging bound: a job waiting this long goes first (scheduler.aging).", nil, nil)
	descRedisUp    = prometheus.NewDesc("prq_redis_up", "1 when Redis answered PING at scrape time.", nil, nil)
	descRedisMem   = prometheus.NewDesc("prq_redis_memory_used_bytes", "Redis used_memory (INFO memory).", nil, nil)
	descRedisMax   = prometheus.NewDesc("prq_redis_memory_max_bytes", "Redis maxmemory (0: no limit).", nil, nil)
	descGitHub     = prometheus.NewDesc("prq_github_requests_all_total", "GitHub API requests of every process (from Redis), by kind (read, write, token) and outcome (ok, rate_limited, refused, not_found, failed, error).", []string{"kind", "outcome"}, nil)
	descGitLab     = prometheus.NewDesc("prq_gitlab_requests_all_total", "GitLab API requests of every process (from Redis), by kind (read, write) and outcome (ok, rate_limited, refused, not_found, failed, error).", []string{"kind", "outcome"}, nil)
	descAllCalls   = prometheus.NewDesc("prq_llm_calls_all_total", "LLM calls of every process (from Redis), by model and outcome; prq_llm_calls_total counts this process's only.", []string{"model", "outcome"}, nil)
)

// descLifecycle is prq_lifecycle_total, from Redis.
var descLifecycle = prometheus.NewDesc("prq_lifecycle_total", "Pull-request life-cycle repairs and refusals of every process (from Redis), by event and reason: "+
	"run_finalized (a run whose files were all done but never finalized, finalized by the reconciler), run_stuck (a run still running past the bound, finalized with what it has), "+
	"job_skipped (work of an installation that is deleted, suspended or whose token GitHub refuses, dropped without a call).", []string{"event", "reason"}, nil)

// descDecoration is prq_github_decoration_errors_total, from Redis.
var descDecoration = prometheus.NewDesc("prq_github_decoration_errors_total", "Failed GitHub writes of decorations of every process (from Redis): check runs, by kind "+
	"(check_run_queued, check_run_progress, check_run_complete) and status (GitHub's HTTP status such as 403, 404, 422, 500; rate_limited, timeout, network, other). "+
	"Summaries, reviews and replies never wait for them.", []string{"kind", "status"}, nil)

// descFallback is prq_jobs_fallbacks_total, from Redis.
var descFallback = prometheus.NewDesc("prq_jobs_fallbacks_total", "Summary and review jobs of every process (from Redis) moved from a model to its next fallback, by model, fallback and reason "+
	"(provider: the provider failed the call; paused: the model, or every key of it, is paused).", []string{"from", "to", "reason"}, nil)

// descVotes and descAcceptance are the findings' 👍/👎, from Redis.
var (
	descVotes = prometheus.NewDesc("prq_review_finding_votes", "The 👍 (vote=up) and 👎 (vote=down) people gave prq's findings (its review line comments), each person once per comment, "+
		"prq's own reactions left out, as last read (at each later finalize of the pull request), by the model that raised them and kind (suggestion: posted with a committable suggestion; prose).", []string{"model", "kind", "vote"}, nil)
	descAcceptance = prometheus.NewDesc("prq_review_acceptance_ratio", "The share of prq_review_finding_votes that are 👍, by model and kind (only where there are votes).", []string{"model", "kind"}, nil)
)

// Shared is what the metrics read of Redis itself (a go-redis client).
type Shared interface {
	Counts
	Ping(ctx context.Context) *redis.StatusCmd
	Info(ctx context.Context, section ...string) *redis.StringCmd
}

// Watch adds the series read from Redis itself at scrape time: Redis up
// and its memory, every process's LLM calls and GitHub requests (counted
// in Redis), and the aging bound the alert rules compare waits with.
func (m *Metrics) Watch(shared Shared, aging time.Duration) {
	m.state.mu.Lock()
	m.state.shared, m.state.aging = shared, aging
	m.state.mu.Unlock()
}

// infoInt reads one integer field of Redis INFO text.
func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func infoInt(info, field string) float64 {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return n
		}
	}
	return 0
}

// stateCollector reads shared state from Redis at scrape time, and
// keeps what it read for cacheFor: scrapes (several Prometheus servers,
// or anyone who can reach /metrics) cost Redis nothing in between.
type stateCollector struct {
	adm      Admission
	queues   Queues
	cacheFor time.Duration
	now      func() time.Time
	shared   Shared                      // nil: no Redis-wide series
	flush    func(context.Context) error // this process's deferred counters, sent before a reading
	aging    time.Duration
	budgets  map[string]float64 // monthly dollars by tier (WatchBudgets)

	mu     sync.Mutex // held while reading, so concurrent scrapes share one reading
	at     time.Time
	cached []prometheus.Metric
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descBacklog, descInTok, descAdmTok, descAhead, descBehind, descReleased, descAvail, descLimit, descPaused, descKeysPaused, descQueue,
		descOldest, descAging, descRedisUp, descRedisMem, descRedisMax, descAllCalls, descGitHub, descGitLab, descWindow, descWinLike, descMargin, descLookAhead} {
		ch <- d
	}
	ch <- descLifecycle
	ch <- descDecoration
	ch <- descVotes
	ch <- descAcceptance
	ch <- descFallback
	ch <- descBudget
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := c.now(); c.cached == nil || c.cacheFor < 0 || now.Sub(c.at) >= c.cacheFor || now.Before(c.at) {
		var fresh []prometheus.Metric
		buf := make(chan prometheus.Metric)
		done := make(chan struct{})
		go func() {
			for m := range buf {
				fresh = append(fresh, m)
			}
			close(done)
		}()
		c.read(buf)
		close(buf)
		<-done
		c.cached, c.at = fresh, now
	}
	for _, m := range c.cached {
		ch <- m
	}
}

// read reads the shared state from Redis.
func (c *stateCollector) read(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if c.shared != nil {
		ch <- prometheus.MustNewConstMetric(descAging, prometheus.GaugeValue, c.aging.Seconds())
		if err := c.shared.Ping(ctx).Err(); err != nil {
			ch <- prometheus.MustNewConstMetric(descRedisUp, prometheus.GaugeValue, 0)
			return // every other series comes from Redis
		}
		ch <- prometheus.MustNewConstMetric(descRedisUp, prometheus.GaugeValue, 1)
		_ = c.flush(ctx) // what fails stays pending: the reading shows what Redis has
		if info, err := c.shared.Info(ctx, "memory").Result(); err == nil {
			ch <- prometheus.MustNewConstMetric(descRedisMem, prometheus.GaugeValue, infoInt(info, "used_memory"))
			ch <- prometheus.MustNewConstMetric(descRedisMax, prometheus.GaugeValue, infoInt(info, "maxmemory"))
		}
		for model, outcomes := range CallCounts(ctx, c.shared) {
			for outcome, n := range outcomes {
				ch <- prometheus.MustNewConstMetric(descAllCalls, prometheus.CounterValue, float64(n), model, outcome)
			}
		}
		if m, err := c.shared.HGetAll(ctx, lifecycleKey).Result(); err == nil {
			for k, v := range m {
				if event, reason, ok := strings.Cut(k, "|"); ok {
					n, _ := strconv.ParseFloat(v, 64)
					ch <- prometheus.MustNewConstMetric(descLifecycle, prometheus.CounterValue, n, event, reason)
				}
			}
		}
		if m, err := c.shared.HGetAll(ctx, decorationKey).Result(); err == nil {
			for k, v := range m {
				if kind, status, ok := strings.Cut(k, "|"); ok {
					n, _ := strconv.ParseFloat(v, 64)
					ch <- prometheus.MustNewConstMetric(descDecoration, prometheus.CounterValue, n, kind, status)
				}
			}
		}
		if acc, err := store.ReadAcceptance(ctx, c.shared); err == nil {
			for _, a := range acc {
				ch <- prometheus.MustNewConstMetric(descVotes, prometheus.GaugeValue, float64(a.Up), a.Model, a.Kind, "up")
				ch <- prometheus.MustNewConstMetric(descVotes, prometheus.GaugeValue, float64(a.Down), a.Model, a.Kind, "down")
				if a.Up+a.Down > 0 {
					ch <- prometheus.MustNewConstMetric(descAcceptance, prometheus.GaugeValue, a.Rate(), a.Model, a.Kind)
				}
			}
		}
		if len(c.budgets) > 0 {
			budgetMetrics(ctx, c.shared, c.now(), c.budgets, ch)
		}
		for k, n := range FallbackCounts(ctx, c.shared) {
			if from, rest, ok := strings.Cut(k, "|"); ok {
				if to, reason, ok := strings.Cut(rest, "|"); ok {
					ch <- prometheus.MustNewConstMetric(descFallback, prometheus.CounterValue, float64(n), from, to, reason)
				}
			}
		}
		for key, desc := range map[string]*prometheus.Desc{githubKey: descGitHub, gitlabKey: descGitLab} {
			if m, err := c.shared.HGetAll(ctx, key).Result(); err == nil {
				for k, v := range m {
					if kind, outcome, ok := strings.Cut(k, "|"); ok {
						n, _ := strconv.ParseFloat(v, 64)
						ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, n, kind, outcome)
					}
				}
			}
		}
	}
	paused := c.adm.Paused(ctx)
	for _, model := range c.adm.Models() {
		st, err := c.adm.Stats(ctx, model)
		if err != nil {
			continue
		}
		for _, class := range admission.Classes {
			ch <- prometheus.MustNewConstMetric(descBacklog, prometheus.GaugeValue, float64(st.Backlog[class]), model, class)
			ch <- prometheus.MustNewConstMetric(descInTok, prometheus.CounterValue, float64(st.InTokens[class]), model, class)
			ch <- prometheus.MustNewConstMetric(descAdmTok, prometheus.CounterValue, float64(st.AdmTokens[class]), model, class)
			ch <- prometheus.MustNewConstMetric(descAhead, prometheus.CounterValue, float64(st.AheadTokens[class]), model, class)
			ch <- prometheus.MustNewConstMetric(descBehind, prometheus.CounterValue, float64(st.BehindTokens[class]), model, class)
		}
		ch <- prometheus.MustNewConstMetric(descReleased, prometheus.GaugeValue, float64(st.Released), model)
		ch <- prometheus.MustNewConstMetric(descLookAhead, prometheus.GaugeValue, st.LookAhead.Seconds(), model)
		if b, ok := c.adm.Bucket(model); ok {
			if avail, err := b.AvailableAll(ctx); err == nil {
				ch <- prometheus.MustNewConstMetric(descAvail, prometheus.GaugeValue, float64(avail.Tokens), model)
			}
			l := b.Limits()
			ch <- prometheus.MustNewConstMetric(descLimit, prometheus.GaugeValue, float64(b.Keys())*float64(l.TokensPerPeriod)/l.Period.Seconds(), model)
			if n, err := b.WindowLikeReports(ctx); err == nil {
				ch <- prometheus.MustNewConstMetric(descWinLike, prometheus.GaugeValue, float64(n), model)
			}
			if sus, err := b.WindowSuspected(ctx); err == nil {
				ch <- prometheus.MustNewConstMetric(descWindow, prometheus.GaugeValue, b2f(sus), model)
			}
			ch <- prometheus.MustNewConstMetric(descMargin, prometheus.GaugeValue, b.WindowMargin().Seconds(), model)
			if counting, err := b.Counting(ctx); err == nil {
				ch <- prometheus.MustNewConstMetric(descCounting, prometheus.GaugeValue, b2f(counting == ratelimit.LimiterWindow), model)
			}
		}
		ch <- prometheus.MustNewConstMetric(descOldest, prometheus.GaugeValue, st.OldestWait.Seconds(), model)
		p := 0.0
		if _, ok := paused[model]; ok {
			p = 1
		}
		ch <- prometheus.MustNewConstMetric(descPaused, prometheus.GaugeValue, p, model)
		ch <- prometheus.MustNewConstMetric(descKeysPaused, prometheus.GaugeValue, float64(len(c.adm.PausedKeys(ctx, model))), model)
	}
	for _, q := range jobs.Queues {
		info, err := c.queues.GetQueueInfo(q)
		if err != nil {
			continue
		}
		for state, n := range map[string]int{"pending": info.Pending, "active": info.Active, "scheduled": info.Scheduled,
			"retry": info.Retry, "archived": info.Archived, "completed": info.Completed} {
			ch <- prometheus.MustNewConstMetric(descQueue, prometheus.GaugeValue, float64(n), q, state)
		}
	}
}

const githubKey = "prq:github:requests"

// GitHubCounter counts GitHub API requests in Redis by kind (read, write,
// token) and outcome, so that serve exports what every worker did.
type GitHubCounter struct {
	Counts Counts
	Next   http.RoundTripper
}

// RoundTrip makes the request and counts it.
func (g GitHubCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	kind := "write"
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		kind = "read"
	}
	if strings.HasSuffix(r.URL.Path, "/access_tokens") {
		kind = "token"
	}
	resp, err := g.Next.RoundTrip(r)
	g.Counts.HIncrBy(context.WithoutCancel(r.Context()), githubKey, kind+"|"+outcomeOf(resp, err), 1)
	return resp, err
}

// outcomeOf names a forge request's outcome: ok, rate_limited, refused,
// not_found, failed or error (no answer).
func outcomeOf(resp *http.Response, err error) string {
	if err != nil {
		return "error"
	}
	switch s := resp.StatusCode; {
	case s < 400:
		return "ok"
	case s == http.StatusTooManyRequests || (s == http.StatusForbidden && (resp.Header.Get("Retry-After") != "" || resp.Header.Get("X-RateLimit-Remaining") == "0")):
		return "rate_limited"
	case s == http.StatusUnprocessableEntity || s == http.StatusForbidden:
		return "refused"
	case s == http.StatusNotFound:
		return "not_found"
	}
	return "failed"
}

const gitlabKey = "prq:gitlab:requests"

// GitLabCounter counts GitLab API requests in Redis by kind (read,
// write) and outcome, as GitHubCounter does GitHub's; GitLab's 400 (an
// invalid position, a status transition it refuses) is a refusal.
type GitLabCounter struct {
	Counts Counts
	Next   http.RoundTripper
}

// RoundTrip makes the request and counts it.
func (g GitLabCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	kind := "write"
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		kind = "read"
	}
	resp, err := g.Next.RoundTrip(r)
	outcome := outcomeOf(resp, err)
	if err == nil && resp.StatusCode == http.StatusBadRequest {
		outcome = "refused"
	}
	g.Counts.HIncrBy(context.WithoutCancel(r.Context()), gitlabKey, kind+"|"+outcome, 1)
	return resp, err
}
