package gateway

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/internal/bodybudget"
	"github.com/prq-dev/prq/llmcall"
	"github.com/prq-dev/prq/ratelimit"
)

// Model is one model the gateway serves (it must have an admission
// bucket): the configured model (llmcall.Model, built once from the
// configuration; its MaxOutput, the output cap of a request that sets
// none, defaults to ratelimit.DefaultMaxOutput, its ContextTokens to
// 128000: a request asking for more output is refused; its Deployment
// to its name on Azure) and the provider serving it.
type Model struct {
	llmcall.Model
	// Provider serves the model. Nil: the OpenAI-kind provider of
	// Config.UpstreamURL and its keys.
	Provider *Provider
}

// quotaReservationTTL bounds how long the reservation of a call whose
// process died holds the key's quota (it then stays spent).
const quotaReservationTTL = 30 * time.Minute

// maxChoices bounds n (OpenAI's limit).
const maxChoices = 128

// Config configures the gateway.
type Config struct {
	// Models served, by name. Required. Each is forwarded to its own
	// Provider; those without one to the OpenAI-kind provider below.
	Models map[string]Model
	// UpstreamURL is the base URL (https://api.openai.com/v1) of the
	// OpenAI-kind provider of the models without a Provider. Required
	// when there are such models.
	UpstreamURL string
	// UpstreamKey is that provider's API key.
	UpstreamKey string
	// UpstreamKeys, when set, are that provider's several keys in the
	// order of the models' buckets (admission's key indices): a request
	// is sent with the key admission charged. UpstreamKey is then unused.
	UpstreamKeys []string
	// Client makes upstream calls. Defaults to a client with no overall
	// timeout (streams run long) whose transport waits at most
	// HeaderTimeout for the reply's headers; Timeout bounds the
	// non-streaming calls, StreamIdle the gaps in a stream.
	Client *http.Client
	// Timeout bounds a non-streaming upstream call. Defaults to 120s.
	Timeout time.Duration
	// HeaderTimeout bounds the wait for an upstream reply's headers (a
	// non-streaming reply's come with its body: it defaults to Timeout).
	// Used when Client is nil.
	HeaderTimeout time.Duration
	// StreamIdle is the longest a stream may go without a line from the
	// provider; past it the upstream call is cancelled and the stream
	// ends with an error event. Defaults to 60s.
	StreamIdle time.Duration
	// MaxLine bounds a line of an upstream stream (one event's data);
	// a longer one ends the stream with an error event. Defaults to 1 MiB.
	MaxLine int
	// MaxWait is the longest a request waits for admission; a request's
	// X-Prq-Max-Wait header may lower it. Defaults to 60s.
	MaxWait time.Duration
	// MinOutput is the least output worth a call: a request is refused
	// (403) when the key's quota left is below input + MinOutput.
	// Defaults to 16.
	MinOutput int64
	// CostFunc, when set, is told what each priced call cost, by model,
	// the key's tier and the lane that served it ("sync", or "flex" for
	// OpenAI's flex processing): prq's own cost series and dashboard.
	CostFunc func(model, tier, lane string, dollars float64)
	// FallbackWait is the longest a request waits for admission on a
	// model with fallbacks before it moves to the next. Defaults to 10s.
	FallbackWait time.Duration
	// MaxBody bounds a request body. Defaults to 8 MiB. A key with a
	// quota is bounded further, before its body is read, by what it could
	// ever pay for: 256 bytes per token it has left (twice the longest
	// token) plus 64 KiB.
	MaxBody int64
	// MaxBodyBytesInFlight caps the request-body bytes held at once
	// across all keys, charged as the bytes arrive; a body that does not
	// fit is answered 429 with Retry-After. Defaults to 64 MiB; never
	// less than MaxBody.
	MaxBodyBytesInFlight int64
	// BodyTimeout bounds reading one request body; a body that stalls
	// past it is answered 408. Defaults to 60s.
	BodyTimeout time.Duration
	// MaxDepth bounds the nesting of a body's arrays and objects.
	// Defaults to 64.
	MaxDepth int
	// MaxItems bounds the elements of one array and the members of one
	// object of a body. Defaults to 10000.
	MaxItems int
	// MaxValues bounds the JSON values of a whole body. Defaults to
	// 524288.
	MaxValues int
	// AccountPause is how long a provider's refusal of the gateway's
	// credentials (401, 402, 403, insufficient_quota) pauses the model's
	// admissions, or the key's when the provider has several: the
	// workers' pause policy (llmcall). Defaults to llmcall.DefaultPause.
	AccountPause time.Duration
	// Log defaults to discarding. Requests and replies are never logged.
	Log *slog.Logger
}

// Admission is what the gateway needs of the scheduler (an
// *admission.Scheduler).
type Admission interface {
	Bucket(model string) (*ratelimit.Bucket, bool)
	Started(ctx context.Context, model, id string) error
	// Calling moves the charge to the moment the call is sent.
	Calling(ctx context.Context, model, id string) error
	// Sent moves it to the request's write, at most after past the
	// start of Calling.
	Sent(ctx context.Context, model, id string, after time.Duration) error
	Settle(ctx context.Context, model, id string, actual ratelimit.Cost) error
	// SettleCall is Settle with what the call knows of its way: its
	// write, when Sent has not recorded it, and its reply's bound on its
	// arrival.
	SettleCall(ctx context.Context, model, id string, actual ratelimit.Cost, way admission.CallWay) error
	Withdraw(ctx context.Context, model, id string) (bool, error)
	KeyOf(ctx context.Context, model, id string) (int, error)
	// Paused names the models paused whole or on every key.
	Paused(ctx context.Context) map[string]string
	// Pause and PauseKey pause a model's admissions, or one key's: the
	// provider refused the account (llmcall's pause policy).
	Pause(ctx context.Context, model, reason string, d time.Duration) error
	PauseKey(ctx context.Context, model string, key int, reason string, d time.Duration) error
}

// Waiter waits for a ticket's admission (an *admission.Waiter).
type Waiter interface {
	Await(ctx context.Context, t admission.Ticket) error
}

var (
	_ Admission = (*admission.Scheduler)(nil)
	_ Waiter    = (*admission.Waiter)(nil)
)

// MaxWaitHeader lowers a request's admission deadline: seconds ("5",
// "0.5") or a Go duration ("1500ms").
const MaxWaitHeader = "X-Prq-Max-Wait"

// Gateway serves the OpenAI-compatible endpoint.
type Gateway struct {
	cfg     Config
	keys    *Keys
	adm     Admission
	waiter  Waiter
	rdb     redis.UniversalClient
	metrics *Metrics
	log     *slog.Logger

	proto    *llmcall.Protocol   // the steps of every upstream call
	counters map[string]*counter // by model
	quotas   map[ratelimit.Period]*ratelimit.Quota
	held     *ledger
	tpmMu    sync.Mutex
	tpm      map[string]*ratelimit.Bucket // key id → its tokens-per-minute bucket
	bodies   *bodybudget.Budget           // request-body bytes in flight
}

// setDefaults fills in the settings left zero.
func (c *Config) setDefaults() {
	if c.Timeout == 0 {
		c.Timeout = 120 * time.Second
	}
	if c.HeaderTimeout == 0 {
		c.HeaderTimeout = c.Timeout
	}
	if c.StreamIdle == 0 {
		c.StreamIdle = 60 * time.Second
	}
	if c.MaxLine == 0 {
		c.MaxLine = 1 << 20
	}
	if c.Client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.ResponseHeaderTimeout = c.HeaderTimeout
		c.Client = &http.Client{Transport: tr}
	}
	if c.MaxWait == 0 {
		c.MaxWait = 60 * time.Second
	}
	if c.MinOutput == 0 {
		c.MinOutput = 16
	}
	if c.MaxBody == 0 {
		c.MaxBody = 8 << 20
	}
	if c.MaxBodyBytesInFlight <= 0 {
		c.MaxBodyBytesInFlight = 64 << 20
	}
	c.MaxBodyBytesInFlight = max(c.MaxBodyBytesInFlight, c.MaxBody)
	if c.BodyTimeout <= 0 {
		c.BodyTimeout = 60 * time.Second
	}
	if c.FallbackWait <= 0 {
		c.FallbackWait = 10 * time.Second
	}
	if c.MaxDepth == 0 {
		c.MaxDepth = 64
	}
	if c.MaxItems == 0 {
		c.MaxItems = 10000
	}
	if c.MaxValues == 0 {
		c.MaxValues = 1 << 19
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
}

// New returns a gateway. metrics may be nil.
func New(cfg Config, keys *Keys, adm Admission, waiter Waiter, rdb redis.UniversalClient, metrics *Metrics) (*Gateway, error) {
	switch {
	case len(cfg.Models) == 0:
		return nil, errors.New("gateway: at least one model is required")
	case keys == nil || adm == nil || waiter == nil || rdb == nil:
		return nil, errors.New("gateway: keys, admission, waiter and Redis are required")
	case cfg.MaxWait < 0 || cfg.MinOutput < 0 || cfg.Timeout < 0 || cfg.HeaderTimeout < 0 || cfg.StreamIdle < 0 || cfg.MaxLine < 0 || cfg.AccountPause < 0:
		return nil, errors.New("gateway: MaxWait, MinOutput, Timeout, HeaderTimeout, StreamIdle, MaxLine and AccountPause must not be negative")
	case cfg.MaxBody < 0 || cfg.MaxDepth < 0 || cfg.MaxItems < 0 || cfg.MaxValues < 0:
		return nil, errors.New("gateway: MaxBody, MaxDepth, MaxItems and MaxValues must not be negative")
	}
	cfg.setDefaults()
	// the models without a provider of their own share the implicit one
	var implicit *Provider
	checked := map[*Provider]*Provider{} // the caller's → a checked copy
	models := make(map[string]Model, len(cfg.Models))
	for name, m := range cfg.Models {
		if m.Provider == nil {
			if implicit == nil {
				if cfg.UpstreamURL == "" {
					return nil, fmt.Errorf("gateway: model %s has no provider and the upstream URL is not set", name)
				}
				keys := cfg.UpstreamKeys
				if len(keys) == 0 {
					keys = []string{cfg.UpstreamKey}
				}
				implicit = &Provider{Kind: KindOpenAI, BaseURL: cfg.UpstreamURL, Keys: keys}
			}
			m.Provider = implicit
		}
		p, ok := checked[m.Provider]
		if !ok {
			c := *m.Provider
			c.Keys = append([]string(nil), c.Keys...)
			if err := c.check(); err != nil {
				return nil, fmt.Errorf("%w (model %s)", err, name)
			}
			p = &c
			checked[m.Provider] = p
		}
		m.Provider = p
		if m.Provider.Kind == KindAzure && m.Deployment == "" {
			m.Deployment = name
		}
		models[name] = m
	}
	cfg.Models = models // the caller's map is left as it was
	g := &Gateway{cfg: cfg, keys: keys, adm: adm, waiter: waiter, rdb: rdb, metrics: metrics, log: cfg.Log,
		counters: map[string]*counter{}, held: newLedger(rdb, quotaReservationTTL), quotas: map[ratelimit.Period]*ratelimit.Quota{}, tpm: map[string]*ratelimit.Bucket{},
		bodies: bodybudget.New(cfg.MaxBodyBytesInFlight), proto: llmcall.New(adm, cfg.Log, cfg.AccountPause)}
	for name, m := range cfg.Models {
		if _, ok := adm.Bucket(name); !ok {
			return nil, fmt.Errorf("gateway: model %s has no admission bucket", name)
		}
		for _, f := range m.Fallbacks {
			if _, ok := cfg.Models[f]; !ok || f == name {
				return nil, fmt.Errorf("gateway: model %s: fallback %q is not another served model", name, f)
			}
		}
		if m.MaxOutput <= 0 {
			m.MaxOutput = ratelimit.DefaultMaxOutput
		}
		if m.ContextTokens <= 0 {
			m.ContextTokens = 128000
		}
		m.MaxOutput = min(m.MaxOutput, m.ContextTokens)
		m.Name, m.Keys = name, len(m.Provider.Keys)
		g.cfg.Models[name] = m
		tk, err := ratelimit.NewTokenizer(name)
		if err != nil {
			return nil, err
		}
		if g.counters[name], err = newCounter(tk); err != nil {
			return nil, err
		}
	}
	for _, p := range []ratelimit.Period{ratelimit.Hour, ratelimit.Day, ratelimit.Week, ratelimit.Month} {
		q, err := ratelimit.NewQuota(rdb, ratelimit.QuotaConfig{Period: p, MinOutput: cfg.MinOutput, ReservationTTL: quotaReservationTTL})
		if err != nil {
			return nil, err
		}
		g.quotas[p] = q
	}
	return g, nil
}

// Handler serves the gateway's routes: POST /v1/chat/completions,
// /v1/embeddings, /v1/responses and /v1/messages (with
// /v1/messages/count_tokens), and GET /v1/models.
func (g *Gateway) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", g.serve(apiChat, g.chat))
	mux.HandleFunc("POST /v1/embeddings", g.serve(apiEmbeddings, g.embeddings))
	mux.HandleFunc("POST /v1/responses", g.serve(apiResponses, g.responses))
	mux.HandleFunc("/v1/responses/", storedResponse)
	mux.HandleFunc("POST /v1/messages", g.serve(apiMessages, g.messages))
	mux.HandleFunc("POST /v1/messages/count_tokens", g.serve(apiMessages, g.countTokens))
	mux.HandleFunc("GET /v1/models", g.models)
	mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
		q := &request{api: apiChat}
		if strings.HasPrefix(r.URL.Path, "/v1/messages") {
			q.api = apiMessages
		}
		q.fail(w, http.StatusNotFound, "invalid_request_error", "unknown_url", fmt.Sprintf("Invalid URL (%s %s): the gateway serves POST /v1/chat/completions, /v1/embeddings, /v1/responses, /v1/messages and /v1/messages/count_tokens, and GET /v1/models.", r.Method, r.URL.Path))
	})
	return mux
}

// serve runs a route's handler on a request of api.
func (g *Gateway) serve(a api, h func(w http.ResponseWriter, r *http.Request, q *request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		// the server's write timeout bounds ordinary requests; this one
		// may wait for admission and then stream for longer
		_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
		sw := &statusWriter{ResponseWriter: w}
		q := &request{started: time.Now(), api: a}
		defer func() {
			g.metrics.request(q.key.ID, sw.status)
			if q.release != nil {
				q.release()
			}
		}()
		h(sw, r, q)
	}
}

// authenticate reads the key: a bearer token, or (Anthropic's way) an
// x-api-key header; on failure it has answered 401.
func (g *Gateway) authenticate(w http.ResponseWriter, r *http.Request, q *request) (Key, bool) {
	scheme, secret, _ := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	if !strings.EqualFold(scheme, "bearer") {
		secret = ""
	}
	if strings.TrimSpace(secret) == "" {
		secret = r.Header.Get("x-api-key")
	}
	if strings.TrimSpace(secret) == "" {
		q.fail(w, http.StatusUnauthorized, "invalid_request_error", "missing_api_key", "You didn't provide an API key. Provide a prq virtual key (prq-sk-...) as a bearer token or in an x-api-key header.")
		return Key{}, false
	}
	k, err := g.keys.Authenticate(r.Context(), strings.TrimSpace(secret))
	switch {
	case errors.Is(err, ErrUnknownKey):
		q.fail(w, http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", "Incorrect API key provided.")
		return Key{}, false
	case errors.Is(err, ErrRevoked):
		q.fail(w, http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", "This API key has been revoked.")
		return Key{}, false
	case errors.Is(err, ErrInvalidRecord):
		g.log.WarnContext(r.Context(), "gateway: a key's record cannot be enforced; refused until it is recreated", "err", err)
		q.fail(w, http.StatusForbidden, "invalid_request_error", "invalid_key_record", "This key's limits cannot be enforced ("+strings.TrimPrefix(err.Error(), ErrInvalidRecord.Error()+": ")+"); its operator must recreate it.")
		return Key{}, false
	case err != nil:
		g.log.ErrorContext(r.Context(), "gateway: authenticating a key failed", "err", err)
		q.fail(w, http.StatusServiceUnavailable, "server_error", "", "The gateway could not read its keys; try again.")
		return Key{}, false
	}
	return k, true
}

func (g *Gateway) models(w http.ResponseWriter, r *http.Request) {
	k, ok := g.authenticate(w, r, &request{api: apiChat})
	if !ok {
		return
	}
	names := make([]string, 0, len(g.cfg.Models))
	for name, m := range g.cfg.Models {
		if !k.Allows(name) {
			continue
		}
		if k.QuotaDollars > 0 { // only the models whose calls its quota can count
			_, chat := nanoPrices(m, true)
			_, embed := nanoPrices(m, false)
			if !chat && !embed {
				continue
			}
		}
		names = append(names, name)
	}
	sort.Strings(names)
	data := make([]map[string]any, 0, len(names))
	for _, n := range names {
		data = append(data, map[string]any{"id": n, "object": "model", "created": 0, "owned_by": "prq"})
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data})
}

func newID() string {
	var b [12]byte
	rand.Read(b[:])
	return "gw-" + hex.EncodeToString(b[:])
}

// maxWait is the admission deadline: the configured one, lowered by the
// request's header.
func (g *Gateway) maxWait(r *http.Request) (time.Duration, error) {
	v := strings.TrimSpace(r.Header.Get(MaxWaitHeader))
	if v == "" {
		return g.cfg.MaxWait, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		s, ferr := strconv.ParseFloat(v, 64)
		if ferr != nil || math.IsNaN(s) || math.IsInf(s, 0) {
			return 0, fmt.Errorf("%s: %q is neither seconds nor a duration", MaxWaitHeader, v)
		}
		d = time.Duration(s * float64(time.Second))
	}
	if d < 0 {
		return 0, fmt.Errorf("%s must not be negative", MaxWaitHeader)
	}
	return min(d, g.cfg.MaxWait), nil
}

// classOf is admission's class of a key's tier.
func classOf(tier string) string { return tier }

// tenantOf is admission's tenant of a key (and its quota's).
func tenantOf(k Key) string { return "key:" + k.ID }

// request is one request's state along its path.
type request struct {
	key   Key
	id    string
	model string
	input int64
	cap   int64 // per choice
	n     int64 // choices
	est   int64 // the provider's admission estimate: the bucket's charge
	// hold is what the request holds of its key's quotas
	hold llmcall.QuotaHold
	// bound is the quota that bounds what the key could pay for at the
	// front (what its body may hold)
	bound quotaShort
	// reserved is when the hold was granted
	reserved time.Time
	tpm      *ratelimit.Bucket
	started  time.Time
	waited   time.Duration
	// ticket is the admission ticket of the current attempt (a call the
	// provider answered 429 goes back through admission under a new one);
	// deadline ends the admission waits of every attempt.
	ticket   string
	deadline time.Time
	maxWait  time.Duration
	// anth is the request translated for an Anthropic model
	anth *anthropicRequest
	// api is the client API the request speaks
	api api
	// release gives the body's bytes back to the budget of bodies in
	// flight, when the request ends
	release func()
	// upHeader are headers the upstream call carries besides the
	// provider's (a Messages client's anthropic-version and -beta)
	upHeader http.Header
	// call is the current attempt's upstream call; outcome how its
	// reply reads (by status, and a 429's body)
	call    *llmcall.Call
	outcome llmcall.Outcome
}

// takeTPM charges the key's tokens-per-minute bucket; over it, the
// request is refused with 429 and the wait.
func (g *Gateway) takeTPM(w http.ResponseWriter, r *http.Request, q *request) bool {
	b, err := g.tpmBucket(q.key)
	q.tpm = b
	if err == nil {
		var d ratelimit.Decision
		d, err = b.Reserve(r.Context(), q.id, ratelimit.Cost{Requests: 1, Tokens: q.est})
		var ce *ratelimit.CostError
		switch {
		case errors.As(err, &ce):
			// never admissible: not a 429, which SDKs retry
			g.metrics.refused(q.key.ID, "too_large")
			q.fail(w, http.StatusBadRequest, "invalid_request_error", "request_too_large", fmt.Sprintf(
				"Request too large for key %s on tokens per min (TPM): Limit %d, Requested %d (input and output cap, as the provider counts). Lower max_tokens or the input.", q.key.ID, q.key.TPM, q.est))
			return false
		case err == nil && !d.Admitted:
			g.metrics.refused(q.key.ID, "tpm")
			retryHeaders(w.Header(), d.Wait)
			g.rateHeaders(context.WithoutCancel(r.Context()), w.Header(), q)
			q.fail(w, http.StatusTooManyRequests, "tokens", "rate_limit_exceeded", fmt.Sprintf(
				"Rate limit reached for key %s on tokens per min (TPM): Limit %d, Requested %d. Please try again in %s.", q.key.ID, q.key.TPM, q.est, d.Wait.Round(time.Millisecond)))
			return false
		}
	}
	if err != nil {
		g.log.ErrorContext(r.Context(), "gateway: key tpm failed", "key", q.key.ID, "err", err)
		q.fail(w, http.StatusServiceUnavailable, "server_error", "", "The gateway could not check the key's rate limit; try again.")
		return false
	}
	return true
}

func (g *Gateway) tpmBucket(k Key) (*ratelimit.Bucket, error) {
	g.tpmMu.Lock()
	defer g.tpmMu.Unlock()
	name := k.ID + "/" + strconv.FormatInt(k.TPM, 10)
	if b, ok := g.tpm[name]; ok {
		return b, nil
	}
	b, err := ratelimit.NewBucket(g.rdb, "gateway-key-"+k.ID, "", ratelimit.Limits{RequestsPerPeriod: math.MaxInt32, TokensPerPeriod: k.TPM, Policy: ratelimit.PolicyRefund})
	if err != nil {
		return nil, err
	}
	g.tpm[name] = b
	return b, nil
}

func (g *Gateway) settleTPM(ctx context.Context, q *request, tokens int64) {
	if err := q.tpm.Settle(ctx, q.id, ratelimit.Cost{Requests: 1, Tokens: tokens}); err != nil && !errors.Is(err, ratelimit.ErrNotReserved) {
		g.log.WarnContext(ctx, "gateway: settling the key's tpm failed", "key", q.key.ID, "err", err)
	}
}

// admit waits in the global order; on failure it has answered (or the
// client has left) and given back what admission charged.
func (g *Gateway) admit(w http.ResponseWriter, r *http.Request, q *request) bool {
	return g.admitUntil(w, r, q, time.Time{}) == admitted
}

// What admitUntil came to.
type admitResult int

const (
	admitted      admitResult = iota
	admitAnswered             // refused (answered, reservations given back) or the client left
	admitTooLong              // not admitted by its bound: withdrawn, nothing answered
)

// admitUntil is admit that, with a bound before the request's deadline,
// stops waiting at the bound (the request then moves to a fallback).
func (g *Gateway) admitUntil(w http.ResponseWriter, r *http.Request, q *request, bound time.Time) admitResult {
	ctx := r.Context()
	output := min(ratelimit.OutputAllowance(q.cap*q.n), q.est)
	if q.api == apiEmbeddings {
		output = 0
	}
	t := admission.Ticket{ID: q.ticket, Queue: admission.NotifyQueue, Model: q.model, Class: classOf(q.key.Tier), Tenant: tenantOf(q.key), Tokens: q.est, Output: output}
	until := q.deadline
	if !bound.IsZero() && bound.Before(until) {
		until = bound
	}
	wctx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	start := time.Now()
	err := g.waiter.Await(wctx, t)
	q.waited += time.Since(start)
	g.metrics.waited(q.key.ID, time.Since(start))
	if err == nil {
		if err := g.adm.Started(ctx, q.model, q.ticket); err != nil {
			g.log.WarnContext(ctx, "gateway: recording the start failed; the reconciler drops the ticket", "key", q.key.ID, "err", err)
		}
		return admitted
	}
	bg := context.WithoutCancel(ctx)
	if !errors.Is(err, admission.ErrRejected) {
		// admitted as the bound or the deadline passed, the charge is
		// given back all the same
		if _, werr := g.adm.Withdraw(bg, q.model, q.ticket); werr != nil {
			g.log.ErrorContext(ctx, "gateway: withdrawing a request from admission failed; its charge stays until the reservation expires", "key", q.key.ID, "err", werr)
		}
	}
	if ctx.Err() == nil && wctx.Err() != nil && until.Before(q.deadline) {
		return admitTooLong
	}
	// nothing was sent: the key's quota and tpm get their reservations
	// back before the reply describes them
	g.settleQuota(bg, q, llmcall.Settlement{})
	if q.tpm != nil {
		g.settleTPM(bg, q, 0)
	}
	switch {
	case errors.Is(err, admission.ErrRejected):
		g.metrics.refused(q.key.ID, "too_large")
		b, _ := g.adm.Bucket(q.model)
		q.fail(w, http.StatusBadRequest, "invalid_request_error", "request_too_large", fmt.Sprintf(
			"Request too large for %s: %d tokens by the provider's count (input and output cap), more than its bucket holds (%d). Lower max_tokens or the input.", q.model, q.est, b.Limits().BurstTokens))
	case ctx.Err() != nil:
		// the client left while waiting: nothing to answer
	case wctx.Err() != nil:
		g.metrics.refused(q.key.ID, "deadline")
		retry := g.retryAfter(bg, q)
		retryHeaders(w.Header(), retry)
		g.keyHeaders(bg, w.Header(), q)
		q.fail(w, http.StatusTooManyRequests, "requests", "rate_limit_exceeded", fmt.Sprintf(
			"Request not admitted within %s: the %s bucket is busy with earlier and higher-priority work. Please try again in %s.",
			q.maxWait, q.model, retry.Round(time.Second)))
	default:
		g.log.ErrorContext(ctx, "gateway: admission failed", "key", q.key.ID, "model", q.model, "err", err)
		q.fail(w, http.StatusServiceUnavailable, "server_error", "", "The gateway could not reach its admission queue; try again.")
	}
	return admitAnswered
}

// retryAfter is when the bucket will have refilled enough for the
// request, at least a second: a lower bound, since others wait too.
func (g *Gateway) retryAfter(ctx context.Context, q *request) time.Duration {
	b, _ := g.adm.Bucket(q.model)
	avail, _, err := b.Available(ctx)
	l := b.Limits()
	if err != nil || l.TokensPerPeriod <= 0 {
		return time.Second
	}
	need := q.est - avail.Tokens
	d := time.Duration(float64(need) / float64(l.TokensPerPeriod) * float64(l.Period))
	return max(d, time.Second)
}

func retryHeaders(h http.Header, d time.Duration) {
	h.Set("Retry-After", strconv.FormatInt(int64(math.Ceil(max(d, time.Second).Seconds())), 10))
	h.Set("retry-after-ms", strconv.FormatInt(max(d.Milliseconds(), 1), 10))
}

// keyHeaders set the key's quotas left now and the model bucket's tokens.
func (g *Gateway) keyHeaders(ctx context.Context, h http.Header, q *request) {
	h.Set("x-prq-key", q.key.ID)
	g.quotaNow(ctx, h, q.key)
	if b, ok := g.adm.Bucket(q.model); ok {
		if avail, _, err := b.Available(ctx); err == nil {
			h.Set("x-prq-bucket-remaining-tokens", strconv.FormatInt(max(avail.Tokens, 0), 10))
		}
	}
	g.rateHeaders(ctx, h, q)
	h.Set("x-prq-admission-wait-ms", strconv.FormatInt(q.waited.Milliseconds(), 10))
}

// rateHeaders describe a per-minute limit in OpenAI's x-ratelimit-*
// terms, as the SDKs read them: the key's tokens per minute when it has
// them, else the model's bucket (tokens and requests), shared with
// everyone admitted to it.
func (g *Gateway) rateHeaders(ctx context.Context, h http.Header, q *request) {
	var b *ratelimit.Bucket
	if q.key.TPM > 0 {
		b, _ = g.tpmBucket(q.key)
	} else {
		b, _ = g.adm.Bucket(q.model)
	}
	if b == nil {
		return
	}
	avail, _, err := b.Available(ctx)
	if err != nil {
		return
	}
	l := b.Limits()
	per := l.Period
	if per <= 0 {
		per = time.Minute
	}
	perMinute := func(v int64) int64 { return int64(float64(v) * float64(time.Minute) / float64(per)) }
	// the time to refill what is missing
	reset := func(burst, rate, left int64) string {
		if rate <= 0 {
			return "0s"
		}
		return (time.Duration(float64(max(burst-left, 0)) / float64(rate) * float64(per))).Round(time.Millisecond).String()
	}
	burstT := cmp.Or(l.BurstTokens, l.TokensPerPeriod)
	h.Set("x-ratelimit-limit-tokens", strconv.FormatInt(perMinute(l.TokensPerPeriod), 10))
	h.Set("x-ratelimit-remaining-tokens", strconv.FormatInt(max(avail.Tokens, 0), 10))
	h.Set("x-ratelimit-reset-tokens", reset(burstT, l.TokensPerPeriod, avail.Tokens))
	if q.key.TPM <= 0 {
		burstR := cmp.Or(l.BurstRequests, l.RequestsPerPeriod)
		h.Set("x-ratelimit-limit-requests", strconv.FormatInt(perMinute(l.RequestsPerPeriod), 10))
		h.Set("x-ratelimit-remaining-requests", strconv.FormatInt(max(avail.Requests, 0), 10))
		h.Set("x-ratelimit-reset-requests", reset(burstR, l.RequestsPerPeriod, avail.Requests))
	}
}

// statusWriter remembers the status for the metrics.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
