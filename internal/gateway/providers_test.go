package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/internal/gateway"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/llmcall"
	"github.com/prq-dev/prq/ratelimit"
)

// The provider keys of the three-provider rig: none may reach a reply or
// a log line.
const (
	openaiKey    = "sk-openai-secret-1"
	azureKey     = "azure-secret-2"
	anthropicKey = "sk-ant-secret-3"
	wrongKey     = "sk-ant-wrong-4" // a provider whose key the fake refuses
)

var providerKeys = []string{openaiKey, azureKey, anthropicKey, wrongKey}

// seen is one request a fake received.
type seen struct {
	Method, Path, Query string
	Header              http.Header
	Body                []byte
}

// recorder records what reaches a fake.
type recorder struct {
	mu   sync.Mutex
	reqs []seen
	next http.Handler
}

func (rc *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	rc.mu.Lock()
	rc.reqs = append(rc.reqs, seen{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Header: r.Header.Clone(), Body: body})
	rc.mu.Unlock()
	rc.next.ServeHTTP(w, r)
}

func (rc *recorder) all() []seen {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]seen(nil), rc.reqs...)
}

// syncBuffer is a log sink written by many goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// multiRig is a gateway serving a model of each provider kind, each on
// its own fake (the OpenAI mode, the Azure mode, the Anthropic mode),
// plus an Anthropic model whose provider key is refused.
type multiRig struct {
	url                        string
	openai, azure, claude, bad string // the models
	deployment                 string // the Azure deployment of azure
	oaFake, azFake, antFake    *fakeopenai.Server
	oaSeen, azSeen, antSeen    *recorder
	rdb                        *redis.Client
	keys                       *gateway.Keys
	sched                      *admission.Scheduler
	logs                       *syncBuffer
}

const azureVersion = "2024-10-21"

