package gateway_test

import (
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

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/internal/gateway"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/llm"
	"github.com/prq-dev/prq/llmcall"
	"github.com/prq-dev/prq/ratelimit"
)

// fallbackRig serves a primary model on one fake whose fallback is a
// model on another fake; the primary's bucket holds primaryTPM tokens an
// hour (a drained one barely refills).
type fallbackRig struct {
	url, primary, backup string
	pFake, bFake         *fakeopenai.Server
	sched                *admission.Scheduler
	keys                 *gateway.Keys
	reg                  *prometheus.Registry
}

func newFallbackRig(t *testing.T, primaryTPM int64) *fallbackRig {
	t.Helper()
	return newFallbackRigWith(t, primaryTPM, fallbackOpts{})
}

// fallbackOpts vary a fallbackRig: fakes that answer at full length, and
// the models' prices.
type fallbackOpts struct {
	verbose                     bool
	primaryPrices, backupPrices llm.Prices
}

func newFallbackRigWith(t *testing.T, primaryTPM int64, o fallbackOpts) *fallbackRig {
	t.Helper()
	rdb := redistest.Shared(t).Client(t)
	n := time.Now().UnixNano()
	fr := &fallbackRig{primary: fmt.Sprintf("gpt-4o-%d", n), backup: fmt.Sprintf("gpt-4o-mini-%d", n)}
	start := func(model string) (*fakeopenai.Server, string) {
		f := fakeopenai.New(fakeopenai.Config{Models: []fakeopenai.Model{{Name: model, RPM: 1000, TPM: 100000}}, Keys: []string{"sk-up"}, Verbose: o.verbose})
		srv := httptest.NewServer(f)
		t.Cleanup(srv.Close)
		return f, srv.URL + "/v1"
	}
	var pURL, bURL string
	fr.pFake, pURL = start(fr.primary)
	fr.bFake, bURL = start(fr.backup)
	buckets := map[string]*ratelimit.Bucket{}
	for model, tpm := range map[string]int64{fr.primary: primaryTPM, fr.backup: 100000} {
		b, err := ratelimit.NewBucket(rdb, model, "sk-up", ratelimit.Limits{RequestsPerPeriod: 1000, TokensPerPeriod: tpm, Period: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		buckets[model] = b
	}
	log := slog.New(slog.DiscardHandler)
	sched, err := admission.New(rdb, buckets, nil, nil, admission.Config{}, log)
	if err != nil {
		t.Fatal(err)
	}
	fr.sched = sched
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); sched.Run(ctx, admission.RunConfig{Capacity: func() int { return 16 }}) }()
	waiter, err := sched.NewWaiter(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	metrics := gateway.NewMetrics()
	fr.reg = prometheus.NewRegistry()
	fr.reg.MustRegister(metrics.Collectors()...)
	fr.keys = gateway.NewKeys(rdb)
	g, err := gateway.New(gateway.Config{Models: map[string]gateway.Model{
		fr.primary: {Provider: &gateway.Provider{BaseURL: pURL, Keys: []string{"sk-up"}}, Model: llmcall.Model{Fallbacks: []string{fr.backup}, Prices: o.primaryPrices}},
		fr.backup:  {Provider: &gateway.Provider{BaseURL: bURL, Keys: []string{"sk-up"}}, Model: llmcall.Model{Prices: o.backupPrices}},
	}, FallbackWait: 300 * time.Millisecond, Log: log}, fr.keys, sched, waiter, rdb, metrics)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(func() { srv.Close(); waiter.Close(); cancel(); <-done })
	fr.url = srv.URL
	return fr
}

func (fr *fallbackRig) fallbacks(t *testing.T, reason string) float64 {
	t.Helper()
	fams, _ := fr.reg.Gather()
	sum := 0.0
	for _, f := range fams {
		if f.GetName() != "prq_gateway_fallbacks_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

// TestFallbacks: a request for a model that cannot serve moves to its
// fallback through admission: when the primary's provider fails (5xx),
// when the primary is paused, and when the primary's bucket would make
// it wait past gateway.fallback_wait. Chat completions, Responses and
// Messages all complete on the fallback, neither provider answers a 429,
// the key's quota holds exactly the usage, and each move is counted.
func TestFallbacks(t *testing.T) {
	t.Parallel()
	bodies := func(model string) map[string]string {
		return map[string]string{
			"/v1/chat/completions": `{"model":"` + model + `","max_tokens":50,"messages":[{"role":"user","content":"hello"}]}`,
			"/v1/responses":        `{"model":"` + model + `","max_output_tokens":50,"input":"hello"}`,
			"/v1/messages":         `{"model":"` + model + `","max_tokens":50,"messages":[{"role":"user","content":"hello"}]}`,
		}
	}
	post := func(t *testing.T, url, path, secret, body string) string {
		req, _ := http.NewRequest(http.MethodPost, url+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+secret)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", path, res.StatusCode, b)
		}
		return string(b)
	}
	for _, tc := range []struct {
		reason string
		setup  func(t *testing.T, fr *fallbackRig, secret string)
		tpm    int64
	}{
		{"provider", func(t *testing.T, fr *fallbackRig, _ string) { fr.pFake.SetFaults(fakeopenai.Faults{ServerError: 1}) }, 100000},
		{"paused", func(t *testing.T, fr *fallbackRig, _ string) {
			if err := fr.sched.Pause(context.Background(), fr.primary, "401 invalid_api_key", time.Minute); err != nil {
				t.Fatal(err)
			}
		}, 100000},
		{"wait", func(t *testing.T, fr *fallbackRig, secret string) {
			post(t, fr.url, "/v1/chat/completions", secret, `{"model":"`+fr.primary+`","max_tokens":560,"messages":[{"role":"user","content":"drain the bucket"}]}`)
		}, 600},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			t.Parallel()
			fr := newFallbackRig(t, tc.tpm)
			secret, k, err := fr.keys.Create(context.Background(), gateway.Spec{Name: "fb", Tier: "paid", QuotaTokens: 100000})
			if err != nil {
				t.Fatal(err)
			}
			tc.setup(t, fr, secret)
			before := fr.pFake.Stats()[fr.primary].Requests
			q, _ := ratelimit.NewQuota(redistest.Shared(t).Client(t), ratelimit.QuotaConfig{Period: k.QuotaPeriod})
			u0, _ := q.Used(context.Background(), "key:"+k.ID, "", k.QuotaTokens)
			var usage int64
			for path, body := range bodies(fr.primary) {
				var reply struct {
					Usage struct {
						TotalTokens  int64 `json:"total_tokens"`
						InputTokens  int64 `json:"input_tokens"`
						OutputTokens int64 `json:"output_tokens"`
					} `json:"usage"`
				}
				b := post(t, fr.url, path, secret, body)
				if err := json.Unmarshal([]byte(b), &reply); err != nil {
					t.Fatalf("%s: %s", path, b)
				}
				if path == "/v1/messages" {
					usage += reply.Usage.InputTokens + reply.Usage.OutputTokens
				} else {
					usage += reply.Usage.TotalTokens
				}
			}
			if u, _ := q.Used(context.Background(), "key:"+k.ID, "", k.QuotaTokens); u.Used-u0.Used != usage || usage == 0 {
				t.Fatalf("quota used %d by the three, their usage %d", u.Used-u0.Used, usage)
			}
			if got := fr.bFake.Stats()[fr.backup].Requests; got != 3 {
				t.Fatalf("%d requests reached the fallback, want 3", got)
			}
			primary := fr.pFake.Stats()[fr.primary].Requests - before
			if want := map[string]int64{"provider": 3}[tc.reason]; primary != want {
				t.Fatalf("%d requests reached the primary, want %d", primary, want)
			}
			for _, f := range []*fakeopenai.Server{fr.pFake, fr.bFake} {
				for m, st := range f.Stats() {
					if st.RateLimited != 0 {
						t.Fatalf("%s: %d provider 429s", m, st.RateLimited)
					}
				}
			}
			if got := fr.fallbacks(t, tc.reason); got != 3 {
				t.Fatalf("%v fallbacks counted for %s, want 3", got, tc.reason)
			}
		})
	}
}

