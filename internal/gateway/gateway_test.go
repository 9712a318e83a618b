package gateway_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/internal/gateway"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/ratelimit"
)

// rig is a gateway on a real Redis with an in-process admission loop (a
// worker's) and the fake provider.
type rig struct {
	url   string
	up    string // the fake provider's URL
	model string
	rdb   *redis.Client
	keys  *gateway.Keys
	sched *admission.Scheduler
	fake  *fakeopenai.Server
	reg   *prometheus.Registry // the gateway's metrics
	// handler is the gateway's, for benchmarks that skip the network
	handler http.Handler
}

func newRig(t testing.TB, latency time.Duration) *rig {
	t.Helper()
	return newRigWith(t, rigOpts{latency: latency})
}

// rigOpts vary a rig: the fake's latency, the upstream URL the gateway
// calls (the fake's by default), the bucket's period (a minute by
// default; a long one barely refills during a test) and the gateway's
// settings.
type rigOpts struct {
	latency  time.Duration
	upstream string
	period   time.Duration
	cfg      func(*gateway.Config)
	verbose  bool // the fake answers at full length
	// upstreamKeys, when set, are the provider's several keys (the fake
	// accepts them and limits each by itself; the model's bucket has a
	// state per key); else one key, sk-up.
	upstreamKeys []string
	// wrap, when set, wraps the gateway's handler (as serve wraps it
	// with its security headers)
	wrap func(http.Handler) http.Handler
	// rpm, tpm are the model's limits per period (1,000 and 100,000 by
	// default)
	rpm, tpm int64
	// flex: the fake's model serves flex processing
	flex bool
}

func newRigWith(t testing.TB, o rigOpts) *rig {
	t.Helper()
	latency := o.latency
	rdb := redistest.Shared(t).Client(t)
	model := fmt.Sprintf("gpt-4o-mini-%d", time.Now().UnixNano())
	upKeys := o.upstreamKeys
	if len(upKeys) == 0 {
		upKeys = []string{"sk-up"}
	}
	rpm, tpm := cmp.Or(o.rpm, 1000), cmp.Or(o.tpm, 100000)
	fake := fakeopenai.New(fakeopenai.Config{Models: []fakeopenai.Model{{Name: model, RPM: rpm, TPM: tpm, Latency: latency, Flex: o.flex}}, Keys: upKeys, Verbose: o.verbose,
		Period: o.period, Record: true})
	up := httptest.NewServer(fake)
	t.Cleanup(up.Close)
	b, err := ratelimit.NewKeyedBucket(rdb, model, upKeys, ratelimit.Limits{RequestsPerPeriod: rpm, TokensPerPeriod: tpm, Period: o.period})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	sched, err := admission.New(rdb, map[string]*ratelimit.Bucket{model: b}, nil, nil, admission.Config{}, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		sched.Run(ctx, admission.RunConfig{Capacity: func() int { return 16 }})
	}()
	waiter, err := sched.NewWaiter(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	keys := gateway.NewKeys(rdb)
	cfg := gateway.Config{Models: map[string]gateway.Model{model: {}}, UpstreamURL: up.URL + "/v1", UpstreamKey: "sk-up", Log: log}
	if o.upstream != "" {
		cfg.UpstreamURL = o.upstream
	}
	if len(o.upstreamKeys) > 0 {
		cfg.UpstreamKeys = o.upstreamKeys
	}
	if o.cfg != nil {
		o.cfg(&cfg)
	}
	metrics := gateway.NewMetrics()
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.Collectors()...)
	g, err := gateway.New(cfg, keys, sched, waiter, rdb, metrics)
	if err != nil {
		t.Fatal(err)
	}
	h := g.Handler()
	if o.wrap != nil {
		h = o.wrap(h)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Config.WriteTimeout = 300 * time.Millisecond // as serve's, shortened: a gateway request outlives it
	srv.Start()
	t.Cleanup(func() { srv.Close(); waiter.Close(); cancel(); <-done })
	return &rig{url: srv.URL, up: up.URL, model: model, rdb: rdb, keys: keys, sched: sched, fake: fake, reg: reg, handler: g.Handler()}
}

func (r *rig) key(t testing.TB, s gateway.Spec) (string, gateway.Key) {
	t.Helper()
	secret, k, err := r.keys.Create(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	return secret, k
}

// postTo posts body to one of the gateway's paths with a bearer key.
func (r *rig) postTo(ctx context.Context, path, secret, body string) (*http.Response, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.url+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+secret)
	return http.DefaultClient.Do(req)
}

func (r *rig) post(ctx context.Context, secret, body string, header map[string]string) (*http.Response, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+secret)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	return http.DefaultClient.Do(req)
}

