package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/internal/bench/baseline"
	"github.com/prq-dev/prq/internal/gateway"
	"github.com/prq-dev/prq/internal/harness"
	"github.com/prq-dev/prq/internal/quantile"
	"github.com/prq-dev/prq/internal/redisproc"
	"github.com/prq-dev/prq/ratelimit"
)

// The agents experiment: N agents, each with a 1,000-token quota, fire
// concurrent requests with max_tokens 500 at an OpenAI-compatible
// endpoint — prq's gateway, then a count-after-the-fact limiter (what
// gateways ship) — against the fake provider, whose model answers at full
// length. Then batch keys saturate a smaller model while a chat key asks
// one question at a time, and the chat's latency is measured.
const (
	agentQuota     = 1000
	agentMaxTokens = 500
	agentsBurst    = 10 // concurrent requests per agent
	agentsLater    = 3  // then a few more each
	quotaModel     = "gpt-4o-mini"
	sharedModel    = "gpt-4o"
	agentsPeriod   = 10 * time.Second
	sharedTPM      = 40000 // per period: 4,000 tokens/s
	batchKeys      = 4
	batchWorkers   = 8 // concurrent requests per batch key
	saturateFor    = 8 * time.Second
	upstreamKey    = "sk-agents-bench"
	chatMaxTokens  = 400 // a chat answer: about the batch jobs' size, so it cannot slip between them
)

// agentsResult is one strategy's figures.
type agentsResult struct {
	Name                 string
	PerAgent             []int64 // tokens each agent consumed (the provider's usage)
	Answered, Refused    int
	UpstreamForRefused   int64
	ChatLatency          []time.Duration
	ChatFailed           int
	Provider429          int64
	BatchAnswered        int
	BatchTokensPerSecond float64
}

// endpoint is one strategy's OpenAI-compatible URL and its keys.
type endpoint struct {
	url string
	// unlimitedURL serves the keys without a quota (the same as url for
	// prq; the baseline's limiter is set per proxy)
	unlimitedURL string
	agent        func(i int) string // the i-th agent's key (quota 1,000)
	batch        func(i int) string // the i-th batch key (no quota)
	chat         string             // the chat key (no quota)
	stop         func()
}