func newMultiRig(t *testing.T) *multiRig {
	t.Helper()
	rdb := redistest.Shared(t).Client(t)
	n := time.Now().UnixNano()
	r := &multiRig{openai: fmt.Sprintf("gpt-4o-mini-%d", n), azure: fmt.Sprintf("gpt-4o-azure-%d", n), deployment: fmt.Sprintf("dep-%d", n),
		claude: fmt.Sprintf("claude-haiku-%d", n), bad: fmt.Sprintf("claude-badkey-%d", n), rdb: rdb, logs: &syncBuffer{}}
	start := func(cfg fakeopenai.Config) (*fakeopenai.Server, *recorder, string) {
		cfg.Record = true
		f := fakeopenai.New(cfg)
		rc := &recorder{next: f}
		srv := httptest.NewServer(rc)
		t.Cleanup(srv.Close)
		return f, rc, srv.URL
	}
	var oaURL, azURL, antURL string
	r.oaFake, r.oaSeen, oaURL = start(fakeopenai.Config{Models: []fakeopenai.Model{{Name: r.openai, RPM: 1000, TPM: 100000}}, Keys: []string{openaiKey}})
	r.azFake, r.azSeen, azURL = start(fakeopenai.Config{Models: []fakeopenai.Model{{Name: r.azure, RPM: 1000, TPM: 100000}}, Keys: []string{azureKey},
		Deployments: map[string]string{r.deployment: r.azure}})
	r.antFake, r.antSeen, antURL = start(fakeopenai.Config{Models: []fakeopenai.Model{
		{Name: r.claude, RPM: 1000, TPM: 100000, ITPM: 50000, OTPM: 20000},
		{Name: r.bad, RPM: 1000, TPM: 100000, ITPM: 50000, OTPM: 20000}}, Keys: []string{anthropicKey}})

	buckets := map[string]*ratelimit.Bucket{}
	for model, key := range map[string]string{r.openai: openaiKey, r.azure: azureKey, r.claude: anthropicKey, r.bad: wrongKey} {
		l := ratelimit.Limits{RequestsPerPeriod: 1000, TokensPerPeriod: 100000}
		if strings.HasPrefix(model, "claude") {
			l.InputTokensPerPeriod, l.OutputTokensPerPeriod = 50000, 20000
		}
		b, err := ratelimit.NewKeyedBucket(rdb, model, []string{key}, l)
		if err != nil {
			t.Fatal(err)
		}
		buckets[model] = b
	}
	log := slog.New(slog.NewTextHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	sched, err := admission.New(rdb, buckets, nil, nil, admission.Config{}, log)
	if err != nil {
		t.Fatal(err)
	}
	r.sched = sched
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
	oa := &gateway.Provider{Kind: gateway.KindOpenAI, BaseURL: oaURL + "/v1", Keys: []string{openaiKey}}
	az := &gateway.Provider{Kind: gateway.KindAzure, BaseURL: azURL, Keys: []string{azureKey}, APIVersion: azureVersion}
	ant := &gateway.Provider{Kind: gateway.KindAnthropic, BaseURL: antURL, Keys: []string{anthropicKey}}
	wrong := &gateway.Provider{Kind: gateway.KindAnthropic, BaseURL: antURL, Keys: []string{wrongKey}}
	r.keys = gateway.NewKeys(rdb)
	g, err := gateway.New(gateway.Config{Models: map[string]gateway.Model{
		r.openai: {Provider: oa},
		r.azure:  {Provider: az, Model: llmcall.Model{Deployment: r.deployment}},
		r.claude: {Provider: ant, Model: llmcall.Model{ContextTokens: 200000}},
		r.bad:    {Provider: wrong},
	}, Log: log}, r.keys, sched, waiter, rdb, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(func() { srv.Close(); waiter.Close(); cancel(); <-done })
	r.url = srv.URL
	return r
}

func (r *multiRig) key(t *testing.T, s gateway.Spec) (string, gateway.Key) {
	t.Helper()
	secret, k, err := r.keys.Create(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	return secret, k
}

// post sends a chat completion and returns the status, headers and body.
func (r *multiRig) post(t *testing.T, secret, body string) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, r.url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+secret)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, res.Header, b
}

func (r *multiRig) used(t *testing.T, k gateway.Key) int64 {
	t.Helper()
	q, _ := ratelimit.NewQuota(r.rdb, ratelimit.QuotaConfig{Period: k.QuotaPeriod})
	u, err := q.Used(context.Background(), "key:"+k.ID, "", k.QuotaTokens)
	if err != nil {
		t.Fatal(err)
	}
	return u.Used
}

// noKeys fails when a provider key appears in s.
func noKeys(t *testing.T, where, s string) {
	t.Helper()
	for _, k := range providerKeys {
		if strings.Contains(s, k) {
			t.Fatalf("a provider key reached %s: %.300s", where, s)
		}
	}
}

type completionReply struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index   int `json:"index"`
		Message struct {
			Role    string  `json:"role"`
			Content *string `json:"content"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
		TotalTokens      int64 `json:"total_tokens"`
	} `json:"usage"`
}

// checkCompletion reads a non-streaming reply and checks its OpenAI
// shape; it returns the content and the usage's total.
func checkCompletion(t *testing.T, model string, body []byte) (string, int64) {
	t.Helper()
	var c completionReply
	if err := json.Unmarshal(body, &c); err != nil {
		t.Fatalf("%s: %v: %.300s", model, err, body)
	}
	if c.ID == "" || c.Object != "chat.completion" || c.Created == 0 || c.Model != model || len(c.Choices) != 1 || c.Usage == nil {
		t.Fatalf("%s: not a chat completion of the model: %.500s", model, body)
	}
	ch := c.Choices[0]
	if ch.Message.Role != "assistant" || ch.Message.Content == nil || *ch.Message.Content == "" || (ch.FinishReason != "stop" && ch.FinishReason != "length") {
		t.Fatalf("%s: choice %+v", model, ch)
	}
	u := c.Usage
	if u.PromptTokens <= 0 || u.CompletionTokens <= 0 || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
		t.Fatalf("%s: usage %+v", model, *u)
	}
	return *ch.Message.Content, u.TotalTokens
}

// checkStream reads a stream's events and checks them: chunks of the
// model, the assistant's content, one finish reason, the usage chunk
// exactly when asked, and [DONE] last. It returns the content and the
// usage's total (0 without the usage chunk).
func checkStream(t *testing.T, model string, body []byte, withUsage bool) (string, int64) {
	t.Helper()
	var content strings.Builder
	var total int64
	finishes, usages, done := 0, 0, false
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("%s: not an event line: %q", model, line)
		}
		if done {
			t.Fatalf("%s: an event after [DONE]: %q", model, line)
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		var c struct {
			Object  string `json:"object"`
			Model   string `json:"model"`
			Choices []struct {
				Delta struct {
					Role    string `json:"role"`
					Content string `json:"content"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage *struct {
				PromptTokens     int64 `json:"prompt_tokens"`
				CompletionTokens int64 `json:"completion_tokens"`
				TotalTokens      int64 `json:"total_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil || c.Object != "chat.completion.chunk" || c.Model != model {
			t.Fatalf("%s: not a chunk of the model (%v): %s", model, err, data)
		}
		for _, ch := range c.Choices {
			if ch.Delta.Role != "" && ch.Delta.Role != "assistant" {
				t.Fatalf("%s: role %q", model, ch.Delta.Role)
			}
			content.WriteString(ch.Delta.Content)
			if ch.FinishReason != nil {
				finishes++
			}
		}
		if c.Usage != nil {
			usages++
			u := c.Usage
			if len(c.Choices) != 0 || u.PromptTokens <= 0 || u.CompletionTokens <= 0 || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
				t.Fatalf("%s: usage chunk %s", model, data)
			}
			total = u.TotalTokens
		}
	}
	if !done || finishes != 1 || content.Len() == 0 {
		t.Fatalf("%s: stream done %v, %d finish reasons, content %q:\n%s", model, done, finishes, content.String(), body)
	}
	if want := map[bool]int{true: 1, false: 0}[withUsage]; usages != want {
		t.Fatalf("%s: %d usage chunks, want %d (include_usage %v):\n%s", model, usages, want, withUsage, body)
	}
	return content.String(), total
}

// TestRoutesByModel: one gateway serves a model of each provider kind;
// /v1/models lists them all; non-streaming and streaming requests to
// each succeed with OpenAI's shapes and the provider's usage (the key's
// quota is settled with it); each fake saw exactly its requests, spoken
// its way (the OpenAI path and bearer key; Azure's deployment path,
// api-version and api-key; Anthropic's Messages path, x-api-key and
// anthropic-version, the body translated, streams streamed and their
// events translated), and answered no 429; no
// provider key reached a reply or the logs.
func TestRoutesByModel(t *testing.T) {
	t.Parallel()
	r := newMultiRig(t)
	secret, k := r.key(t, gateway.Spec{Name: "router", Tier: "paid", QuotaTokens: 1000000})

	req, _ := http.NewRequest(http.MethodGet, r.url+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer "+secret)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Data []struct{ ID string } `json:"data"`
	}
	err = json.NewDecoder(res.Body).Decode(&list)
	res.Body.Close()
	listed := map[string]bool{}
	for _, m := range list.Data {
		listed[m.ID] = true
	}
	if err != nil || len(list.Data) != 4 || !listed[r.openai] || !listed[r.azure] || !listed[r.claude] || !listed[r.bad] {
		t.Fatalf("/v1/models: %+v (%v), want the four models", list, err)
	}

	var total int64 // the usage the replies reported
	fakes := map[string]*fakeopenai.Server{r.openai: r.oaFake, r.azure: r.azFake, r.claude: r.antFake}
	for _, model := range []string{r.openai, r.azure, r.claude} {
		before := fakes[model].Stats()[model].CompletionTokens
		body := fmt.Sprintf(`{"model":%q,"max_tokens":60,"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Say hello to %s."}]}`, model, model)
		code, h, b := r.post(t, secret, body)
		noKeys(t, "a reply", string(b)+fmt.Sprint(h))
		if code != http.StatusOK {
			t.Fatalf("%s: %d %s", model, code, b)
		}
		_, used := checkCompletion(t, model, b)
		total += used
		var c completionReply
		json.Unmarshal(b, &c)
		if gen := fakes[model].Stats()[model].CompletionTokens - before; c.Usage.CompletionTokens != gen {
			t.Fatalf("%s: completion_tokens %d, the provider generated %d", model, c.Usage.CompletionTokens, gen)
		}
		if h.Get("x-prq-key") != k.ID {
			t.Fatalf("%s: x-prq-key %q", model, h.Get("x-prq-key"))
		}
		for name := range h {
			if n := strings.ToLower(name); strings.HasPrefix(n, "anthropic-") || strings.HasPrefix(n, "openai-") {
				t.Errorf("%s: provider header %s forwarded", model, name)
			}
		}
		for _, withUsage := range []bool{true, false} {
			opts := ""
			if withUsage {
				opts = `"stream_options":{"include_usage":true},`
			}
			code, h, b := r.post(t, secret, fmt.Sprintf(`{"model":%q,"stream":true,%s"max_tokens":60,"messages":[{"role":"user","content":"Stream a hello."}]}`, model, opts))
			noKeys(t, "a reply", string(b)+fmt.Sprint(h))
			if code != http.StatusOK || !strings.HasPrefix(h.Get("Content-Type"), "text/event-stream") {
				t.Fatalf("%s stream: %d %q %s", model, code, h.Get("Content-Type"), b)
			}
			_, used := checkStream(t, model, b, withUsage)
			total += used
		}
	}
	// the quota was settled with each call's usage: the replies' totals,
	// and the streams without a usage chunk the same as those with one
	// (the same prompt, the fake's same answer)
	eventually(t, "the quota settled", func() bool {
		keys, _ := r.rdb.Keys(context.Background(), "{prq:quota:key_"+k.ID+"}:res:*").Result()
		return len(keys) == 0
	})
	if got := r.used(t, k); got <= total || got >= 2*total {
		t.Fatalf("quota used %d; the replies reported %d with one stream per model unreported", got, total)
	}

	// each fake: three calls, spoken its way, no 429
	for _, c := range []struct {
		name  string
		fake  *fakeopenai.Server
		seen  *recorder
		model string
		check func(s seen) string
	}{
		{"openai", r.oaFake, r.oaSeen, r.openai, func(s seen) string {
			if s.Path != "/v1/chat/completions" || s.Query != "" || s.Header.Get("Authorization") != "Bearer "+openaiKey || s.Header.Get("api-key") != "" || s.Header.Get("x-api-key") != "" {
				return "not an OpenAI call"
			}
			return ""
		}},
		{"azure", r.azFake, r.azSeen, r.azure, func(s seen) string {
			if s.Path != "/openai/deployments/"+r.deployment+"/chat/completions" || s.Query != "api-version="+azureVersion ||
				s.Header.Get("api-key") != azureKey || s.Header.Get("Authorization") != "" || s.Header.Get("x-api-key") != "" {
				return "not an Azure call"
			}
			return ""
		}},
		{"anthropic", r.antFake, r.antSeen, r.claude, func(s seen) string {
			if s.Path != "/v1/messages" || s.Query != "" || s.Header.Get("x-api-key") != anthropicKey || s.Header.Get("anthropic-version") != "2023-06-01" ||
				s.Header.Get("Authorization") != "" || s.Header.Get("api-key") != "" {
				return "not an Anthropic call"
			}
			var body map[string]json.RawMessage
			if err := json.Unmarshal(s.Body, &body); err != nil {
				return err.Error()
			}
			for _, f := range []string{"stream_options", "max_completion_tokens", "n"} {
				if _, ok := body[f]; ok {
					return "OpenAI's " + f + " sent to Anthropic"
				}
			}
			// streams are streamed (the prompts say which is which)
			if streamed := string(body["stream"]) == "true"; streamed != strings.Contains(string(s.Body), "Stream a hello") {
				return "stream " + string(body["stream"])
			}
			if string(body["max_tokens"]) != "60" {
				return "max_tokens " + string(body["max_tokens"])
			}
			return ""
		}},
	} {
		st := c.fake.Stats()[c.model]
		all := c.seen.all()
		if st.Requests != 3 || st.RateLimited != 0 || len(all) != 3 {
			t.Errorf("%s fake: %d requests (%d recorded), %d 429s; want 3 and none", c.name, st.Requests, len(all), st.RateLimited)
		}
		for _, s := range all {
			if s.Method != http.MethodPost {
				t.Errorf("%s fake: %s", c.name, s.Method)
			}
			if msg := c.check(s); msg != "" {
				t.Errorf("%s fake: %s: %s %s?%s %v %s", c.name, msg, s.Method, s.Path, s.Query, s.Header, s.Body)
			}
		}
	}
	noKeys(t, "the logs", r.logs.String())
}

// TestAnthropicTranslation: what the gateway sends for an Anthropic
// model is the request in Messages terms (system from system and
// developer messages, a turn's consecutive messages as blocks of one,
// stop_sequences, temperature, top_p, metadata.user_id, the cap as
// max_tokens), and the reply's stop reason comes back as OpenAI's
// finish reason ("length" at the cap).
func TestAnthropicTranslation(t *testing.T) {
	t.Parallel()
	r := newMultiRig(t)
	secret, _ := r.key(t, gateway.Spec{Name: "translated", Tier: "paid"})
	body := fmt.Sprintf(`{"model":%q,"max_completion_tokens":3,"stop":["END"],"temperature":0.5,"top_p":0.9,"user":"u-42","n":1,"logprobs":false,"tools":[],
		"messages":[{"role":"system","content":"Be brief."},{"role":"developer","content":[{"type":"text","text":"Answer in English."}]},
		{"role":"user","content":"Hello"},{"role":"user","content":[{"type":"text","text":"there."}]},{"role":"assistant","content":"Hi.","refusal":null},
		{"role":"user","content":"Tell me a long story about the sea and its ships."}]}`, r.claude)
	code, _, b := r.post(t, secret, body)
	if code != http.StatusOK {
		t.Fatalf("%d %s", code, b)
	}
	var c completionReply
	if err := json.Unmarshal(b, &c); err != nil || len(c.Choices) != 1 || c.Choices[0].FinishReason != "length" || c.Usage == nil || c.Usage.CompletionTokens != 3 {
		t.Fatalf("%v %s, want finish_reason length after 3 tokens", err, b)
	}
	all := r.antSeen.all()
	if len(all) != 1 {
		t.Fatalf("%d calls", len(all))
	}
	var got, want any
	json.Unmarshal(all[0].Body, &got)
	json.Unmarshal([]byte(fmt.Sprintf(`{"model":%q,"max_tokens":3,"stop_sequences":["END"],"temperature":0.5,"top_p":0.9,"metadata":{"user_id":"u-42"},
		"system":[{"type":"text","text":"Be brief."},{"type":"text","text":"Answer in English."}],
		"messages":[{"role":"user","content":[{"type":"text","text":"Hello"},{"type":"text","text":"there."}]},
		{"role":"assistant","content":[{"type":"text","text":"Hi."}]},
		{"role":"user","content":[{"type":"text","text":"Tell me a long story about the sea and its ships."}]}]}`, r.claude)), &want)
	if gb, wb := fmt.Sprint(got), fmt.Sprint(want); gb != wb {
		t.Fatalf("sent to Anthropic:\n%s\nwant\n%s", all[0].Body, wb)
	}
}

// TestAnthropicUntranslatable: what the Messages API translation cannot
// carry is refused with 400 in OpenAI's shape, naming the parameter,
// before anything is reserved or sent.
func TestAnthropicUntranslatable(t *testing.T) {
	t.Parallel()
	r := newMultiRig(t)
	secret, k := r.key(t, gateway.Spec{Name: "refused", Tier: "paid", QuotaTokens: 100000})
	user := `{"role":"user","content":"hi"}`
	tests := []struct{ name, fields, messages, param string }{
		{"n", `"n":2,`, user, "n"},
		{"tools", `"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],`, user, "tools"},
		{"tool choice", `"tool_choice":"auto",`, user, "tool_choice"},
		{"functions", `"functions":[{"name":"f"}],`, user, "functions"},
		{"logprobs", `"logprobs":true,`, user, "logprobs"},
		{"json schema not an object", `"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"array"}}},`, user, "response_format.json_schema.schema"},
		{"json schema name", `"response_format":{"type":"json_schema","json_schema":{"name":"a b","schema":{"type":"object"}}},`, user, "response_format.json_schema.name"},
		{"json object", `"response_format":{"type":"json_object"},`, user, "response_format"},
		{"seed", `"seed":7,`, user, "seed"},
		{"temperature over 1", `"temperature":1.5,`, user, "temperature"},
		{"tool message", ``, user + `,{"role":"assistant","content":"x"},{"role":"tool","tool_call_id":"c1","content":"42"}`, "messages[2].role"},
		{"tool calls", ``, user + `,{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]}`, "messages[1].tool_calls"},
		{"name", ``, `{"role":"user","name":"bob","content":"hi"}`, "messages[0].name"},
		{"image", ``, `{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x/y.png"}}]}`, "messages[0].content[0].type"},
		{"assistant first", ``, `{"role":"assistant","content":"hi"},` + user, "messages"},
		{"system only", ``, `{"role":"system","content":"hi"}`, "messages"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, b := r.post(t, secret, fmt.Sprintf(`{"model":%q,%s"messages":[%s]}`, r.claude, tt.fields, tt.messages))
			var e struct {
				Error struct {
					Message, Type string
					Param         *string
				} `json:"error"`
			}
			if err := json.Unmarshal(b, &e); err != nil || code != http.StatusBadRequest || e.Error.Type != "invalid_request_error" || e.Error.Param == nil || *e.Error.Param != tt.param ||
				!strings.Contains(e.Error.Message, tt.param) {
				t.Fatalf("%d %s, want 400 naming %s", code, b, tt.param)
			}
		})
	}
	if n := len(r.antSeen.all()); n != 0 {
		t.Fatalf("%d calls to Anthropic for refused requests", n)
	}
	if got := r.used(t, k); got != 0 {
		t.Fatalf("quota used %d by refused requests", got)
	}
	// the same parameters go to the OpenAI-kind model untouched
	code, _, b := r.post(t, secret, fmt.Sprintf(`{"model":%q,"n":2,"seed":7,"max_tokens":20,"messages":[%s]}`, r.openai, user))
	if code != http.StatusOK {
		t.Fatalf("openai model with n and seed: %d %s", code, b)
	}
}

