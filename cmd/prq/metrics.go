package main

import (
	"context"
	"crypto/subtle"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/jobs"
)

// metrics are prq's Prometheus series. Labels stay low-cardinality:
// model, class (chat or tier), event, outcome, queue, state.
type metrics struct {
	a          *app
	reg        *prometheus.Registry
	deliveries *prometheus.CounterVec
	calls      *prometheus.CounterVec
	admitted   *prometheus.CounterVec
	wait       *prometheus.HistogramVec
}

func newMetrics(a *app) *metrics {
	m := &metrics{a: a, reg: prometheus.NewRegistry()}
	m.deliveries = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "prq_webhook_deliveries_total", Help: "Webhook deliveries by event and outcome."}, []string{"event", "outcome"})
	m.calls = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "prq_llm_calls_total", Help: "LLM calls by model and outcome (ok, rate_limited, transient, account, context_length, failed, quota)."}, []string{"model", "outcome"})
	m.admitted = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "prq_admitted_jobs_total", Help: "Jobs admitted by this process, by model, class and path (chat, fair, aged)."}, []string{"model", "class", "via"})
	m.wait = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "prq_admission_wait_seconds", Help: "Time from a ticket's registration to its admission.",
		Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}}, []string{"model", "class"})
	m.reg.MustRegister(m.deliveries, m.calls, m.admitted, m.wait, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), &stateCollector{a: a})
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

func (m *metrics) countDelivery(event, outcome string) {
	switch event {
	case "pull_request", "issue_comment", "pull_request_review_comment", "installation", "installation_repositories", "marketplace_purchase", "ping":
	default:
		event = "other" // bounded labels, whatever arrives
	}
	m.deliveries.WithLabelValues(event, outcome).Inc()
}

// countCall counts an LLM call here and in Redis (the dashboard may run
// in another process).
func (m *metrics) countCall(model, outcome string) {
	m.calls.WithLabelValues(model, outcome).Inc()
	m.a.rdb.HIncrBy(context.Background(), callsKey, model+"|"+outcome, 1)
}

const callsKey = "prq:llm:calls"