func (r *rig) used(t *testing.T, k gateway.Key) int64 {
	t.Helper()
	q, _ := ratelimit.NewQuota(r.rdb, ratelimit.QuotaConfig{Period: k.QuotaPeriod})
	u, err := q.Used(context.Background(), "key:"+k.ID, "", k.QuotaTokens)
	if err != nil {
		t.Fatal(err)
	}
	return u.Used
}

func (r *rig) bucketTokens(t *testing.T) int64 {
	t.Helper()
	b, _ := r.sched.Bucket(r.model)
	c, _, err := b.Available(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return c.Tokens
}

// metric sums a series of the gateway's metrics.
func (r *rig) metric(t *testing.T, name string) float64 {
	t.Helper()
	fams, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range fams {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// eventually polls cond; the machine is shared, so no timing is asserted.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
	}
}

// TestDisconnectWhileWaiting: a client that leaves before admission gets
// its quota reservation back and leaves no ticket; nothing goes upstream.
func TestDisconnectWhileWaiting(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	secret, k := r.key(t, gateway.Spec{Name: "leaver", Tier: "paid", QuotaTokens: 10000})
	ctx := context.Background()
	if err := r.sched.Pause(ctx, r.model, "test", time.Minute); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := r.post(cctx, secret, `{"model":"`+r.model+`","max_tokens":100,"messages":[{"role":"user","content":"hello"}]}`, nil)
		errc <- err
	}()
	eventually(t, "the request reserves its quota and waits", func() bool {
		st, _ := r.sched.Stats(ctx, r.model)
		return r.used(t, k) > 0 && st.Backlog["paid"] == 1
	})
	cancel()
	<-errc
	eventually(t, "the reservation given back and the ticket gone", func() bool {
		st, _ := r.sched.Stats(ctx, r.model)
		return r.used(t, k) == 0 && st.Backlog["paid"] == 0
	})
	if n := r.fake.Stats()[r.model].Requests; n != 0 {
		t.Fatalf("%d upstream calls for a request that left before admission", n)
	}
}

// TestDisconnectDuringCall: a client that leaves during the call cancels
// the upstream request; without a reported usage the reservation stands
// (the provider may have generated up to the cap: never an overshoot).
func TestDisconnectDuringCall(t *testing.T) {
	t.Parallel()
	r := newRig(t, time.Minute)
	secret, k := r.key(t, gateway.Spec{Name: "impatient", Tier: "chat", QuotaTokens: 10000})
	ctx := context.Background()
	full := r.bucketTokens(t)
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := r.post(cctx, secret, `{"model":"`+r.model+`","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"hello"}]}`, nil)
		errc <- err
	}()
	eventually(t, "the call reaches the provider", func() bool { return r.fake.Stats()[r.model].Requests == 1 })
	reserved := r.used(t, k)
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("the request finished although its client left")
	}
	// the reservation is settled as is (input + cap), once
	eventually(t, "the call settled", func() bool {
		keys, _ := r.rdb.Keys(ctx, "{prq:quota:key_"+k.ID+"}:res:*").Result()
		return len(keys) == 0
	})
	if got := r.used(t, k); got != reserved || got <= 100 {
		t.Fatalf("quota used %d after the client left mid-call, want the reservation %d (input + the 100 cap)", got, reserved)
	}
	if got := r.bucketTokens(t); got >= full {
		t.Fatalf("bucket %d of %d: the call's charge was given back although the provider ran it", got, full)
	}
}

