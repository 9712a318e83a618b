package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/internal/gateway"
	"github.com/prq-dev/prq/llm"
	"github.com/prq-dev/prq/ratelimit"
)

// The dollar quotas' tests price the model at $1 per million input
// tokens and $4 per million output tokens: 1,000 and 4,000 nano-dollars
// a token, so that a reply's exact cost is whole nano-dollars.
const nanoIn, nanoOut = 1000, 4000

var testPrices = llm.Prices{Input: 1, Output: 4}

// withPrices prices every model of a rig.
func withPrices(p llm.Prices) func(*gateway.Config) {
	return func(c *gateway.Config) {
		for name, m := range c.Models {
			m.Prices = p
			c.Models[name] = m
		}
	}
}

// usedDollars is a key's dollar quota counter, in nano-dollars.
func usedDollars(t *testing.T, rdb *redis.Client, k gateway.Key) int64 {
	t.Helper()
	q, _ := ratelimit.NewQuota(rdb, ratelimit.QuotaConfig{Period: k.QuotaPeriod})
	u, err := q.UsedDollars(context.Background(), "key:"+k.ID, "", ratelimit.Nano(k.QuotaDollars))
	if err != nil {
		t.Fatal(err)
	}
	return u.Used
}

// nanoHeader reads a header in dollars as nano-dollars.
func nanoHeader(t *testing.T, h http.Header, name string) int64 {
	t.Helper()
	f, err := strconv.ParseFloat(h.Get(name), 64)
	if err != nil {
		t.Fatalf("%s: %q", name, h.Get(name))
	}
	return int64(math.Round(f * ratelimit.NanoDollars))
}

// streamChat sends a streamed chat completion that asks for the usage
// chunk; it returns the status, the headers (the quotas as reserved)
// and the stream's usage.
func (r *rig) streamChat(t *testing.T, secret string, maxTokens int, content string) (int, http.Header, int64, int64) {
	t.Helper()
	body := fmt.Sprintf(`{"model":%q,"max_tokens":%d,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":%q}]}`, r.model, maxTokens, content)
	res, err := r.post(context.Background(), secret, body, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var prompt, completion int64
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: "))
		if !ok || bytes.Equal(data, []byte("[DONE]")) {
			continue
		}
		var chunk struct {
			Usage *struct {
				PromptTokens     int64 `json:"prompt_tokens"`
				CompletionTokens int64 `json:"completion_tokens"`
			} `json:"usage"`
		}
		if json.Unmarshal(data, &chunk) == nil && chunk.Usage != nil {
			prompt, completion = chunk.Usage.PromptTokens, chunk.Usage.CompletionTokens
		}
	}
	return res.StatusCode, res.Header, prompt, completion
}