// TestAnthropicErrors: Anthropic's 429 goes back through admission (the
// gateway's requeues) and then reaches the client as a 429 with
// Retry-After, the key's quota given back; 529 (overloaded) is a 503;
// the provider refusing the gateway's key is a 502 that names no key.
// Each answer is in OpenAI's error shape.
func TestAnthropicErrors(t *testing.T) {
	t.Parallel()
	r := newMultiRig(t)
	secret, k := r.key(t, gateway.Spec{Name: "unlucky", Tier: "paid", QuotaTokens: 100000})
	body := fmt.Sprintf(`{"model":%q,"max_tokens":50,"messages":[{"role":"user","content":"hello"}]}`, r.claude)
	errorOf := func(b []byte) (typ string, code *string) {
		var e struct {
			Error struct {
				Message, Type string
				Code          *string
			} `json:"error"`
		}
		if err := json.Unmarshal(b, &e); err != nil || e.Error.Message == "" || e.Error.Type == "" {
			t.Fatalf("not OpenAI's error shape: %s", b)
		}
		return e.Error.Type, e.Error.Code
	}

	r.antFake.SetFaults(fakeopenai.Faults{TooMany: 1})
	code, h, b := r.post(t, secret, body)
	if code != http.StatusTooManyRequests || h.Get("Retry-After") == "" {
		t.Fatalf("%d Retry-After %q %s, want 429 with Retry-After", code, h.Get("Retry-After"), b)
	}
	if _, c := errorOf(b); c == nil || *c != "rate_limit_exceeded" {
		t.Fatalf("code %v", c)
	}
	if n := r.antFake.Stats()[r.claude].Requests; n != 4 {
		t.Fatalf("%d calls to Anthropic, want 4: the call and three more through admission", n)
	}
	bk, _ := r.sched.Bucket(r.claude)
	if n, err := r.rdb.HLen(context.Background(), bk.Tag()+":adm:res").Result(); err != nil || n != 0 {
		t.Fatalf("%d admission reservations left unsettled (%v)", n, err)
	}
	if got := r.used(t, k); got != 0 {
		t.Fatalf("quota used %d for a request Anthropic never ran", got)
	}

	r.antFake.SetFaults(fakeopenai.Faults{ServerError: 1})
	code, _, b = r.post(t, secret, body)
	if typ, _ := errorOf(b); code != http.StatusServiceUnavailable || typ != "server_error" {
		t.Fatalf("overloaded: %d %s, want 503 server_error", code, b)
	}
	r.antFake.SetFaults(fakeopenai.Faults{})

	code, _, b = r.post(t, secret, fmt.Sprintf(`{"model":%q,"max_tokens":50,"messages":[{"role":"user","content":"hello"}]}`, r.bad))
	if typ, c := errorOf(b); code != http.StatusBadGateway || typ != "server_error" || c == nil || *c != "upstream_auth" || strings.Contains(string(b), "x-api-key") {
		t.Fatalf("refused key: %d %s, want 502 upstream_auth", code, b)
	}
	noKeys(t, "a reply", string(b))
	code, _, b = r.post(t, secret, body)
	if code != http.StatusOK {
		t.Fatalf("after the faults: %d %s", code, b)
	}
	checkCompletion(t, r.claude, b)
	noKeys(t, "the logs", r.logs.String())
}