func runAgents(ctx context.Context, n int, stdout io.Writer) error {
	srv, err := redisproc.Start()
	if err != nil {
		return fmt.Errorf("bench agents: start redis-server: %w", err)
	}
	defer srv.Stop()
	opt, err := redis.ParseURL(srv.URL())
	if err != nil {
		return err
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	fmt.Fprintf(stdout, "bench agents: %d agents x (%d concurrent + %d more) requests, max_tokens %d, quota %d tokens each; then %d batch keys x %d saturate %s (%d TPM per %s) for %s while a chat key asks one question at a time\n",
		n, agentsBurst, agentsLater, agentMaxTokens, agentQuota, batchKeys, batchWorkers, sharedModel, sharedTPM, agentsPeriod, saturateFor)
	var results []agentsResult
	for _, name := range []string{"prq gateway", "count after the fact"} {
		if err := rdb.FlushDB(ctx).Err(); err != nil { // our own redis-server
			return err
		}
		fake := fakeopenai.New(fakeopenai.Config{Period: agentsPeriod, Keys: []string{upstreamKey}, Seed: 1, Verbose: true, Models: []fakeopenai.Model{
			{Name: quotaModel, RPM: 100000, TPM: 10_000_000, Latency: 200 * time.Millisecond, Jitter: 100 * time.Millisecond},
			{Name: sharedModel, RPM: 10000, TPM: sharedTPM, Latency: 300 * time.Millisecond, Jitter: 100 * time.Millisecond},
		}})
		furl, fclose, err := harness.ListenServe(fake)
		if err != nil {
			return err
		}
		var ep endpoint
		if name == "prq gateway" {
			ep, err = prqEndpoint(ctx, rdb, furl+"/v1", n)
		} else {
			ep, err = afterTheFactEndpoint(furl+"/v1", n)
		}
		if err != nil {
			fclose()
			return err
		}
		r := runAgentsOn(ctx, ep, n, fake)
		r.Name = name
		ep.stop()
		fclose()
		results = append(results, r)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	writeAgents(stdout, results)
	apis, err := runAPIs(ctx, rdb, n)
	if err != nil {
		return fmt.Errorf("bench agents: per API: %w", err)
	}
	writeAPIs(stdout, apis)
	return nil
}

func prqEndpoint(ctx context.Context, rdb *redis.Client, upstream string, n int) (endpoint, error) {
	buckets := map[string]*ratelimit.Bucket{}
	for name, l := range map[string]ratelimit.Limits{
		quotaModel:  {RequestsPerPeriod: 100000, TokensPerPeriod: 10_000_000, Period: agentsPeriod},
		sharedModel: {RequestsPerPeriod: 10000, TokensPerPeriod: sharedTPM, Period: agentsPeriod},
	} {
		b, err := ratelimit.NewBucket(rdb, name, upstreamKey, l)
		if err != nil {
			return endpoint{}, err
		}
		buckets[name] = b
	}
	log := slog.New(slog.DiscardHandler)
	sched, err := admission.New(rdb, buckets, nil, nil, admission.Config{}, log)
	if err != nil {
		return endpoint{}, err
	}
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { // the admission loop a worker process runs
		defer close(done)
		sched.Run(lctx, admission.RunConfig{Capacity: func() int { return 256 }})
	}()
	stopLoop := func() { cancel(); <-done }
	waiter, err := sched.NewWaiter(lctx, 0)
	if err != nil {
		stopLoop()
		return endpoint{}, err
	}
	keys := gateway.NewKeys(rdb)
	gw, err := gateway.New(gateway.Config{Models: map[string]gateway.Model{quotaModel: {}, sharedModel: {}}, UpstreamURL: upstream, UpstreamKey: upstreamKey, Log: log},
		keys, sched, waiter, rdb, nil)
	if err != nil {
		waiter.Close()
		stopLoop()
		return endpoint{}, err
	}
	url, closeHTTP, err := harness.ListenServe(gw.Handler())
	if err != nil {
		waiter.Close()
		stopLoop()
		return endpoint{}, err
	}
	ep := endpoint{url: url + "/v1", unlimitedURL: url + "/v1", stop: func() { closeHTTP(); waiter.Close(); stopLoop() }}
	mk := func(s gateway.Spec) (string, error) {
		secret, _, err := keys.Create(ctx, s)
		return secret, err
	}
	var agents, batch []string
	for i := 0; i < n; i++ {
		k, err := mk(gateway.Spec{Name: fmt.Sprintf("agent-%d", i), Tier: "paid", QuotaTokens: agentQuota, QuotaPeriod: ratelimit.Day})
		if err != nil {
			ep.stop()
			return endpoint{}, err
		}
		agents = append(agents, k)
	}
	for i := 0; i < batchKeys; i++ {
		k, err := mk(gateway.Spec{Name: fmt.Sprintf("batch-%d", i), Tier: "paid"})
		if err != nil {
			ep.stop()
			return endpoint{}, err
		}
		batch = append(batch, k)
	}
	if ep.chat, err = mk(gateway.Spec{Name: "chat", Tier: "chat"}); err != nil {
		ep.stop()
		return endpoint{}, err
	}
	ep.agent = func(i int) string { return agents[i] }
	ep.batch = func(i int) string { return batch[i] }
	return ep, nil
}

func afterTheFactEndpoint(upstream string, n int) (endpoint, error) {
	a := &baseline.AfterTheFact{Upstream: upstream, UpstreamKey: upstreamKey, Quota: agentQuota}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/chat/completions", a)
	url, closeHTTP, err := harness.ListenServe(mux)
	if err != nil {
		return endpoint{}, err
	}
	// batch and chat keys have no quota: their limiter never refuses
	unlimited := &baseline.AfterTheFact{Upstream: upstream, UpstreamKey: upstreamKey, Quota: math.MaxInt64}
	mux2 := http.NewServeMux()
	mux2.Handle("POST /v1/chat/completions", unlimited)
	url2, close2, err := harness.ListenServe(mux2)
	if err != nil {
		closeHTTP()
		return endpoint{}, err
	}
	return endpoint{url: url + "/v1", agent: func(i int) string { return "agent-" + strconv.Itoa(i) },
		batch: func(i int) string { return "batch-" + strconv.Itoa(i) }, chat: "chat",
		stop: func() { closeHTTP(); close2() }, unlimitedURL: url2 + "/v1"}, nil
}

// reply is one request's outcome as the client saw it.
type reply struct {
	status     int
	tokens     int64
	retryAfter time.Duration
}

var agentsClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}

// call sends one chat completion and reads the usage of a 200.
func call(ctx context.Context, url, key, model string, maxTokens int, text string) reply {
	body, _ := json.Marshal(map[string]any{"model": model, "max_tokens": maxTokens,
		"messages": []map[string]string{{"role": "user", "content": text}}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		return reply{}
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := agentsClient.Do(req)
	if err != nil {
		return reply{}
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := reply{status: resp.StatusCode}
	if ms, err := strconv.ParseInt(resp.Header.Get("retry-after-ms"), 10, 64); err == nil {
		r.retryAfter = time.Duration(ms) * time.Millisecond
	} else if s, err := strconv.ParseInt(resp.Header.Get("Retry-After"), 10, 64); err == nil {
		r.retryAfter = time.Duration(s) * time.Second
	}
	var u struct {
		Usage struct {
			Total int64 `json:"total_tokens"`
		} `json:"usage"`
	}
	if resp.StatusCode == http.StatusOK && json.Unmarshal(raw, &u) == nil {
		r.tokens = u.Usage.Total
	}
	return r
}

// withRetries retries 429s after the server's Retry-After, as the
// official SDKs do, up to tries times.
func withRetries(ctx context.Context, tries int, f func() reply) reply {
	var r reply
	for i := 0; i < tries && ctx.Err() == nil; i++ {
		if r = f(); r.status != http.StatusTooManyRequests {
			return r
		}
		select {
		case <-ctx.Done():
		case <-time.After(max(r.retryAfter, 100*time.Millisecond)):
		}
	}
	return r
}

func runAgentsOn(ctx context.Context, ep endpoint, n int, fake *fakeopenai.Server) agentsResult {
	var res agentsResult
	res.PerAgent = make([]int64, n)
	var mu sync.Mutex
	wave := func(k int) {
		var wg sync.WaitGroup
		for a := 0; a < n; a++ {
			for j := 0; j < k; j++ {
				wg.Add(1)
				go func(a, j int) {
					defer wg.Done()
					r := call(ctx, ep.url, ep.agent(a), quotaModel, agentMaxTokens, fmt.Sprintf("Agent %d, task %d: summarise the design document.", a, j))
					mu.Lock()
					defer mu.Unlock()
					switch r.status {
					case http.StatusOK:
						res.Answered++
						res.PerAgent[a] += r.tokens
					case http.StatusForbidden, http.StatusTooManyRequests:
						res.Refused++
					}
				}(a, j)
			}
		}
		wg.Wait()
	}
	wave(agentsBurst)
	wave(agentsLater)
	res.UpstreamForRefused = fake.Stats()[quotaModel].Requests - int64(res.Answered)

	// saturation: batch keys loop on the shared model while chat asks
	sctx, cancel := context.WithTimeout(ctx, saturateFor)
	defer cancel()
	var wg sync.WaitGroup
	var batchTokens int64
	for b := 0; b < batchKeys; b++ {
		for w := 0; w < batchWorkers; w++ {
			wg.Add(1)
			go func(b, w int) {
				defer wg.Done()
				for i := 0; sctx.Err() == nil; i++ {
					r := withRetries(sctx, 1000, func() reply {
						return call(sctx, ep.unlimitedURL, ep.batch(b), sharedModel, agentMaxTokens, fmt.Sprintf("Batch %d/%d job %d: review this file.", b, w, i))
					})
					if r.status == http.StatusOK {
						mu.Lock()
						res.BatchAnswered++
						batchTokens += r.tokens
						mu.Unlock()
					}
				}
			}(b, w)
		}
	}
	time.Sleep(saturateFor / 4) // let the batch load saturate the bucket first
	for i := 0; sctx.Err() == nil; i++ {
		start := time.Now()
		r := withRetries(sctx, 10, func() reply {
			return call(sctx, ep.unlimitedURL, ep.chat, sharedModel, chatMaxTokens, fmt.Sprintf("Chat question %d: is this change safe?", i))
		})
		if sctx.Err() != nil {
			break
		}
		if r.status == http.StatusOK {
			res.ChatLatency = append(res.ChatLatency, time.Since(start))
		} else {
			res.ChatFailed++
		}
		time.Sleep(200 * time.Millisecond)
	}
	wg.Wait()
	res.BatchTokensPerSecond = float64(batchTokens) / saturateFor.Seconds()
	res.Provider429 = fake.Stats()[sharedModel].RateLimited + fake.Stats()[quotaModel].RateLimited
	return res
}

func writeAgents(out io.Writer, rs []agentsResult) {
	fmt.Fprintf(out, "\n%-44s", "")
	for _, r := range rs {
		fmt.Fprintf(out, " %22s", r.Name)
	}
	fmt.Fprintln(out)
	row := func(label string, f func(agentsResult) string) {
		fmt.Fprintf(out, "%-44s", label)
		for _, r := range rs {
			fmt.Fprintf(out, " %22s", f(r))
		}
		fmt.Fprintln(out)
	}
	row("tokens per agent, max (quota 1000)", func(r agentsResult) string { return strconv.FormatInt(slices.Max(r.PerAgent), 10) })
	row("tokens per agent, mean", func(r agentsResult) string {
		var sum int64
		for _, v := range r.PerAgent {
			sum += v
		}
		return strconv.FormatInt(sum/int64(len(r.PerAgent)), 10)
	})
	row("agents over their quota", func(r agentsResult) string {
		over := 0
		for _, v := range r.PerAgent {
			if v > agentQuota {
				over++
			}
		}
		return fmt.Sprintf("%d of %d", over, len(r.PerAgent))
	})
	row("requests answered / refused", func(r agentsResult) string { return fmt.Sprintf("%d / %d", r.Answered, r.Refused) })
	row("upstream calls for refused requests", func(r agentsResult) string { return strconv.FormatInt(r.UpstreamForRefused, 10) })
	row("chat latency p50 / p95 (batch saturating)", func(r agentsResult) string {
		if len(r.ChatLatency) == 0 {
			return "none answered"
		}
		return fmt.Sprintf("%s / %s", quantile.Of(r.ChatLatency, 0.5).Round(time.Millisecond), quantile.Of(r.ChatLatency, 0.95).Round(time.Millisecond))
	})
	row("chat questions answered / failed", func(r agentsResult) string { return fmt.Sprintf("%d / %d", len(r.ChatLatency), r.ChatFailed) })
	row("batch tokens/s answered (refill 4000/s)", func(r agentsResult) string { return fmt.Sprintf("%.0f", r.BatchTokensPerSecond) })
	row("provider 429s", func(r agentsResult) string { return strconv.FormatInt(r.Provider429, 10) })
}

// The second seed's experiment through each API: agents of two kinds —
// A (a 1,000-token quota, 20 concurrent requests with an output cap of
// 500) and B (200 tokens, 4 requests) — send one burst each through chat
// completions, Responses, Messages and embeddings (input only, some 65
// tokens a request), to prq's gateway and to a count-after-the-fact
// limiter in front of the same gateway (keys without quotas: it only
// translates), against the fake provider answering briefly, as agents'
// models mostly do. Each agent's tokens are summed from its replies'
// usage.
const (
	apiModel     = "gpt-4o-mini"
	apiEmbedding = "text-embedding-3-small"
)

// agentKind is A or B of the second seed's setting.
type agentKind struct {
	name      string
	quota     int64
	requests  int
	maxTokens int
}

var agentKinds = []agentKind{{"A", 1000, 20, 500}, {"B", 200, 4, 500}}

// apiCase is one API's request and how its reply counts.
type apiCase struct {
	name, path string
	body       func(model string, maxTokens int, text string) []byte
}

var embeddingText = strings.Repeat("The design keeps admission exact across processes. ", 8)

var apiCases = []apiCase{
	{"chat completions", "/chat/completions", func(model string, max int, text string) []byte {
		b, _ := json.Marshal(map[string]any{"model": model, "max_tokens": max, "messages": []map[string]string{{"role": "user", "content": text}}})
		return b
	}},
	{"responses", "/responses", func(model string, max int, text string) []byte {
		b, _ := json.Marshal(map[string]any{"model": model, "max_output_tokens": max, "input": text})
		return b
	}},
	{"messages", "/messages", func(model string, max int, text string) []byte {
		b, _ := json.Marshal(map[string]any{"model": model, "max_tokens": max, "messages": []map[string]string{{"role": "user", "content": text}}})
		return b
	}},
	{"embeddings", "/embeddings", func(string, int, string) []byte {
		b, _ := json.Marshal(map[string]any{"model": apiEmbedding, "input": embeddingText})
		return b
	}},
}

// apiResult is one (API, strategy)'s figures: tokens per agent by kind.
type apiResult struct {
	api, strategy     string
	perAgent          map[string][]int64 // kind → tokens of each agent
	answered, refused int
	upstreamRefused   int64
}

// apiCall posts one request of c and returns its status and usage.
func apiCall(ctx context.Context, url, key string, c apiCase, model string, max int, text string) (int, int64) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+c.path, bytes.NewReader(c.body(model, max, text)))
	if err != nil {
		return 0, 0
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := agentsClient.Do(req)
	if err != nil {
		return 0, 0
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var u struct {
		Usage struct {
			Total  int64 `json:"total_tokens"`
			Input  int64 `json:"input_tokens"`
			Output int64 `json:"output_tokens"`
		} `json:"usage"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &u) != nil {
		return resp.StatusCode, 0
	}
	if u.Usage.Total > 0 {
		return resp.StatusCode, u.Usage.Total
	}
	return resp.StatusCode, u.Usage.Input + u.Usage.Output
}

// apiStack is prq's gateway on the fake for the per-API experiment.
type apiStack struct {
	url  string
	keys *gateway.Keys
	fake *fakeopenai.Server
	stop func()
}

func startAPIStack(ctx context.Context, rdb *redis.Client) (*apiStack, error) {
	fake := fakeopenai.New(fakeopenai.Config{Period: time.Minute, Keys: []string{upstreamKey}, Seed: 3, Models: []fakeopenai.Model{
		{Name: apiModel, RPM: 100000, TPM: 10_000_000, Latency: 200 * time.Millisecond, Jitter: 100 * time.Millisecond},
		{Name: apiEmbedding, RPM: 100000, TPM: 10_000_000, Latency: 200 * time.Millisecond},
	}})
	furl, fclose, err := harness.ListenServe(fake)
	if err != nil {
		return nil, err
	}
	buckets := map[string]*ratelimit.Bucket{}
	for _, name := range []string{apiModel, apiEmbedding} {
		b, err := ratelimit.NewBucket(rdb, name, upstreamKey, ratelimit.Limits{RequestsPerPeriod: 100000, TokensPerPeriod: 10_000_000})
		if err != nil {
			fclose()
			return nil, err
		}
		buckets[name] = b
	}
	log := slog.New(slog.DiscardHandler)
	sched, err := admission.New(rdb, buckets, nil, nil, admission.Config{}, log)
	if err != nil {
		fclose()
		return nil, err
	}
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); sched.Run(lctx, admission.RunConfig{Capacity: func() int { return 256 }}) }()
	waiter, err := sched.NewWaiter(lctx, 0)
	if err != nil {
		cancel()
		<-done
		fclose()
		return nil, err
	}
	keys := gateway.NewKeys(rdb)
	gw, err := gateway.New(gateway.Config{Models: map[string]gateway.Model{apiModel: {}, apiEmbedding: {}}, UpstreamURL: furl + "/v1", UpstreamKey: upstreamKey, Log: log},
		keys, sched, waiter, rdb, nil)
	var url string
	var closeHTTP func()
	if err == nil {
		url, closeHTTP, err = harness.ListenServe(gw.Handler())
	}
	if err != nil {
		waiter.Close()
		cancel()
		<-done
		fclose()
		return nil, err
	}
	return &apiStack{url: url + "/v1", keys: keys, fake: fake, stop: func() { closeHTTP(); waiter.Close(); cancel(); <-done; fclose() }}, nil
}

// runAPIs runs the per-API experiment with n agents (even ones of kind
// A, odd ones B).
func runAPIs(ctx context.Context, rdb *redis.Client, n int) ([]apiResult, error) {
	var out []apiResult
	for _, strategy := range []string{"prq gateway", "count after the fact"} {
		if err := rdb.FlushDB(ctx).Err(); err != nil { // our own redis-server
			return nil, err
		}
		st, err := startAPIStack(ctx, rdb)
		if err != nil {
			return nil, err
		}
		for _, c := range apiCases {
			r, err := runAPI(ctx, st, strategy, c, n)
			if err != nil {
				st.stop()
				return nil, err
			}
			out = append(out, r)
		}
		st.stop()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	return out, nil
}

func runAPI(ctx context.Context, st *apiStack, strategy string, c apiCase, n int) (apiResult, error) {
	res := apiResult{api: c.name, strategy: strategy, perAgent: map[string][]int64{}}
	url := st.url
	secrets := make([]string, n)
	kinds := make([]agentKind, n)
	var atf *baseline.AfterTheFact
	if strategy != "prq gateway" {
		// the baseline's limiter in front of the gateway, whose key has no quota
		open, _, err := st.keys.Create(ctx, gateway.Spec{Name: "baseline", Tier: "paid"})
		if err != nil {
			return res, err
		}
		atf = &baseline.AfterTheFact{Upstream: st.url, UpstreamKey: open, Quotas: map[string]int64{}, Client: agentsClient}
		u, closeHTTP, err := harness.ListenServe(atf)
		if err != nil {
			return res, err
		}
		defer closeHTTP()
		url = u + "/v1"
	}
	for i := range n {
		kinds[i] = agentKinds[i%2]
		if atf != nil {
			secrets[i] = fmt.Sprintf("%s-agent-%d", c.name, i)
			atf.Quotas[secrets[i]] = kinds[i].quota
			continue
		}
		s, _, err := st.keys.Create(ctx, gateway.Spec{Name: fmt.Sprintf("%s-agent-%d", c.name, i), Tier: "paid", QuotaTokens: kinds[i].quota, QuotaPeriod: ratelimit.Day})
		if err != nil {
			return res, err
		}
		secrets[i] = s
	}
	model := apiModel
	if c.path == "/embeddings" {
		model = apiEmbedding
	}
	calls0 := st.fake.Stats()[model].Requests
	tokens := make([]int64, n)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range n {
		for j := range kinds[i].requests {
			wg.Go(func() {
				code, used := apiCall(ctx, url, secrets[i], c, apiModel, kinds[i].maxTokens, fmt.Sprintf("Agent %d, task %d: summarise the design document.", i, j))
				mu.Lock()
				defer mu.Unlock()
				switch code {
				case http.StatusOK:
					res.answered++
					tokens[i] += used
				case http.StatusForbidden, http.StatusTooManyRequests:
					res.refused++
				}
			})
		}
	}
	wg.Wait()
	res.upstreamRefused = st.fake.Stats()[model].Requests - calls0 - int64(res.answered)
	for i := range n {
		res.perAgent[kinds[i].name] = append(res.perAgent[kinds[i].name], tokens[i])
	}
	return res, nil
}

// writeAPIs prints, for each API, each kind's tokens per agent against
// its quota, prq's gateway beside the baseline.
func writeAPIs(out io.Writer, rs []apiResult) {
	fmt.Fprintf(out, "\nper API: agents A (quota 1000, 20 concurrent, max_tokens 500) and B (quota 200, 4 concurrent); tokens per agent min / mean / max\n")
	fmt.Fprintf(out, "%-18s %-22s %-24s %-20s %-14s %-18s %s\n", "API", "strategy", "A (quota 1000)", "B (quota 200)", "over quota", "answered/refused", "upstream for refused")
	for _, r := range rs {
		over, agents := 0, 0
		cell := func(k agentKind) string {
			v := r.perAgent[k.name]
			if len(v) == 0 {
				return "-"
			}
			var sum int64
			for _, x := range v {
				sum += x
				if x > k.quota {
					over++
				}
			}
			agents += len(v)
			return fmt.Sprintf("%d / %d / %d", slices.Min(v), sum/int64(len(v)), slices.Max(v))
		}
		a, b := cell(agentKinds[0]), cell(agentKinds[1])
		fmt.Fprintf(out, "%-18s %-22s %-24s %-20s %-14s %-18s %d\n", r.api, r.strategy, a, b, fmt.Sprintf("%d of %d", over, agents),
			fmt.Sprintf("%d / %d", r.answered, r.refused), r.upstreamRefused)
	}
}
