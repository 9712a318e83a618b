package gateway

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the gateway's series, labelled by key id (a short hash):
// keys are made by an operator, so the labels stay bounded.
type Metrics struct {
	requests *prometheus.CounterVec
	tokens   *prometheus.CounterVec
	refusals *prometheus.CounterVec
	wait     *prometheus.HistogramVec
	over     *prometheus.CounterVec
	held     *prometheus.HistogramVec
	fallback *prometheus.CounterVec
	cost     *prometheus.CounterVec
}

// NewMetrics returns the series, unregistered (Collectors).
func NewMetrics() *Metrics {
	return &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "prq_gateway_requests_total", Help: "Gateway requests by key id and HTTP status."}, []string{"key", "code"}),
		tokens:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "prq_gateway_tokens_total", Help: "Tokens settled by key id and kind (input, output)."}, []string{"key", "kind"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "prq_gateway_refusals_total", Help: "Requests refused before any upstream call, by key id and reason (quota: 403, the key's quota of tokens or dollars cannot pay for it; unpriced: 403, the key has a dollar quota and the model no prices; quota_held: 429, its deadline passed while the key's requests in flight held its quota; deadline: 429 past the admission deadline; tpm: 429 over the key's tokens per minute; too_large: 400, never fits the bucket, the context or the body limits)."}, []string{"key", "reason"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "prq_gateway_admission_wait_seconds", Help: "Time a gateway request waited for admission, by key id.",
			Buckets: []float64{.005, .01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}}, []string{"key"}),
		held: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "prq_gateway_quota_wait_seconds", Help: "Time a gateway request waited for its key's quota, held by the key's requests in flight, by key id.",
			Buckets: []float64{.001, .01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}}, []string{"key"}),
		fallback: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "prq_gateway_fallbacks_total", Help: "Gateway requests moved from a model to its next fallback, by model, fallback and reason (paused: every key paused; wait: not admitted within gateway.fallback_wait; provider: the provider failed the call)."}, []string{"from", "to", "reason"}),
		cost:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "prq_gateway_cost_dollars_total", Help: "US dollars of the gateway's calls at the models' prices (models[].prices), from their usage (cached input and cache writes apart), by key id and model; unpriced models count nothing."}, []string{"key", "model"}),
		over:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "prq_gateway_usage_over_reservation_tokens_total", Help: "Tokens the provider reported beyond a request's reservation (input counted + output cap), by key id: the gateway's count missed them."}, []string{"key"}),
	}
}

// Collectors returns the series to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.requests, m.tokens, m.refusals, m.wait, m.over, m.held, m.fallback, m.cost}
}

func (m *Metrics) request(key string, code int) {
	if m != nil {
		m.requests.WithLabelValues(key, codeLabel(code)).Inc()
	}
}

func (m *Metrics) used(key string, input, output int64) {
	if m != nil {
		m.tokens.WithLabelValues(key, "input").Add(float64(max(input, 0)))
		m.tokens.WithLabelValues(key, "output").Add(float64(max(output, 0)))
	}
}

func (m *Metrics) spent(key, model string, dollars float64) {
	if m != nil {
		m.cost.WithLabelValues(key, model).Add(dollars)
	}
}

func (m *Metrics) overshot(key string, tokens int64) {
	if m != nil {
		m.over.WithLabelValues(key).Add(float64(tokens))
	}
}

func (m *Metrics) refused(key, reason string) {
	if m != nil {
		m.refusals.WithLabelValues(key, reason).Inc()
	}
}

func (m *Metrics) waited(key string, d time.Duration) {
	if m != nil {
		m.wait.WithLabelValues(key).Observe(d.Seconds())
	}
}

func (m *Metrics) quotaWaited(key string, d time.Duration) {
	if m != nil {
		m.held.WithLabelValues(key).Observe(d.Seconds())
	}
}

func (m *Metrics) fellBack(from, to, reason string) {
	if m != nil {
		m.fallback.WithLabelValues(from, to, reason).Inc()
	}
}

func codeLabel(code int) string {
	if code < 100 || code > 599 {
		return "other"
	}
	return strconv.Itoa(code)
}
