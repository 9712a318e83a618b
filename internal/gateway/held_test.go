package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/prq-dev/prq/internal/gateway"
)

// sdk is the official openai client of a key, pointed at the gateway,
// retrying nothing (the test sees every answer).
func (r *rig) sdk(secret string) openai.Client {
	return openai.NewClient(option.WithBaseURL(r.url+"/v1/"), option.WithAPIKey(secret), option.WithMaxRetries(0))
}

// TestHeldQuotaWaits is the second seed's experiment through the
// official openai SDK: agent A (quota 1,000 tokens) sends 20 concurrent
// requests with max_tokens 500, agent B (quota 200) sends 4. A request
// the quota covers only once the key's calls in flight settle waits for
// them and is sent with its output capped to what is then left; only
// once the quota is spent are requests refused, with 403 and nothing
// sent. Each agent uses at least 90% of its quota and never more.
func TestHeldQuotaWaits(t *testing.T) {
	t.Parallel()
	r := newRig(t, 100*time.Millisecond)
	type agent struct {
		name     string
		quota    int64
		requests int
		key      gateway.Key
		secret   string
		answered int
		refused  int
		usage    int64
	}
	agents := []*agent{{name: "A", quota: 1000, requests: 20}, {name: "B", quota: 200, requests: 4}}
	for _, a := range agents {
		a.secret, a.key = r.key(t, gateway.Spec{Name: a.name, Tier: "paid", QuotaTokens: a.quota})
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, a := range agents {
		client := r.sdk(a.secret)
		for i := range a.requests {
			wg.Go(func() {
				resp, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
					Model: r.model, MaxTokens: openai.Int(500),
					Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(fmt.Sprintf("Agent %s, task %d: summarise the design document.", a.name, i))},
				})
				mu.Lock()
				defer mu.Unlock()
				var ae *openai.Error
				switch {
				case err == nil:
					a.answered++
					a.usage += resp.Usage.TotalTokens
				case errors.As(err, &ae) && ae.StatusCode == http.StatusForbidden:
					a.refused++
				default:
					t.Errorf("agent %s: %v", a.name, err)
				}
			})
		}
	}
	wg.Wait()
	answered := 0
	for _, a := range agents {
		used := r.used(t, a.key)
		t.Logf("agent %s: %d answered, %d refused (403); %d of %d tokens used", a.name, a.answered, a.refused, used, a.quota)
		if used != a.usage {
			t.Errorf("agent %s: quota used %d, the answers' usage %d", a.name, used, a.usage)
		}
		if used > a.quota || used*10 < a.quota*9 {
			t.Errorf("agent %s used %d of its %d tokens: want at least 90%% and never more", a.name, used, a.quota)
		}
		answered += a.answered
	}
	if n := r.fake.Stats()[r.model].Requests; n != int64(answered) {
		t.Errorf("%d upstream calls for %d answers: refusals must send nothing", n, answered)
	}
	if got := r.metric(t, "prq_gateway_refusals_total"); int(got) != agents[0].refused+agents[1].refused {
		t.Errorf("%v refusals counted, %d seen", got, agents[0].refused+agents[1].refused)
	}
}

// TestHeldQuotaDeadline: a request whose key's quota stays held past its
// deadline gets 429 with Retry-After (the SDKs retry it), not 403, and
// nothing is sent or reserved for it; once the call in flight settles,
// the key's next request is answered.
func TestHeldQuotaDeadline(t *testing.T) {
	t.Parallel()
	r := newRig(t, 2*time.Second)
	secret, k := r.key(t, gateway.Spec{Name: "busy", Tier: "paid", QuotaTokens: 200})
	body := fmt.Sprintf(`{"model":%q,"max_tokens":500,"messages":[{"role":"user","content":"hello"}]}`, r.model)
	first := make(chan int, 1)
	go func() {
		res, err := r.post(context.Background(), secret, body, nil)
		if err != nil {
			first <- 0
			return
		}
		res.Body.Close()
		first <- res.StatusCode
	}()
	eventually(t, "the first call holds the whole quota", func() bool { return r.used(t, k) == 200 })
	res, err := r.post(context.Background(), secret, body, map[string]string{gateway.MaxWaitHeader: "0.3"})
	if err != nil {
		t.Fatal(err)
	}
	var e apiErr
	jsonDecode(res, &e)
	res.Body.Close()
	if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") == "" || e.Error.Code == nil || *e.Error.Code != "rate_limit_exceeded" {
		t.Fatalf("%d Retry-After %q %+v, want 429 with Retry-After", res.StatusCode, res.Header.Get("Retry-After"), e)
	}
	if n := r.fake.Stats()[r.model].Requests; n != 1 {
		t.Fatalf("%d upstream calls, want only the first", n)
	}
	if code := <-first; code != http.StatusOK {
		t.Fatalf("the first request: %d", code)
	}
	res, err = r.post(context.Background(), secret, body, nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("after the first settled: %d", res.StatusCode)
	}
	if got := r.used(t, k); got > 200 {
		t.Fatalf("quota used %d of 200", got)
	}
	if got := r.metric(t, "prq_gateway_refusals_total"); got != 1 {
		t.Fatalf("%v refusals counted, want the one 429", got)
	}
}