// TestDollarQuotaFallback: a request whose model has a dearer fallback
// is reserved once, at the dearer prices (either may answer it), so the
// fallback that answers cannot take the key past its dollar quota; the
// call is settled at the prices of the model that answered. A fallback
// without prices is skipped under a dollar quota (its calls could not
// be counted).
func TestDollarQuotaFallback(t *testing.T) {
	t.Parallel()
	// the backup costs twice the primary's input and output
	fr := newFallbackRigWith(t, 100000, fallbackOpts{verbose: true, primaryPrices: llm.Prices{Input: 1, Output: 2}, backupPrices: llm.Prices{Input: 2, Output: 8}})
	fr.pFake.SetFaults(fakeopenai.Faults{ServerError: 1})
	const quota = 0.002
	limit := ratelimit.Nano(quota)
	secret, k, err := fr.keys.Create(context.Background(), gateway.Spec{Name: "fb-dollars", Tier: "paid", QuotaDollars: quota})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, fr.url+"/v1/chat/completions",
		strings.NewReader(`{"model":"`+fr.primary+`","max_tokens":500,"messages":[{"role":"user","content":"hello"}]}`))
	req.Header.Set("Authorization", "Bearer "+secret)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var reply struct {
		Model string
		Usage struct {
			PromptTokens     int64 `json:"prompt_tokens"`
			CompletionTokens int64 `json:"completion_tokens"`
		}
	}
	jsonDecode(res, &reply)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || reply.Model != fr.backup {
		t.Fatalf("%d from %q, want the fallback's answer", res.StatusCode, reply.Model)
	}
	// at the primary's prices the cap of 500 fits ($0.001); at the
	// backup's it does not
	cost := reply.Usage.PromptTokens*2000 + reply.Usage.CompletionTokens*8000
	q, _ := ratelimit.NewQuota(redistest.Shared(t).Client(t), ratelimit.QuotaConfig{Period: k.QuotaPeriod})
	u, err := q.UsedDollars(context.Background(), "key:"+k.ID, "", limit)
	if err != nil {
		t.Fatal(err)
	}
	if reply.Usage.CompletionTokens >= 500 || cost > limit || u.Used != cost {
		t.Fatalf("the fallback answered %d output tokens of 500 for %d nano-dollars of a %d quota (counted %d): want the cap cut at the fallback's prices and the counter its cost",
			reply.Usage.CompletionTokens, cost, limit, u.Used)
	}

	// an unpriced fallback is not tried under a dollar quota: the
	// primary's failure is the answer
	unpriced := newFallbackRigWith(t, 100000, fallbackOpts{primaryPrices: llm.Prices{Input: 1, Output: 2}})
	unpriced.pFake.SetFaults(fakeopenai.Faults{ServerError: 1})
	secret, _, err = unpriced.keys.Create(context.Background(), gateway.Spec{Name: "fb-unpriced", Tier: "paid", QuotaDollars: quota})
	if err != nil {
		t.Fatal(err)
	}
	req, _ = http.NewRequest(http.MethodPost, unpriced.url+"/v1/chat/completions",
		strings.NewReader(`{"model":"`+unpriced.primary+`","max_tokens":50,"messages":[{"role":"user","content":"hello"}]}`))
	req.Header.Set("Authorization", "Bearer "+secret)
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode < 500 || unpriced.bFake.Stats()[unpriced.backup].Requests != 0 {
		t.Fatalf("%d, %d calls to the unpriced fallback: want the primary's failure and none", res.StatusCode, unpriced.bFake.Stats()[unpriced.backup].Requests)
	}
}