// TestAzure429GoesBackThroughAdmission: Azure's 429 (retry-after-ms)
// penalizes the model's bucket and goes back through admission, as
// OpenAI's does; the client then gets it with Retry-After.
func TestAzure429GoesBackThroughAdmission(t *testing.T) {
	t.Parallel()
	r := newMultiRig(t)
	secret, k := r.key(t, gateway.Spec{Name: "unlucky", Tier: "paid", QuotaTokens: 100000})
	r.azFake.SetFaults(fakeopenai.Faults{TooMany: 1})
	code, h, b := r.post(t, secret, fmt.Sprintf(`{"model":%q,"max_tokens":50,"messages":[{"role":"user","content":"hello"}]}`, r.azure))
	if code != http.StatusTooManyRequests || h.Get("Retry-After") == "" {
		t.Fatalf("%d Retry-After %q %s, want 429 with Retry-After", code, h.Get("Retry-After"), b)
	}
	if n := len(r.azSeen.all()); n != 4 {
		t.Fatalf("%d calls to Azure, want 4: the call and three more through admission", n)
	}
	if got := r.used(t, k); got != 0 {
		t.Fatalf("quota used %d for a request Azure never ran", got)
	}
	noKeys(t, "a reply", string(b)+fmt.Sprint(h))
}