// callCounts returns every process's LLM call counts by model and outcome.
func (a *app) callCounts(ctx context.Context) map[string]map[string]int64 {
	out := map[string]map[string]int64{}
	m, err := a.rdb.HGetAll(ctx, callsKey).Result()
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

func (m *metrics) observeAdmission(a admission.Admitted) {
	m.admitted.WithLabelValues(a.Model, a.Class, a.Via).Inc()
	m.wait.WithLabelValues(a.Model, a.Class).Observe(a.Waited.Seconds())
}

var (
	descBacklog  = prometheus.NewDesc("prq_admission_backlog_jobs", "Tickets waiting for admission.", []string{"model", "class"}, nil)
	descInTok    = prometheus.NewDesc("prq_admission_incoming_tokens_total", "Estimated tokens of jobs registered for admission.", []string{"model", "class"}, nil)
	descAdmTok   = prometheus.NewDesc("prq_admission_admitted_tokens_total", "Estimated tokens admitted (all processes).", []string{"model", "class"}, nil)
	descAhead    = prometheus.NewDesc("prq_admission_ahead_of_fifo_tokens_total", "Tokens admitted ahead of an older job (what prioritisation moved forward).", []string{"model", "class"}, nil)
	descBehind   = prometheus.NewDesc("prq_admission_behind_fifo_tokens_total", "Tokens by which a class's oldest job was passed.", []string{"model", "class"}, nil)
	descReleased = prometheus.NewDesc("prq_admission_released_jobs", "Admitted jobs not yet started.", []string{"model"}, nil)
	descAvail    = prometheus.NewDesc("prq_bucket_available_tokens", "Tokens the model's shared bucket could admit now.", []string{"model"}, nil)
	descLimit    = prometheus.NewDesc("prq_bucket_limit_tokens_per_second", "The model's token limit, per second.", []string{"model"}, nil)
	descPaused   = prometheus.NewDesc("prq_model_paused", "1 when the model's admissions are paused (account problem).", []string{"model"}, nil)
	descQueue    = prometheus.NewDesc("prq_queue_tasks", "asynq tasks per queue and state (scheduled holds the jobs waiting for admission).", []string{"queue", "state"}, nil)
	descOldest   = prometheus.NewDesc("prq_admission_oldest_wait_seconds", "Age of the oldest ticket waiting for admission (0 when none waits).", []string{"model"}, nil)
	descAging    = prometheus.NewDesc("prq_admission_aging_seconds", "The aging bound: a job waiting this long goes first (scheduler.aging).", nil, nil)
	descRedisUp  = prometheus.NewDesc("prq_redis_up", "1 when Redis answered PING at scrape time.", nil, nil)
	descRedisMem = prometheus.NewDesc("prq_redis_memory_used_bytes", "Redis used_memory (INFO memory).", nil, nil)
	descRedisMax = prometheus.NewDesc("prq_redis_memory_max_bytes", "Redis maxmemory (0: no limit).", nil, nil)
	descGitHub   = prometheus.NewDesc("prq_github_requests_all_total", "GitHub API requests of every process (from Redis), by kind (read, write, token) and outcome (ok, rate_limited, refused, not_found, failed, error).", []string{"kind", "outcome"}, nil)
	descAllCalls = prometheus.NewDesc("prq_llm_calls_all_total", "LLM calls of every process (from Redis), by model and outcome; prq_llm_calls_total counts this process's only.", []string{"model", "outcome"}, nil)
)

// stateCollector reads shared state from Redis at scrape time.
type stateCollector struct{ a *app }

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descBacklog, descInTok, descAdmTok, descAhead, descBehind, descReleased, descAvail, descLimit, descPaused, descQueue,
		descOldest, descAging, descRedisUp, descRedisMem, descRedisMax, descAllCalls, descGitHub} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	ch <- prometheus.MustNewConstMetric(descAging, prometheus.GaugeValue, c.a.cfg.Scheduler.Aging.D().Seconds())
	if err := c.a.rdb.Ping(ctx).Err(); err != nil {
		ch <- prometheus.MustNewConstMetric(descRedisUp, prometheus.GaugeValue, 0)
		return // every other series comes from Redis
	}
	ch <- prometheus.MustNewConstMetric(descRedisUp, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(descRedisMem, prometheus.GaugeValue, float64(redisInfoInt(ctx, c.a.rdb, "memory", "used_memory")))
	ch <- prometheus.MustNewConstMetric(descRedisMax, prometheus.GaugeValue, float64(redisInfoInt(ctx, c.a.rdb, "memory", "maxmemory")))
	for model, outcomes := range c.a.callCounts(ctx) {
		for outcome, n := range outcomes {
			ch <- prometheus.MustNewConstMetric(descAllCalls, prometheus.CounterValue, float64(n), model, outcome)
		}
	}
	if m, err := c.a.rdb.HGetAll(ctx, githubKey).Result(); err == nil {
		for k, v := range m {
			if kind, outcome, ok := strings.Cut(k, "|"); ok {
				n, _ := strconv.ParseFloat(v, 64)
				ch <- prometheus.MustNewConstMetric(descGitHub, prometheus.CounterValue, n, kind, outcome)
			}
		}
	}
	paused := c.a.sched.Paused(ctx)
	for _, model := range c.a.sched.Models() {
		st, err := c.a.sched.Stats(ctx, model)
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
		if b, ok := c.a.sched.Bucket(model); ok {
			if avail, _, err := b.Available(ctx); err == nil {
				ch <- prometheus.MustNewConstMetric(descAvail, prometheus.GaugeValue, float64(avail.Tokens), model)
			}
			l := b.Limits()
			ch <- prometheus.MustNewConstMetric(descLimit, prometheus.GaugeValue, float64(l.TokensPerPeriod)/l.Period.Seconds(), model)
			ch <- prometheus.MustNewConstMetric(descOldest, prometheus.GaugeValue, oldestWait(ctx, c.a.rdb, b.Tag()).Seconds(), model)
		}
		p := 0.0
		if _, ok := paused[model]; ok {
			p = 1
		}
		ch <- prometheus.MustNewConstMetric(descPaused, prometheus.GaugeValue, p, model)
	}
	for _, q := range jobs.Queues {
		info, err := c.a.insp.GetQueueInfo(q)
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

// githubCounter counts GitHub API requests in Redis by kind and outcome,
// so that serve exports what the workers did.
type githubCounter struct {
	rdb  redis.UniversalClient
	next http.RoundTripper
}

func (g githubCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	kind := "write"
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		kind = "read"
	}
	resp, err := g.next.RoundTrip(r)
	outcome := "error"
	if err == nil {
		switch s := resp.StatusCode; {
		case s < 400:
			outcome = "ok"
		case s == http.StatusTooManyRequests || (s == http.StatusForbidden && (resp.Header.Get("Retry-After") != "" || resp.Header.Get("X-RateLimit-Remaining") == "0")):
			outcome = "rate_limited"
		case s == http.StatusUnprocessableEntity || s == http.StatusForbidden:
			outcome = "refused"
		case s == http.StatusNotFound:
			outcome = "not_found"
		default:
			outcome = "failed"
		}
	}
	if strings.HasSuffix(r.URL.Path, "/access_tokens") {
		kind = "token"
	}
	g.rdb.HIncrBy(context.WithoutCancel(r.Context()), githubKey, kind+"|"+outcome, 1)
	return resp, err
}

// oldestWait is the age of a model's oldest waiting ticket, read from
// admission's age set (ticket ids by enqueue time in µs, Redis's clock).
// TODO(lead): move into admission.Stats once its refactor lands.
func oldestWait(ctx context.Context, rdb redis.UniversalClient, tag string) time.Duration {
	oldest, err := rdb.ZRangeWithScores(ctx, tag+":adm:age", 0, 0).Result()
	if err != nil || len(oldest) == 0 {
		return 0
	}
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		return 0
	}
	return max(now.Sub(time.UnixMicro(int64(oldest[0].Score))), 0)
}

func constEq(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }
