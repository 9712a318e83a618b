package llmcall_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/internal/gateway"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/llm"
	"github.com/prq-dev/prq/llmcall"
	"github.com/prq-dev/prq/ratelimit"
	"github.com/prq-dev/prq/store"
	"github.com/prq-dev/prq/workers"
)

// The conformance test: one table of provider replies, each driven
// through the workers' path (a summary job: FileWorker, Caller, llm's
// client) and the gateway's path (a chat completion relayed to the
// provider), both on a real Redis and admission, against a real HTTP
// provider that gives the same reply to both. Both must settle the
// bucket, settle the quota, price the call, pause and end alike.

// recorder is admission with its settles (and the ways they were given)
// and pauses recorded.
type recorder struct {
	*admission.Scheduler
	mu      sync.Mutex
	settles []ratelimit.Cost
	ways    []time.Duration
	reports int // settles that carried the reply's headers (CallWay.Sync)
	pauses  []string
}

func (r *recorder) Settle(ctx context.Context, model, id string, c ratelimit.Cost) error {
	r.record(c, -1)
	return r.Scheduler.Settle(ctx, model, id, c)
}

func (r *recorder) SettleCall(ctx context.Context, model, id string, c ratelimit.Cost, way admission.CallWay) error {
	r.record(c, way.Arrival)
	if way.Sync != nil {
		r.mu.Lock()
		r.reports++
		r.mu.Unlock()
	}
	return r.Scheduler.SettleCall(ctx, model, id, c, way)
}

func (r *recorder) record(c ratelimit.Cost, way time.Duration) {
	r.mu.Lock()
	r.settles = append(r.settles, c)
	r.ways = append(r.ways, way)
	r.mu.Unlock()
}

func (r *recorder) Pause(ctx context.Context, model, reason string, d time.Duration) error {
	r.mu.Lock()
	r.pauses = append(r.pauses, "model")
	r.mu.Unlock()
	return r.Scheduler.Pause(ctx, model, reason, d)
}

func (r *recorder) PauseKey(ctx context.Context, model string, key int, reason string, d time.Duration) error {
	r.mu.Lock()
	r.pauses = append(r.pauses, "key "+strconv.Itoa(key))
	r.mu.Unlock()
	return r.Scheduler.PauseKey(ctx, model, key, reason, d)
}

// firstSettle is the first settle of the call (the gateway's 429 goes
// back through admission and is settled again), and whether it was
// given the call's way.
func (r *recorder) firstSettle() (ratelimit.Cost, bool, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.settles) == 0 {
		return ratelimit.Cost{}, false, false
	}
	return r.settles[0], true, r.ways[0] >= 0
}

func (r *recorder) reported() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reports
}

func (r *recorder) paused() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.pauses...)
}

var (
	_ workers.Admitter  = (*recorder)(nil)
	_ gateway.Admission = (*recorder)(nil)
)

// how a row's bucket and quota are settled
type settled int

const (
	byUsage  settled = iota // the reply's usage (the bucket: with the cached-input rule)
	kept                    // the bucket keeps the estimate; the quota all it reserved
	refunded                // all given back
	none                    // the bucket keeps the estimate; the quota nothing
)

const (
	promptTokens, cachedTokens, outputTokens = 100, 60, 20
	keyA, keyB                               = "sk-conf-a", "sk-conf-b"
)

var prices = llm.Prices{Input: 1, CachedInput: 0.5, Output: 2}

// row is one provider reply.
type row struct {
	name       string
	keys       []string
	cachedFree bool // the model's provider does not count cache reads
	flex       bool // the call asks for flex processing
	way        bool // the reply bounds the call's way: its settle is given it
	// lowered: the key's bucket is lowered by the reply: a 429 empties
	// it at once; headers reporting few tokens remaining lower it to
	// them (the workers: in the settle's script)
	lowered bool
	// serve answers the call (stream: the gateway's client asked for a
	// stream)
	serve func(w http.ResponseWriter, r *http.Request, stream bool)
	// what both paths must do
	outcome llmcall.Outcome
	bucket  settled
	usage   ratelimit.Cost // the bucket's settle, byUsage
	quota   settled
	dollars float64
	pause   []string
	// the gateway's answer
	status int
}

func completion(cached int64) string {
	return fmt.Sprintf(`{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Adds b."},"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d}}}`,
		promptTokens, outputTokens, promptTokens+outputTokens, cached)
}

func reply(status int, header map[string]string, body string) func(http.ResponseWriter, *http.Request, bool) {
	return func(w http.ResponseWriter, _ *http.Request, _ bool) {
		for k, v := range header {
			w.Header().Set(k, v)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

func apiError(typ, code, msg string) string {
	return fmt.Sprintf(`{"error":{"message":%q,"type":%q,"param":null,"code":%q}}`, msg, typ, code)
}

// cut starts a reply and breaks the connection off: a stream after its
// first chunk, a whole reply halfway through its JSON.
func cut(w http.ResponseWriter, _ *http.Request, stream bool) {
	if stream {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Adds"},"finish_reason":null}]}`+"\n\n")
	} else {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", "4000")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, completion(0)[:60])
	}
	w.(http.Flusher).Flush()
	conn, _, err := w.(http.Hijacker).Hijack()
	if err == nil {
		conn.Close()
	}
}

// hang answers nothing until the caller gives up.
func hang(_ http.ResponseWriter, r *http.Request, _ bool) {
	select {
	case <-r.Context().Done():
	case <-time.After(30 * time.Second):
	}
}

func rows() []row {
	ok := ratelimit.Cost{Requests: 1, Tokens: promptTokens + outputTokens, Input: promptTokens, Output: outputTokens}
	return []row{
		{name: "success", serve: reply(200, nil, completion(0)), outcome: llmcall.OK, bucket: byUsage, usage: ok, quota: byUsage,
			dollars: (promptTokens*1 + outputTokens*2) / 1e6, status: 200},
		{name: "success, with the provider's processing time", serve: reply(200, map[string]string{"openai-processing-ms": "0"}, completion(0)), way: true,
			outcome: llmcall.OK, bucket: byUsage, usage: ok, quota: byUsage, dollars: (promptTokens*1 + outputTokens*2) / 1e6, status: 200},
		{name: "success, the provider's remaining count", serve: reply(200, map[string]string{"x-ratelimit-limit-tokens": "1000000", "x-ratelimit-remaining-tokens": "1000"}, completion(0)),
			lowered: true, outcome: llmcall.OK, bucket: byUsage, usage: ok, quota: byUsage, dollars: (promptTokens*1 + outputTokens*2) / 1e6, status: 200},
		{name: "cached input, cache reads not counted", cachedFree: true, serve: reply(200, nil, completion(cachedTokens)), outcome: llmcall.OK, bucket: byUsage,
			usage: ratelimit.Cost{Requests: 1, Tokens: promptTokens - cachedTokens + outputTokens, Input: promptTokens - cachedTokens, Output: outputTokens},
			quota: byUsage, dollars: ((promptTokens-cachedTokens)*1 + cachedTokens*0.5 + outputTokens*2) / 1e6, status: 200},
		{name: "cached input, cache reads counted", serve: reply(200, nil, completion(cachedTokens)), outcome: llmcall.OK, bucket: byUsage, usage: ok,
			quota: byUsage, dollars: ((promptTokens-cachedTokens)*1 + cachedTokens*0.5 + outputTokens*2) / 1e6, status: 200},
		{name: "429 with headers", serve: reply(429, map[string]string{"retry-after": "1", "x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1s"},
			apiError("requests", "rate_limit_exceeded", "Rate limit reached")), lowered: true, outcome: llmcall.RateLimited, bucket: none, quota: none, status: 429},
		{name: "401", serve: reply(401, nil, apiError("invalid_request_error", "invalid_api_key", "Incorrect API key provided")),
			outcome: llmcall.AccountModel, bucket: refunded, quota: refunded, pause: []string{"model"}, status: 502},
		{name: "403 on one of two keys", keys: []string{keyA, keyB}, serve: func(w http.ResponseWriter, r *http.Request, stream bool) {
			if strings.HasSuffix(r.Header.Get("Authorization"), keyA) {
				reply(403, nil, apiError("permission_error", "", "This key may not use the model"))(w, r, stream)
				return
			}
			reply(200, nil, completion(0))(w, r, stream)
		}, outcome: llmcall.AccountKey, bucket: refunded, quota: refunded, pause: []string{"key 0"}, status: 502},
		{name: "context length", serve: reply(400, nil, apiError("invalid_request_error", "context_length_exceeded", "This model's maximum context length is 128000 tokens")),
			outcome: llmcall.ContextLength, bucket: none, quota: none, status: 400},
		{name: "5xx", serve: reply(500, nil, apiError("server_error", "", "The server had an error")), outcome: llmcall.Transient, bucket: kept, quota: kept, status: 500},
		{name: "timeout", serve: hang, outcome: llmcall.Transient, bucket: kept, quota: kept, status: 504},
		{name: "streamed and cut", serve: cut, outcome: llmcall.Transient, bucket: kept, quota: kept, status: 200},
		{name: "flex refused", flex: true, serve: func(w http.ResponseWriter, r *http.Request, stream bool) {
			reply(429, nil, apiError("resource_unavailable", "resource_unavailable", "Resource Unavailable: flex processing does not have the capacity for this request now."))(w, r, stream)
		}, outcome: llmcall.FlexRefused, bucket: refunded, quota: refunded, status: 429},
	}
}

// got is what one path did.
type got struct {
	outcome string // the workers' outcome label; the gateway's answer
	bucket  ratelimit.Cost
	settled bool
	way     bool  // the settle was given the call's way
	quota   int64 // the token quota's use, settled
	nano    int64 // the dollar quota's, in nano-dollars
	dollars float64
	pause   []string
	sent    int64 // the output cap the provider was asked for
	lowered bool  // the bucket holds far less than its limit less the call
	reports int   // settles given the reply's headers to lower the bucket to
}

// lowered says whether model's bucket (its first key) holds under half
// its tokens after one small call: the provider's report lowered it.
func lowered(t *testing.T, adm *recorder, model string) bool {
	t.Helper()
	b, _ := adm.Bucket(model)
	avail, _, err := b.Available(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return avail.Tokens < 500_000
}

// The quotas of both paths: tokens aplenty, and dollars that cut the
// output cap (the workers' prompt is longer than the gateway's).
const (
	workersQuotaDollars = 0.0015
	gatewayQuotaDollars = 0.0002
)

// a token's price under a dollar quota, in nano-dollars
var quotaIn, quotaOut = llmcall.Model{Prices: prices}.QuotaPrices(false)

// sentCap records the output cap of the requests the provider gets.
type sentCap struct {
	mu  sync.Mutex
	max int64
}

func (c *sentCap) record(body []byte) {
	var r struct {
		MaxTokens           int64 `json:"max_tokens"`
		MaxCompletionTokens int64 `json:"max_completion_tokens"`
	}
	if json.Unmarshal(body, &r) == nil {
		c.mu.Lock()
		c.max = max(r.MaxTokens, r.MaxCompletionTokens)
		c.mu.Unlock()
	}
}

func (c *sentCap) take() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.max
	c.max = 0
	return m
}

func TestConformance(t *testing.T) {
	t.Parallel()
	rdb := redistest.Shared(t).Client(t)
	for i, rw := range rows() {
		t.Run(rw.name, func(t *testing.T) {
			t.Parallel()
			var sent sentCap
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				sent.record(body)
				rw.serve(w, r, strings.Contains(string(body), `"stream":true`))
			}))
			t.Cleanup(up.Close)
			keys := rw.keys
			if len(keys) == 0 {
				keys = []string{keyA}
			}
			w := workersPath(t, rdb, up.URL+"/v1", keys, rw, int64(300+i))
			w.sent = sent.take()
			g, status := gatewayPath(t, rdb, up.URL+"/v1", keys, rw)
			g.sent = sent.take()
			check := func(path string, g got, limit float64, est func(ratelimit.Cost) bool) {
				t.Helper()
				if path == "workers" && g.outcome != rw.outcome.String() {
					t.Errorf("%s: outcome %q, want %q", path, g.outcome, rw.outcome)
				}
				switch rw.bucket {
				case byUsage:
					if !g.settled || g.bucket != rw.usage {
						t.Errorf("%s: bucket settled %v (%v), want the usage %v", path, g.bucket, g.settled, rw.usage)
					}
				case refunded:
					if !g.settled || g.bucket != (ratelimit.Cost{}) {
						t.Errorf("%s: bucket settled %v (%v), want a refund", path, g.bucket, g.settled)
					}
				default:
					if !g.settled || !est(g.bucket) {
						t.Errorf("%s: bucket settled %v (%v), want the estimate kept", path, g.bucket, g.settled)
					}
				}
				switch rw.quota {
				case byUsage:
					if g.quota != promptTokens+outputTokens {
						t.Errorf("%s: quota used %d, want the usage %d", path, g.quota, promptTokens+outputTokens)
					}
					if want := ratelimit.NanoCost(rw.dollars); g.nano != want {
						t.Errorf("%s: dollar quota used %d nano-dollars, want the cost %d", path, g.nano, want)
					}
				case kept:
					keptReservation(t, path, g, limit)
				default:
					if g.quota != 0 || g.nano != 0 {
						t.Errorf("%s: quota used %d tokens, %d nano-dollars, want none", path, g.quota, g.nano)
					}
				}
				if math.Abs(g.dollars-rw.dollars) > 1e-12 {
					t.Errorf("%s: cost $%g, want $%g", path, g.dollars, rw.dollars)
				}
				if g.lowered != rw.lowered {
					t.Errorf("%s: the key's bucket lowered to the provider's report: %v, want %v", path, g.lowered, rw.lowered)
				}
				if g.settled && g.way != rw.way {
					t.Errorf("%s: the settle was given the call's way: %v, want %v", path, g.way, rw.way)
				}
				if fmt.Sprint(g.pause) != fmt.Sprint(rw.pause) && len(g.pause)+len(rw.pause) > 0 {
					t.Errorf("%s: paused %v, want %v", path, g.pause, rw.pause)
				}
			}
			// the estimate: the workers' ticket's, the gateway's own
			check("workers", w, workersQuotaDollars, func(c ratelimit.Cost) bool { return c == ratelimit.Cost{Requests: 1, Tokens: workersEstimate} })
			check("gateway", g, gatewayQuotaDollars, func(c ratelimit.Cost) bool { return c.Requests == 1 && c.Tokens > 0 && c.Input == 0 && c.Output == 0 })
			if status != rw.status {
				t.Errorf("gateway: answered %d, want %d", status, rw.status)
			}
			// the workers lower the bucket to a report in the settle's
			// script; the gateway at the reply's headers (a stream
			// settles at its end)
			if want := map[bool]int{true: 1}[rw.lowered && rw.outcome == llmcall.OK]; w.reports != want || g.reports != 0 {
				t.Errorf("settles carrying the reply's headers: workers %d (want %d), gateway %d (want 0)", w.reports, want, g.reports)
			}
		})
	}
}

// keptReservation checks a call whose quotas keep all they reserved:
// the dollars reserved its input and the output cap it was sent with,
// the cap all the dollar quota pays for, and the tokens the same input
// and cap (reserved again for the dollars' cap, no more).
func keptReservation(t *testing.T, path string, g got, limit float64) {
	t.Helper()
	nano := ratelimit.Nano(limit)
	if g.sent <= 0 || (g.nano-g.sent*quotaOut)%quotaIn != 0 {
		t.Errorf("%s: the dollar quota keeps %d nano-dollars, not an input at %d and the cap sent (%d) at %d", path, g.nano, quotaIn, g.sent, quotaOut)
		return
	}
	input := (g.nano - g.sent*quotaOut) / quotaIn
	if free := nano - g.nano; free < 0 || free >= quotaOut {
		t.Errorf("%s: the dollar quota (%d nano-dollars) keeps %d: the cap %d is not all it pays for", path, nano, g.nano, g.sent)
	}
	if g.quota != input+g.sent {
		t.Errorf("%s: the token quota keeps %d, want the input %d and the cap %d the dollars left", path, g.quota, input, g.sent)
	}
}

// newScheduler is admission for one model with keys on rdb.
func newScheduler(t *testing.T, rdb *redis.Client, model string, keys []string) *recorder {
	t.Helper()
	b, err := ratelimit.NewKeyedBucket(rdb, model, keys, ratelimit.Limits{RequestsPerPeriod: 1000, TokensPerPeriod: 1_000_000})
	if err != nil {
		t.Fatal(err)
	}
	sched, err := admission.New(rdb, map[string]*ratelimit.Bucket{model: b}, nil, nil, admission.Config{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return &recorder{Scheduler: sched}
}

func modelName(path string) string { return fmt.Sprintf("conf-%s-%d", path, time.Now().UnixNano()) }

const (
	workersEstimate = 500
	callTimeout     = time.Second
)

// workersPath runs a summary job whose call gets rw's reply.
func workersPath(t *testing.T, rdb *redis.Client, url string, keys []string, rw row, inst int64) got {
	t.Helper()
	ctx := context.Background()
	model := modelName("workers")
	adm := newScheduler(t, rdb, model, keys)
	var clients []llm.Completer
	for _, k := range keys {
		clients = append(clients, llm.New(k, url, callTimeout, nil))
	}
	quota, err := ratelimit.NewQuota(rdb, ratelimit.QuotaConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var g got
	caller, err := workers.NewCaller(workers.CallerConfig{LLM: llm.NewRouter(map[string][]llm.Completer{model: clients}), Ledger: adm, Requeue: adm, Provider: adm,
		Quota: quota, Tiers: map[jobs.Tier]workers.TierSpec{jobs.TierPaid: {QuotaTokens: 1_000_000, QuotaDollars: workersQuotaDollars, Flex: rw.flex}},
		CountFunc: func(_, outcome string) { mu.Lock(); g.outcome = outcome; mu.Unlock() },
		CostFunc:  func(_, _, _ string, _ int64, d float64) { mu.Lock(); g.dollars += d; mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	st := store.New(rdb, jobs.TierFree)
	pr := jobs.PR{Installation: inst, Owner: "o", Repo: strings.ReplaceAll(t.Name(), "/", "-"), Number: 7}
	run := store.Run{PR: pr, Head: "h1", Tier: jobs.TierPaid, SummaryTotal: 1}
	if _, _, err := st.StartRun(ctx, run, []store.FileData{{Path: "a.go", Status: "modified", Additions: 1, Patch: "@@ -1 +1,2 @@\n a\n+b\n"}}); err != nil {
		t.Fatal(err)
	}
	f := jobs.File{PR: pr, HeadSHA: "h1", Kind: jobs.KindSummary, Tier: jobs.TierPaid, Path: "a.go", Total: 1, Estimate: workersEstimate, Model: model}
	task := asynq.NewTask(jobs.TypeSummary, jobs.Marshal(struct {
		jobs.File
		FileIndex int `json:"file_index"`
	}{File: f}))
	fw, err := workers.NewFileWorker(workers.FileWorkerConfig{Attempts: workers.NewAttempts(rdb), Store: st, Ledger: adm, Caller: caller, Queue: noQueue{},
		Models: map[string]workers.Model{model: {Model: llmcall.Model{Name: model, Prices: prices, CachedInputFree: rw.cachedFree, Flex: rw.flex, Output: llm.FormatText}}}, Repairs: st, Requeue: adm})
	if err != nil {
		t.Fatal(err)
	}
	_ = fw.ProcessTask(ctx, task) // what the job does next is the workers' own: the outcome is counted
	used, err := quota.Used(ctx, strconv.FormatInt(inst, 10), "", 1_000_000)
	if err != nil {
		t.Fatal(err)
	}
	usedNano, err := quota.UsedDollars(ctx, strconv.FormatInt(inst, 10), "", ratelimit.Nano(workersQuotaDollars))
	if err != nil {
		t.Fatal(err)
	}
	g.nano = usedNano.Used
	g.bucket, g.settled, g.way = adm.firstSettle()
	g.quota, g.pause = used.Used, adm.paused()
	g.lowered, g.reports = lowered(t, adm, model), adm.reported()
	return g
}

// noQueue takes the finalize job a finished summary enqueues.
type noQueue struct{}

func (noQueue) EnqueueContext(context.Context, *asynq.Task, ...asynq.Option) (*asynq.TaskInfo, error) {
	return &asynq.TaskInfo{}, nil
}

var _ workers.TaskQueue = noQueue{}

// gatewayPath relays a chat completion (a stream where the row cuts one
// off) whose call gets rw's reply; it returns the gateway's answer.
func gatewayPath(t *testing.T, rdb *redis.Client, url string, keys []string, rw row) (got, int) {
	t.Helper()
	model := modelName("gateway")
	adm := newScheduler(t, rdb, model, keys)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		adm.Run(ctx, admission.RunConfig{Capacity: func() int { return 4 }})
	}()
	waiter, err := adm.NewWaiter(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { waiter.Close(); cancel(); <-done })
	var mu sync.Mutex
	var g got
	gk := gateway.NewKeys(rdb)
	gw, err := gateway.New(gateway.Config{Models: map[string]gateway.Model{model: {Model: llmcall.Model{Prices: prices, CachedInputFree: rw.cachedFree},
		Provider: &gateway.Provider{Kind: gateway.KindOpenAI, BaseURL: url, Keys: keys}}},
		Timeout: callTimeout, CostFunc: func(_, _, _ string, d float64) { mu.Lock(); g.dollars += d; mu.Unlock() }, Log: slog.New(slog.DiscardHandler)},
		gk, adm, waiter, rdb, gateway.NewMetrics())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(srv.Close)
	secret, k, err := gk.Create(context.Background(), gateway.Spec{Name: "conf", Tier: "paid", QuotaTokens: 1_000_000, QuotaDollars: gatewayQuotaDollars})
	if err != nil {
		t.Fatal(err)
	}
	stream := ""
	if rw.name == "streamed and cut" {
		stream = `,"stream":true`
	}
	if rw.flex {
		stream += `,"service_tier":"flex"`
	}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"`+model+`","max_tokens":200,"messages":[{"role":"user","content":"Summarise a.go"}]`+stream+`}`))
	req.Header.Set("Authorization", "Bearer "+secret)
	req.Header.Set(gateway.MaxWaitHeader, "1")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	quota, _ := ratelimit.NewQuota(rdb, ratelimit.QuotaConfig{Period: k.QuotaPeriod})
	used, err := quota.Used(context.Background(), "key:"+k.ID, "", k.QuotaTokens)
	if err != nil {
		t.Fatal(err)
	}
	usedNano, err := quota.UsedDollars(context.Background(), "key:"+k.ID, "", ratelimit.Nano(k.QuotaDollars))
	if err != nil {
		t.Fatal(err)
	}
	if rw.dollars > 0 { // priced off the reply's way
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			mu.Lock()
			d := g.dollars
			mu.Unlock()
			if d > 0 {
				break
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	g.bucket, g.settled, g.way = adm.firstSettle()
	g.quota, g.nano, g.pause = used.Used, usedNano.Used, adm.paused()
	g.lowered, g.reports = lowered(t, adm, model), adm.reported()
	return g, res.StatusCode
}