// TestAnthropicStructuredReply: a json_schema response_format becomes
// one tool forced by tool_choice (input_schema the schema), and the
// tool's input comes back as the message's content, finish_reason stop,
// streaming or not.
func TestAnthropicStructuredReply(t *testing.T) {
	t.Parallel()
	r := newMultiRig(t)
	secret, _ := r.key(t, gateway.Spec{Name: "structured", Tier: "paid"})
	schema := `{"type":"object","properties":{"comments":{"type":"array","items":{"type":"object","properties":{"line":{"type":"integer"},"body":{"type":"string"}},"required":["line","body"]}}},"required":["comments"]}`
	for _, stream := range []bool{false, true} {
		body := fmt.Sprintf(`{"model":%q,"stream":%v,"max_tokens":400,"response_format":{"type":"json_schema","json_schema":{"name":"review","strict":true,"schema":%s}},
			"messages":[{"role":"system","content":"Review the diff."},{"role":"user","content":"File: main.go\n\n 12 +\tx := compute()\n 13 +\treturn x"}]}`, r.claude, stream, schema)
		code, _, b := r.post(t, secret, body)
		if code != http.StatusOK {
			t.Fatalf("stream %v: %d %s", stream, code, b)
		}
		var content string
		if stream {
			content, _ = checkStream(t, r.claude, b, false)
		} else {
			content, _ = checkCompletion(t, r.claude, b)
			if !strings.Contains(string(b), `"finish_reason":"stop"`) {
				t.Fatalf("finish_reason: %s", b)
			}
		}
		var reply struct {
			Comments []struct {
				Line int
				Body string
			}
		}
		if err := json.Unmarshal([]byte(content), &reply); err != nil || reply.Comments == nil {
			t.Fatalf("stream %v: content %q is not the schema's JSON (%v)", stream, content, err)
		}
	}
	all := r.antSeen.all()
	if len(all) != 2 {
		t.Fatalf("%d calls", len(all))
	}
	var sent struct {
		Tools []struct {
			Name        string          `json:"name"`
			InputSchema json.RawMessage `json:"input_schema"`
		} `json:"tools"`
		ToolChoice map[string]string `json:"tool_choice"`
		Extra      json.RawMessage   `json:"response_format"`
	}
	json.Unmarshal(all[0].Body, &sent)
	var got, want any
	if len(sent.Tools) == 1 {
		json.Unmarshal(sent.Tools[0].InputSchema, &got)
	}
	json.Unmarshal([]byte(schema), &want)
	if len(sent.Tools) != 1 || sent.Tools[0].Name != "review" || !reflect.DeepEqual(got, want) ||
		sent.ToolChoice["type"] != "tool" || sent.ToolChoice["name"] != "review" || sent.Extra != nil {
		t.Fatalf("sent to Anthropic: %s", all[0].Body)
	}
	if n := r.antFake.Stats()[r.claude].ResponseFormats["tool:true"]; n != 2 {
		t.Fatalf("the fake saw %d forced-tool requests, want 2", n)
	}
}

