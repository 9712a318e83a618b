// Package metrics owns prq's Prometheus series: counters the process
// bumps (webhook deliveries, LLM calls, admissions) and gauges read from
// the shared admission state at scrape time (at most once per
// Config.CacheFor, however many scrapes arrive), plus the cross-process LLM
// call counts kept in Redis. It reads the scheduler and the queues through
// small interfaces and knows nothing of how the process is wired.
package metrics

import (
	"context"
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
)

// Admission is what the metrics read of the admission scheduler.
type Admission interface {
	Models() []string
	Stats(ctx context.Context, model string) (admission.Stats, error)
	Bucket(model string) (*ratelimit.Bucket, bool)
	Paused(ctx context.Context) map[string]string
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
}

// Metrics are prq's Prometheus series. Labels stay low-cardinality:
// model, class (chat or tier), event, outcome, queue, state.
type Metrics struct {
	counts     Counts
	reg        *prometheus.Registry
	deliveries *prometheus.CounterVec
	calls      *prometheus.CounterVec
	unusable   *prometheus.CounterVec
	admitted   *prometheus.CounterVec
	wait       *prometheus.HistogramVec
}

// Config configures the series read from Redis.
type Config struct {
	// CacheFor is how long a reading of the shared state (about 40 Redis
	// commands per model and queue set) serves further scrapes. Defaults
	// to 5s; negative reads on every scrape.
	CacheFor time.Duration
	// NowFunc is the clock. Defaults to time.Now.
	NowFunc func() time.Time
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
	m := &Metrics{counts: counts, reg: prometheus.NewRegistry()}
	m.deliveries = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "prq_webhook_deliveries_total", Help: "Webhook deliveries by event and outcome."}, []string{"event", "outcome"})
	m.calls = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "prq_llm_calls_total", Help: "LLM calls by model and outcome (ok, rate_limited, transient, account, context_length, failed, quota)."}, []string{"model", "outcome"})
	m.unusable = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "prq_llm_unusable_replies_total", Help: "Model replies that could not be read as what was asked for (a review not in the schema), by model and job kind."}, []string{"model", "kind"})
	m.admitted = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "prq_admitted_jobs_total", Help: "Jobs admitted by this process, by model, class and path (chat, fair, aged)."}, []string{"model", "class", "via"})
	m.wait = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "prq_admission_wait_seconds", Help: "Time from a ticket's registration to its admission.",
		Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}}, []string{"model", "class"})
	m.reg.MustRegister(m.deliveries, m.calls, m.unusable, m.admitted, m.wait, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), &stateCollector{adm: adm, queues: queues, cacheFor: cfg.CacheFor, now: cfg.NowFunc})
	return m
}

// Handler serves /metrics.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// CountDelivery counts a webhook delivery (webhook.Handler.Count).
func (m *Metrics) CountDelivery(event, outcome string) {
	switch event {
	case "pull_request", "issue_comment", "pull_request_review_comment", "installation", "installation_repositories", "marketplace_purchase", "ping":
	default:
		event = "other" // bounded labels, whatever arrives
	}
	m.deliveries.WithLabelValues(event, outcome).Inc()
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
)

// stateCollector reads shared state from Redis at scrape time, and
// keeps what it read for cacheFor: scrapes (several Prometheus servers,
// or anyone who can reach /metrics) cost Redis nothing in between.
type stateCollector struct {
	adm      Admission
	queues   Queues
	cacheFor time.Duration
	now      func() time.Time

	mu     sync.Mutex // held while reading, so concurrent scrapes share one reading
	at     time.Time
	cached []prometheus.Metric
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descBacklog, descInTok, descAdmTok, descAhead, descBehind, descReleased, descAvail, descLimit, descPaused, descQueue} {
		ch <- d
	}
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
		if b, ok := c.adm.Bucket(model); ok {
			if avail, _, err := b.Available(ctx); err == nil {
				ch <- prometheus.MustNewConstMetric(descAvail, prometheus.GaugeValue, float64(avail.Tokens), model)
			}
			l := b.Limits()
			ch <- prometheus.MustNewConstMetric(descLimit, prometheus.GaugeValue, float64(l.TokensPerPeriod)/l.Period.Seconds(), model)
		}
		p := 0.0
		if _, ok := paused[model]; ok {
			p = 1
		}
		ch <- prometheus.MustNewConstMetric(descPaused, prometheus.GaugeValue, p, model)
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