// TestDollarQuotaNeverOvershoots is the gateway's dollar quota under a
// burst, through the official openai SDK: 50 concurrent requests of one
// key with a quota of $0.01 ask for 300 output tokens each, half of
// them streamed, and the fake answers at full length (every call takes
// its whole cap, the worst case). Each is reserved its input and its
// output cap at the model's prices before it is sent, the cap cut to
// what is left; a request the quota covers only once the calls in
// flight settle waits for them; once the quota cannot pay for the input
// and the minimum output, requests are refused with 403 and nothing is
// sent. The answered calls' exact costs never add up past the quota, the
// quota's counter is their sum to the nano-dollar, and so is the key's
// spend this month.
func TestDollarQuotaNeverOvershoots(t *testing.T) {
	t.Parallel()
	r := newRigWith(t, rigOpts{latency: 50 * time.Millisecond, verbose: true, cfg: withPrices(testPrices)})
	const (
		quota     = 0.01 // 10,000,000 nano-dollars
		requests  = 50
		maxTokens = 300
	)
	limit := ratelimit.Nano(quota)
	secret, k := r.key(t, gateway.Spec{Name: "burst", Tier: "paid", QuotaDollars: quota})
	client := r.sdk(secret)
	var (
		mu                         sync.Mutex
		wg                         sync.WaitGroup
		answered, capped, refused  int
		spent                      int64 // nano-dollars: the replies' exact costs
		dollars                    float64
		maxPrompt, streamsAnswered int64
	)
	for i := range requests {
		wg.Go(func() {
			p := openai.ChatCompletionNewParams{Model: r.model, MaxTokens: openai.Int(maxTokens),
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(fmt.Sprintf("Agent task %d: summarise the design document.", i))}}
			var u openai.CompletionUsage
			var err error
			stream := i%2 == 1
			if stream {
				p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
				st := client.Chat.Completions.NewStreaming(context.Background(), p)
				for st.Next() {
					if c := st.Current(); c.Usage.TotalTokens > 0 {
						u = c.Usage
					}
				}
				err = st.Err()
			} else {
				var resp *openai.ChatCompletion
				if resp, err = client.Chat.Completions.New(context.Background(), p); err == nil {
					u = resp.Usage
				}
			}
			mu.Lock()
			defer mu.Unlock()
			var ae *openai.Error
			switch {
			case err == nil && u.CompletionTokens > 0:
				answered++
				if stream {
					streamsAnswered++
				}
				spent += u.PromptTokens*nanoIn + u.CompletionTokens*nanoOut
				dollars += testPrices.Cost(llm.Response{PromptTokens: u.PromptTokens, OutputTokens: u.CompletionTokens})
				maxPrompt = max(maxPrompt, u.PromptTokens)
				if u.CompletionTokens < maxTokens {
					capped++
				}
			case err == nil:
				t.Errorf("request %d answered without usage", i)
			case errors.As(err, &ae) && ae.StatusCode == http.StatusForbidden:
				if !strings.Contains(ae.Message, "dollar quota") {
					t.Errorf("request %d: 403 %q, want the dollar quota named", i, ae.Message)
				}
				refused++
			default:
				t.Errorf("request %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	used := usedDollars(t, r.rdb, k)
	t.Logf("%d concurrent requests, quota $%v: spent $%s of it (%d nano-dollars); %d answered (%d streamed, %d capped), %d refused (403)",
		requests, quota, strconv.FormatFloat(float64(spent)/ratelimit.NanoDollars, 'f', -1, 64), spent, answered, streamsAnswered, capped, refused)
	if spent > limit {
		t.Fatalf("the answered calls cost %d nano-dollars of a %d quota: overshoot", spent, limit)
	}
	if used != spent {
		t.Fatalf("the quota's counter holds %d nano-dollars, the replies' exact costs %d", used, spent)
	}
	if answered+refused != requests || refused == 0 || capped == 0 {
		t.Fatalf("%d answered (%d capped), %d refused: the quota was not exhausted, the test proved nothing", answered, capped, refused)
	}
	// spent to within what the smallest request needs (its input and
	// the minimum output): nothing was refused that the quota could pay
	if left := limit - spent; left >= (maxPrompt+16)*nanoIn+16*nanoOut {
		t.Fatalf("%d nano-dollars left unspent: a request the quota could pay for was refused", left)
	}
	if n := r.fake.Stats()[r.model].Requests; n != int64(answered) {
		t.Fatalf("%d upstream calls for %d answers: refused requests must send nothing", n, answered)
	}
	eventually(t, "the key's spend this month is the replies' cost", func() bool {
		s, err := r.keys.Spend(context.Background(), time.Now())
		return err == nil && math.Abs(s[k.ID]-dollars) < 1e-12
	})
}

// TestDollarQuotaCapsOutput: a key's dollar quota reserves the input at
// the model's dearest input price (a cache write costs more here) and
// cuts the output cap to what that leaves; the call is settled at its
// exact cost (no cache write: the input at the input price, the rest
// given back). What is then left cannot pay for an input and the
// minimum output: the next request is refused with 403 naming the
// dollar quota, nothing sent, nothing spent. GET /api/keys shows the
// quota and its use.
func TestDollarQuotaCapsOutput(t *testing.T) {
	t.Parallel()
	const nanoWrite = 3000
	r := newRigWith(t, rigOpts{verbose: true, cfg: withPrices(llm.Prices{Input: 1, CacheWrite: 3, Output: 4})})
	const quota = 0.001
	limit := ratelimit.Nano(quota)
	secret, k := r.key(t, gateway.Spec{Name: "capped", Tier: "paid", QuotaDollars: quota})
	code, h, prompt, completion := r.streamChat(t, secret, 1000, "Summarise the design document.")
	if code != http.StatusOK || completion == 0 {
		t.Fatalf("%d, %d output tokens", code, completion)
	}
	// the stream's headers show the quota as reserved; the fake answered
	// the whole cap it was sent
	reserved := limit - nanoHeader(t, h, "x-prq-quota-dollars-remaining")
	input := reserved - completion*nanoOut
	if completion >= 1000 || input%nanoWrite != 0 || input/nanoWrite < prompt || limit-reserved >= nanoOut {
		t.Fatalf("reserved %d nano-dollars for a cap of %d output tokens of the 1000 asked (%d prompt tokens): want the input at the dearest input price (%d a token) and the cap cut to what is left",
			reserved, completion, prompt, nanoWrite)
	}
	used := usedDollars(t, r.rdb, k)
	if want := prompt*nanoIn + completion*nanoOut; used != want {
		t.Fatalf("the quota counts %d nano-dollars, the call cost %d", used, want)
	}
	calls := r.fake.Stats()[r.model].Requests
	res, err := r.post(context.Background(), secret, `{"model":"`+r.model+`","max_tokens":1000,"messages":[{"role":"user","content":"Summarise it again."}]}`, nil)
	if err != nil {
		t.Fatal(err)
	}
	var e apiErr
	jsonDecode(res, &e)
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden || e.Error.Type != "insufficient_quota" || !strings.Contains(e.Error.Message, "dollar quota") ||
		nanoHeader(t, res.Header, "x-prq-quota-dollars-remaining") != limit-used {
		t.Fatalf("%d %+v (remaining %q): want 403 insufficient_quota naming the dollar quota, with %d nano-dollars left", res.StatusCode, e, res.Header.Get("x-prq-quota-dollars-remaining"), limit-used)
	}
	if n := r.fake.Stats()[r.model].Requests; n != calls {
		t.Fatalf("%d upstream calls for the refused request", n-calls)
	}
	if got := usedDollars(t, r.rdb, k); got != used {
		t.Fatalf("the refused request changed the quota: %d, was %d", got, used)
	}
	srv := httptest.NewServer(gateway.KeysAPI(r.keys, []string{r.model}))
	defer srv.Close()
	lres, err := http.Get(srv.URL + "/api/keys")
	if err != nil {
		t.Fatal(err)
	}
	var listed []struct {
		ID           string  `json:"id"`
		QuotaDollars float64 `json:"quota_dollars"`
		UsedDollars  float64 `json:"used_dollars"`
	}
	jsonDecode(lres, &listed)
	lres.Body.Close()
	found := false
	for _, l := range listed {
		if l.ID == k.ID {
			found = l.QuotaDollars == quota && ratelimit.Nano(l.UsedDollars) == used
		}
	}
	if !found {
		t.Fatalf("GET /api/keys %+v: want key %s with quota_dollars %v and used_dollars of %d nano-dollars", listed, k.ID, quota, used)
	}
}

// TestDollarAndTokenQuotas: a key with both quotas is capped by the
// tighter one, and both reservations hold the same call (the counted
// input and the cap sent): the other quota holds no more output than
// the call may use. Each is settled with the call's usage.
func TestDollarAndTokenQuotas(t *testing.T) {
	t.Parallel()
	r := newRigWith(t, rigOpts{verbose: true, cfg: withPrices(testPrices)})
	for _, tc := range []struct {
		name    string
		tokens  int64
		dollars float64
	}{
		{"tokens tighter", 200, 1},
		{"dollars tighter", 100000, 0.001},
	} {
		t.Run(tc.name, func(t *testing.T) {
			secret, k := r.key(t, gateway.Spec{Name: tc.name, Tier: "paid", QuotaTokens: tc.tokens, QuotaDollars: tc.dollars})
			code, h, prompt, completion := r.streamChat(t, secret, 1000, "Summarise the design document.")
			if code != http.StatusOK || completion == 0 || completion >= 1000 {
				t.Fatalf("%d, %d output tokens: want the cap of 1000 cut", code, completion)
			}
			limit := ratelimit.Nano(tc.dollars)
			leftTokens, err := strconv.ParseInt(h.Get("x-prq-quota-remaining"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			leftNano := nanoHeader(t, h, "x-prq-quota-dollars-remaining")
			input := tc.tokens - leftTokens - completion // the token reservation's input: the gateway's count
			if input < prompt || limit-leftNano != input*nanoIn+completion*nanoOut {
				t.Fatalf("reserved %d tokens and %d nano-dollars for %d output tokens: want both to hold the counted input and the cap sent",
					tc.tokens-leftTokens, limit-leftNano, completion)
			}
			tokensBound, dollarsBound := leftTokens == 0, leftNano < nanoOut
			if tokensBound == dollarsBound || tokensBound != (tc.name == "tokens tighter") {
				t.Fatalf("left %d tokens and %d nano-dollars: want the %s quota spent to the cap and the other not", leftTokens, leftNano, strings.Fields(tc.name)[0])
			}
			if u := r.used(t, k); u != prompt+completion {
				t.Fatalf("the token quota counts %d, the usage is %d", u, prompt+completion)
			}
			if u := usedDollars(t, r.rdb, k); u != prompt*nanoIn+completion*nanoOut {
				t.Fatalf("the dollar quota counts %d, the call cost %d", u, prompt*nanoIn+completion*nanoOut)
			}
		})
	}
}

// TestDollarQuotaUnpricedModel: a key with a dollar quota may not use a
// model without prices (its calls could not be counted in dollars): 403
// model_not_priced in every API, nothing sent, and /v1/models leaves it
// out; a key with a token quota uses it.
func TestDollarQuotaUnpricedModel(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	secret, _ := r.key(t, gateway.Spec{Name: "dollars", Tier: "paid", QuotaDollars: 1})
	ctx := context.Background()
	for path, body := range map[string]string{
		"/v1/chat/completions": `{"model":"` + r.model + `","max_tokens":20,"messages":[{"role":"user","content":"hi"}]}`,
		"/v1/responses":        `{"model":"` + r.model + `","max_output_tokens":20,"input":"hi"}`,
		"/v1/embeddings":       `{"model":"` + r.model + `","input":"hi"}`,
		"/v1/messages":         `{"model":"` + r.model + `","max_tokens":20,"messages":[{"role":"user","content":"hi"}]}`,
	} {
		res, err := r.postTo(ctx, path, secret, body)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusForbidden || !strings.Contains(string(b), "model_not_priced") {
			t.Errorf("%s: %d %s, want 403 model_not_priced", path, res.StatusCode, b)
		}
	}
	if n := r.fake.Stats()[r.model].Requests; n != 0 {
		t.Fatalf("%d upstream calls under a quota that cannot count them", n)
	}
	c := r.sdk(secret)
	list, err := c.Models.List(ctx)
	if err != nil || len(list.Data) != 0 {
		t.Fatalf("/v1/models for the dollar key: %+v %v, want none", list, err)
	}
	tsecret, _ := r.key(t, gateway.Spec{Name: "tokens", Tier: "paid", QuotaTokens: 1000})
	res, err := r.post(ctx, tsecret, `{"model":"`+r.model+`","max_tokens":20,"messages":[{"role":"user","content":"hi"}]}`, nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("a token quota on the unpriced model: %d", res.StatusCode)
	}
}

// TestDollarQuotaHeld: a request whose key's dollar quota is held by a
// call in flight waits for it, and past its deadline gets 429 with
// Retry-After (the SDKs retry it), not 403; nothing is sent for it. Once
// the call settles (it used less than its cap: the rest is given back),
// the key's next request is answered.
func TestDollarQuotaHeld(t *testing.T) {
	t.Parallel()
	r := newRigWith(t, rigOpts{latency: 2 * time.Second, cfg: withPrices(testPrices)})
	const quota = 0.001
	limit := ratelimit.Nano(quota)
	secret, k := r.key(t, gateway.Spec{Name: "busy", Tier: "paid", QuotaDollars: quota})
	// 500 output tokens cost $0.002: the first call's cap is cut to
	// what the quota holds, and it holds the whole quota
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
	eventually(t, "the first call holds the whole quota", func() bool { return usedDollars(t, r.rdb, k) > limit-nanoOut })
	res, err := r.post(context.Background(), secret, body, map[string]string{gateway.MaxWaitHeader: "0.3"})
	if err != nil {
		t.Fatal(err)
	}
	var e apiErr
	jsonDecode(res, &e)
	res.Body.Close()
	if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") == "" || e.Error.Code == nil || *e.Error.Code != "rate_limit_exceeded" || !strings.Contains(e.Error.Message, "$") {
		t.Fatalf("%d Retry-After %q %+v, want 429 with Retry-After saying what is held in dollars", res.StatusCode, res.Header.Get("Retry-After"), e)
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
	if got := usedDollars(t, r.rdb, k); got > limit {
		t.Fatalf("quota used %d nano-dollars of %d", got, limit)
	}
	if got := r.metric(t, "prq_gateway_refusals_total"); got != 1 {
		t.Fatalf("%v refusals counted, want the one 429", got)
	}
}

// TestDollarQuotaEveryAPI: the same dollar quota through Responses
// (whole and streamed), Messages (the official Anthropic SDK, whole and
// streamed, translated for the OpenAI-kind model) and embeddings (input
// only: no output price needed), each a burst of 12 concurrent requests
// on a key of its own: the answered calls' exact costs never pass the
// quota, the counter is their sum, and refused requests send nothing.
func TestDollarQuotaEveryAPI(t *testing.T) {
	t.Parallel()
	r := newRigWith(t, rigOpts{latency: 20 * time.Millisecond, verbose: true, cfg: withPrices(testPrices)})
	// call makes request i of an API and returns its usage (input and
	// output tokens), or whether it was refused with 403
	type call func(ctx context.Context, secret string, i int) (in, out int64, refused bool, err error)
	apis := []struct {
		name  string
		quota float64
		call  call
	}{
		{"responses", 0.003, func(ctx context.Context, secret string, i int) (int64, int64, bool, error) {
			c := r.sdk(secret)
			p := responses.ResponseNewParams{Model: r.model, MaxOutputTokens: openai.Int(200),
				Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(fmt.Sprintf("Task %d: summarise the change.", i))}}
			var u responses.ResponseUsage
			var err error
			if i%2 == 1 {
				st := c.Responses.NewStreaming(ctx, p)
				for st.Next() {
					if ev := st.Current(); ev.Type == "response.completed" || ev.Type == "response.incomplete" {
						u = ev.Response.Usage
					}
				}
				err = st.Err()
			} else {
				var resp *responses.Response
				if resp, err = c.Responses.New(ctx, p); err == nil {
					u = resp.Usage
				}
			}
			var ae *openai.Error
			if errors.As(err, &ae) && ae.StatusCode == http.StatusForbidden {
				return 0, 0, true, nil
			}
			return u.InputTokens, u.OutputTokens, false, err
		}},
		{"messages", 0.003, func(ctx context.Context, secret string, i int) (int64, int64, bool, error) {
			c := anthropic.NewClient(aoption.WithoutEnvironmentDefaults(), aoption.WithBaseURL(r.url+"/"), aoption.WithAPIKey(secret), aoption.WithMaxRetries(0))
			p := anthropic.MessageNewParams{Model: anthropic.Model(r.model), MaxTokens: 200,
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(fmt.Sprintf("Task %d: summarise the change.", i)))}}
			var u anthropic.Usage
			var err error
			if i%2 == 1 {
				st := c.Messages.NewStreaming(ctx, p)
				var acc anthropic.Message
				for st.Next() {
					if aerr := acc.Accumulate(st.Current()); aerr != nil {
						return 0, 0, false, aerr
					}
				}
				err, u = st.Err(), acc.Usage
			} else {
				var msg *anthropic.Message
				if msg, err = c.Messages.New(ctx, p); err == nil {
					u = msg.Usage
				}
			}
			var ae *anthropic.Error
			if errors.As(err, &ae) && ae.StatusCode == http.StatusForbidden {
				return 0, 0, true, nil
			}
			return u.InputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens, u.OutputTokens, false, err
		}},
		{"embeddings", 0.0001, func(ctx context.Context, secret string, i int) (int64, int64, bool, error) {
			tokens := make([]int64, 30)
			for j := range tokens {
				tokens[j] = int64(100 + i)
			}
			c := r.sdk(secret)
			resp, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: r.model, Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfTokenArrays: [][]int64{tokens}}})
			var ae *openai.Error
			if errors.As(err, &ae) && ae.StatusCode == http.StatusForbidden {
				return 0, 0, true, nil
			}
			if err != nil {
				return 0, 0, false, err
			}
			return resp.Usage.PromptTokens, 0, false, nil
		}},
	}
	for _, api := range apis {
		// one API at a time: the fake's count of calls is the model's
		t.Run(api.name, func(t *testing.T) {
			secret, k := r.key(t, gateway.Spec{Name: api.name, Tier: "paid", QuotaDollars: api.quota})
			limit := ratelimit.Nano(api.quota)
			before := r.fake.Stats()[r.model].Requests
			var mu sync.Mutex
			var wg sync.WaitGroup
			var spent int64
			answered, refused := 0, 0
			for i := range 12 {
				wg.Go(func() {
					in, out, ref, err := api.call(context.Background(), secret, i)
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err != nil:
						t.Errorf("request %d: %v", i, err)
					case ref:
						refused++
					case in == 0:
						t.Errorf("request %d answered without usage", i)
					default:
						answered++
						spent += in*nanoIn + out*nanoOut
					}
				})
			}
			wg.Wait()
			used := usedDollars(t, r.rdb, k)
			t.Logf("%s: %d answered, %d refused; spent %d of %d nano-dollars", api.name, answered, refused, spent, limit)
			if spent > limit || used != spent {
				t.Fatalf("spent %d nano-dollars of %d, the counter %d: want never over, the counter the exact costs", spent, limit, used)
			}
			if refused == 0 || answered == 0 {
				t.Fatalf("%d answered, %d refused: the quota was not exhausted, the test proved nothing", answered, refused)
			}
			if n := r.fake.Stats()[r.model].Requests - before; n != int64(answered) {
				t.Fatalf("%d upstream calls for %d answers", n, answered)
			}
		})
	}
}