// TestRequestErrors: OpenAI's error shapes for what the gateway refuses
// before anything is reserved.
func TestRequestErrors(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	secret, _ := r.key(t, gateway.Spec{Name: "errors", Tier: "free", Models: []string{"other-model"}})
	open, _ := r.key(t, gateway.Spec{Name: "open", Tier: "free"})
	msg := `"messages":[{"role":"user","content":"hi"}]`
	tests := []struct {
		name, key, body string
		header          map[string]string
		want            int
		code            string
	}{
		{"no key", "", `{}`, nil, 401, "missing_api_key"},
		{"unknown key", gateway.KeyPrefix + "x", `{}`, nil, 401, "invalid_api_key"},
		{"model not allowed", secret, `{"model":"` + r.model + `",` + msg + `}`, nil, 404, "model_not_found"},
		{"unknown model", open, `{"model":"nope",` + msg + `}`, nil, 404, "model_not_found"},
		{"bad json", open, `{`, nil, 400, ""},
		{"both caps", open, `{"model":"` + r.model + `","max_tokens":5,"max_completion_tokens":5,` + msg + `}`, nil, 400, ""},
		{"stream options without stream", open, `{"model":"` + r.model + `","stream_options":{"include_usage":true},` + msg + `}`, nil, 400, ""},
		{"bad max wait", open, `{"model":"` + r.model + `",` + msg + `}`, map[string]string{gateway.MaxWaitHeader: "soon"}, 400, ""},
		{"image part", open, `{"model":"` + r.model + `","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, nil, 400, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := r.post(context.Background(), tt.key, tt.body, tt.header)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			var e struct {
				Error struct {
					Message, Type string
					Code          *string
				} `json:"error"`
			}
			if err := jsonDecode(res, &e); err != nil || res.StatusCode != tt.want || e.Error.Message == "" || e.Error.Type == "" {
				t.Fatalf("%d %+v (%v), want %d in OpenAI's error shape", res.StatusCode, e, err, tt.want)
			}
			if tt.code != "" && (e.Error.Code == nil || *e.Error.Code != tt.code) {
				t.Fatalf("code %v, want %s", e.Error.Code, tt.code)
			}
		})
	}
	if n := r.fake.Stats()[r.model].Requests; n != 0 {
		t.Fatalf("%d upstream calls for refused requests", n)
	}
}

func jsonDecode(res *http.Response, v any) error { return json.NewDecoder(res.Body).Decode(v) }

// TestProvider429GoesBackThroughAdmission: a call the provider refuses
// with 429 (its clock runs a little after admission's, or another user
// of the account) waits in the order again, a bounded number of times;
// the client then gets the 429 with Retry-After, and the quota back.
func TestProvider429GoesBackThroughAdmission(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	r.fake.SetFaults(fakeopenai.Faults{TooMany: 1})
	secret, k := r.key(t, gateway.Spec{Name: "unlucky", Tier: "paid", QuotaTokens: 10000})
	res, err := r.post(context.Background(), secret, `{"model":"`+r.model+`","max_tokens":50,"messages":[{"role":"user","content":"hello"}]}`, nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") == "" {
		t.Fatalf("%d Retry-After %q, want the provider's 429 with Retry-After", res.StatusCode, res.Header.Get("Retry-After"))
	}
	if n := r.fake.Stats()[r.model].Requests; n != 4 {
		t.Fatalf("%d upstream calls, want 4: the call and three more through admission", n)
	}
	if got := r.used(t, k); got != 0 {
		t.Fatalf("quota used %d for a request the provider never ran", got)
	}
	// every attempt's admission charge was settled (admission keeps
	// unsettled reservations in its "res" hash)
	b, _ := r.sched.Bucket(r.model)
	if n, err := r.rdb.HLen(context.Background(), b.Tag()+":adm:res").Result(); err != nil || n != 0 {
		t.Fatalf("%d admission reservations left unsettled (%v)", n, err)
	}
	r.fake.SetFaults(fakeopenai.Faults{})
	res, err = r.post(context.Background(), secret, `{"model":"`+r.model+`","max_tokens":50,"messages":[{"role":"user","content":"hello"}]}`, nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("after the faults: %d", res.StatusCode)
	}
}

// TestKeyTPMAndChoices: a key's tokens per minute refuse with 429 and
// Retry-After before anything is sent (400 for a request over them by
// itself).
func TestKeyTPMAndChoices(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	ctx := context.Background()
	slow, _ := r.key(t, gateway.Spec{Name: "slow", Tier: "free", TPM: 200})
	body := func(max int) string {
		return fmt.Sprintf(`{"model":"%s","max_tokens":%d,"messages":[{"role":"user","content":"hello"}]}`, r.model, max)
	}
	status := func(secret, b string) (int, http.Header) {
		res, err := r.post(ctx, secret, b, nil)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode, res.Header
	}
	if code, _ := status(slow, body(500)); code != http.StatusBadRequest {
		t.Fatalf("a request over the key's whole TPM: %d, want 400 (never admissible: no 429, which SDKs retry)", code)
	}
	if code, _ := status(slow, body(150)); code != http.StatusOK {
		t.Fatalf("the first request within the TPM: %d", code)
	}
	// the first spent its input and some 30 tokens of output, not the
	// 150 reserved: what is left of the minute does not cover 190 more
	code, h := status(slow, body(190))
	if code != http.StatusTooManyRequests || h.Get("Retry-After") == "" {
		t.Fatalf("a second request over what the minute has left: %d Retry-After %q, want 429 with it", code, h.Get("Retry-After"))
	}
	if n := r.fake.Stats()[r.model].Requests; n != 1 {
		t.Fatalf("%d upstream calls, want 1: TPM refusals send nothing", n)
	}

}

// TestSeveralUpstreamKeys: with three provider keys the gateway sends
// each request with the key admission charged, so a model takes three
// times one key's limit with no 429 on any key.
func TestSeveralUpstreamKeys(t *testing.T) {
	t.Parallel()
	keys := []string{"sk-up-a", "sk-up-b", "sk-up-c"}
	r := newRigWith(t, rigOpts{period: time.Hour, upstreamKeys: keys}) // an hour: barely refills
	ctx := context.Background()
	secret, _ := r.key(t, gateway.Spec{Name: "many", Tier: "paid"})
	// 12 requests of ~20005 tokens: 240k, over one key's 100k, within three
	for i := range 12 {
		res, err := r.post(ctx, secret, fmt.Sprintf(`{"model":"%s","max_tokens":20000,"messages":[{"role":"user","content":"hello %d"}]}`, r.model, i), nil)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %d", i, res.StatusCode)
		}
	}
	if st := r.fake.Stats()[r.model]; st.RateLimited != 0 || st.Requests != 12 {
		t.Fatalf("the provider saw %d requests and answered %d 429s", st.Requests, st.RateLimited)
	}
	per := map[string]int64{}
	for _, a := range r.fake.Admissions(r.model) {
		per[a.Key] += a.Cost
	}
	for i, k := range keys {
		if got := per[fakeopenai.KeyLabel(k)]; got == 0 || got > 100000 {
			t.Errorf("key %d carried %d tokens, want some and at most its 100000", i, got)
		}
	}
}

// TestChoicesShareTheCap: n choices share what the key has left, each
// capped to its share. The fake answers at full length (verbose) and
// generates n choices, counting them all, as OpenAI does: a cap not
// divided by n would spend some three times the quota.
func TestChoicesShareTheCap(t *testing.T) {
	t.Parallel()
	r := newRigWith(t, rigOpts{verbose: true})
	for _, stream := range []bool{false, true} {
		few, k := r.key(t, gateway.Spec{Name: "few", Tier: "paid", QuotaTokens: 100})
		res, err := r.post(context.Background(), few, fmt.Sprintf(`{"model":"%s","n":3,"stream":%v,"max_tokens":500,"messages":[{"role":"user","content":"hello"}]}`, r.model, stream), nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("n=3: %d", res.StatusCode)
		}
		if got := r.used(t, k); got > 100 || got < 60 {
			t.Fatalf("stream %v: n=3 spent %d of a 100-token quota, want all but the rounding (three choices of ~27 tokens)", stream, got)
		}
	}
}

// TestSlowCallOutlivesWriteTimeout: the server's write timeout bounds
// ordinary requests, not a gateway call that waits and streams longer.
func TestSlowCallOutlivesWriteTimeout(t *testing.T) {
	t.Parallel()
	r := newRig(t, time.Second)
	secret, _ := r.key(t, gateway.Spec{Name: "patient", Tier: "paid"})
	for _, stream := range []bool{false, true} {
		res, err := r.post(context.Background(), secret, fmt.Sprintf(`{"model":"%s","stream":%v,"max_tokens":20,"messages":[{"role":"user","content":"hello"}]}`, r.model, stream), nil)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil || res.StatusCode != http.StatusOK || !strings.Contains(string(body), "content") {
			t.Fatalf("stream %v: %d %v %q", stream, res.StatusCode, err, body)
		}
	}
}

// BenchmarkCompletion is the gateway's own cost per request against
// the provider called directly (the fake answers at once): authenticate,
// count, reserve the quota, wait in admission (the loop's Lua call, a
// publish), call, settle.
func BenchmarkCompletion(b *testing.B) {
	// limits per second, well above what one machine sends: the bench
	// measures the gateway's cost, not the model's limit
	r := newRigWith(b, rigOpts{rpm: 10_000_000, tpm: 1_000_000_000})
	secret, _ := r.key(b, gateway.Spec{Name: "bench", Tier: "paid", QuotaTokens: 1 << 40})
	body := fmt.Sprintf(`{"model":"%s","max_tokens":20,"messages":[{"role":"user","content":"hello"}]}`, r.model)
	for _, tc := range []struct{ name, url, key string }{{"direct", r.up, "sk-up"}, {"gateway", r.url, secret}} {
		b.Run(tc.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				req, _ := http.NewRequest(http.MethodPost, tc.url+"/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+tc.key)
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != http.StatusOK {
					b.Fatalf("status %d", res.StatusCode)
				}
			}
		})
	}
}