// TestAnthropicStreamBrokenOff: an Anthropic stream is relayed as it
// comes, so a stream that stops (idle) or fails midway (an error event)
// ends with an error event after the chunks already sent, and keeps its
// whole reservation (no usage came: the provider may have generated up
// to the cap).
func TestAnthropicStreamBrokenOff(t *testing.T) {
	t.Parallel()
	start := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"usage\":{\"input_tokens\":9,\"output_tokens\":1}}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Once upon\"}}\n\n"
	tests := []struct {
		name  string
		then  func(w http.ResponseWriter, r *http.Request)
		event string
	}{
		{"idle", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }, "idle"},
		{"error event", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n")
		}, "overloaded_error"},
		{"cut", func(w http.ResponseWriter, r *http.Request) {}, "broke off"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			up := stalling(t, func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/v1/messages" || r.Header.Get("x-api-key") != "sk-up" {
					http.Error(w, "not a Messages call", http.StatusNotFound)
					return
				}
				w.Header().Set("Content-Type", "text/event-stream")
				fmt.Fprint(w, start)
				w.(http.Flusher).Flush()
				tt.then(w, r)
			})
			r := newRigWith(t, rigOpts{cfg: func(c *gateway.Config) {
				c.StreamIdle = 200 * time.Millisecond
				for name := range c.Models {
					c.Models[name] = gateway.Model{Provider: &gateway.Provider{Kind: gateway.KindAnthropic, BaseURL: strings.TrimSuffix(up, "/v1"), Keys: []string{"sk-up"}}}
				}
			}})
			secret, k := r.key(t, gateway.Spec{Name: "broken", Tier: "paid", QuotaTokens: 10000})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res, err := r.post(ctx, secret, fmt.Sprintf(`{"model":%q,"stream":true,"max_tokens":200,"messages":[{"role":"user","content":"hello"}]}`, r.model), nil)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(res.Body)
			res.Body.Close()
			if err != nil || res.StatusCode != http.StatusOK {
				t.Fatalf("%d %v %s", res.StatusCode, err, body)
			}
			b := string(body)
			role, text, errEvent := strings.Index(b, `"role":"assistant"`), strings.Index(b, `"content":"Once upon"`), strings.Index(b, `data: {"error":`)
			if role < 0 || text < role || errEvent < text || !strings.Contains(b[errEvent:], tt.event) || strings.Contains(b, "[DONE]") {
				t.Fatalf("want the role, the text, then an error event about %q, no [DONE]:\n%s", tt.event, b)
			}
			eventually(t, "the call settled", func() bool {
				keys, _ := r.rdb.Keys(context.Background(), "{prq:quota:key_"+k.ID+"}:res:*").Result()
				return len(keys) == 0
			})
			if got := r.used(t, k); got < 200 {
				t.Fatalf("quota used %d, want the whole reservation (input + the 200 cap)", got)
			}
		})
	}
}
