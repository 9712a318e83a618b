package llm_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/llm"
)

// documented is one error answer as a provider's reference documents it:
// the status, the headers that matter and the body, verbatim in shape
// (OpenAI's error codes guide and API reference, Azure OpenAI's REST
// reference and quota docs, Anthropic's errors page).
type documented struct {
	provider string // openai, azure, anthropic
	name     string
	status   int
	header   map[string]string
	body     string
	want     error
	code     string // the code prq keeps, when it keeps one
}

const secretKey = "sk-proj-4f9Qz7secretsecretsecretT3BlbkFJyV0A"

var documentedErrors = []documented{
	{"openai", "429 rate limit", 429, map[string]string{"retry-after-ms": "2000", "x-ratelimit-remaining-tokens": "0"},
		`{"error":{"message":"Rate limit reached for gpt-4o in organization org-abc on tokens per min (TPM): Limit 30000, Used 29000, Requested 2000. Please try again in 2s. Visit https://platform.openai.com/account/rate-limits to learn more.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`,
		llm.ErrRateLimited, "rate_limit_exceeded"},
	{"openai", "429 insufficient quota", 429, nil,
		`{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`,
		llm.ErrAccount, "insufficient_quota"},
	{"openai", "401 invalid key", 401, nil,
		`{"error":{"message":"Incorrect API key provided: sk-proj-********************************************yV0A. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`,
		llm.ErrAccount, "invalid_api_key"},
	{"openai", "400 context length", 400, nil,
		`{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130412 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`,
		llm.ErrContextLength, "context_length_exceeded"},
	{"openai", "404 model not found", 404, nil,
		"{\"error\":{\"message\":\"The model `gpt-9` does not exist or you do not have access to it.\",\"type\":\"invalid_request_error\",\"param\":null,\"code\":\"model_not_found\"}}",
		llm.ErrPermanent, "model_not_found"},
	{"openai", "500 server error", 500, nil,
		`{"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}`,
		llm.ErrTransient, ""},
	{"openai", "503 overloaded", 503, nil,
		`{"error":{"message":"The engine is currently overloaded, please try again later.","type":"server_error","param":null,"code":null}}`,
		llm.ErrTransient, ""},
	{"azure", "429 rate limit", 429, map[string]string{"retry-after-ms": "6000", "retry-after": "6"},
		`{"error":{"code":"429","message":"Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-10-21 have exceeded token rate limit of your current OpenAI S0 pricing tier. Please retry after 6 seconds. Please go here: https://aka.ms/oai/quotaincrease if you would like to further increase the default rate limit."}}`,
		llm.ErrRateLimited, "429"},
	{"azure", "401 access denied", 401, nil,
		`{"error":{"code":"401","message":"Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource."}}`,
		llm.ErrAccount, "401"},
	{"azure", "404 deployment not found", 404, nil,
		`{"error":{"code":"DeploymentNotFound","message":"The API deployment for this resource does not exist. If you created the deployment within the last 5 minutes, please wait a moment and try again."}}`,
		llm.ErrPermanent, "DeploymentNotFound"},
	{"azure", "400 content filter", 400, nil,
		`{"error":{"message":"The response was filtered due to the prompt triggering Azure OpenAI's content management policy. Please modify your prompt and retry.","type":null,"param":"prompt","code":"content_filter","status":400,"innererror":{"code":"ResponsibleAIPolicyViolation","content_filter_result":{"hate":{"filtered":true,"severity":"high"},"self_harm":{"filtered":false,"severity":"safe"},"sexual":{"filtered":false,"severity":"safe"},"violence":{"filtered":false,"severity":"safe"}}}}}`,
		llm.ErrPermanent, "content_filter"},
	{"azure", "400 context length", 400, nil,
		`{"error":{"message":"This model's maximum context length is 8192 tokens. However, your messages resulted in 9120 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded","status":400}}`,
		llm.ErrContextLength, "context_length_exceeded"},
	{"anthropic", "400 invalid request", 400, nil,
		`{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: Field required"},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}`,
		llm.ErrPermanent, "invalid_request_error"},
	{"anthropic", "400 prompt too long", 400, nil,
		`{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210345 tokens > 200000 maximum"},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fz"}`,
		llm.ErrContextLength, "invalid_request_error"},
	{"anthropic", "401 authentication", 401, nil,
		`{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"},"request_id":"req_011CSHoEeqs5C35K2UUqR7G0"}`,
		llm.ErrAccount, "authentication_error"},
	{"anthropic", "402 billing", 402, nil,
		`{"type":"error","error":{"type":"billing_error","message":"Your credit balance is too low to access the Anthropic API."},"request_id":"req_011CSHoEeqs5C35K2UUqR7G1"}`,
		llm.ErrAccount, "billing_error"},
	{"anthropic", "403 permission", 403, nil,
		`{"type":"error","error":{"type":"permission_error","message":"Your API key does not have permission to use the specified resource."},"request_id":"req_011CSHoEeqs5C35K2UUqR7G2"}`,
		llm.ErrAccount, "permission_error"},
	{"anthropic", "404 not found", 404, nil,
		`{"type":"error","error":{"type":"not_found_error","message":"model: claude-9"},"request_id":"req_011CSHoEeqs5C35K2UUqR7G3"}`,
		llm.ErrPermanent, "not_found_error"},
	{"anthropic", "413 request too large", 413, nil,
		`{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum allowed number of bytes."},"request_id":"req_011CSHoEeqs5C35K2UUqR7G4"}`,
		llm.ErrContextLength, "request_too_large"},
	{"anthropic", "429 rate limit", 429, map[string]string{"retry-after": "12", "anthropic-ratelimit-output-tokens-remaining": "0"},
		`{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit for your organization of 8,000 output tokens per minute."},"request_id":"req_011CSHoEeqs5C35K2UUqR7G5"}`,
		llm.ErrRateLimited, "rate_limit_error"},
	{"anthropic", "500 api error", 500, nil,
		`{"type":"error","error":{"type":"api_error","message":"Internal server error"},"request_id":"req_011CSHoEeqs5C35K2UUqR7G6"}`,
		llm.ErrTransient, "api_error"},
	{"anthropic", "529 overloaded", 529, nil,
		`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_011CSHoEeqs5C35K2UUqR7G7"}`,
		llm.ErrTransient, "overloaded_error"},
}

// client is prq's client for the provider, pointed at url.
func client(provider, url string) llm.Completer {
	switch provider {
	case "azure":
		return llm.NewAzure(secretKey, url, "2024-10-21", func(string) string { return "prod-4o" }, 2*time.Second, nil)
	case "anthropic":
		return llm.NewAnthropic(secretKey, url, 2*time.Second, nil)
	}
	return llm.New(secretKey, url+"/v1", 2*time.Second, nil)
}

// TestDocumentedErrors: every error answer the providers document,
// served verbatim, is classified as prq acts on it (back to admission,
// retry, split, pause the model, fail), keeps its code and the headers a
// bucket sync reads, and says what went wrong without the API key.
func TestDocumentedErrors(t *testing.T) {
	for _, d := range documentedErrors {
		t.Run(d.provider+" "+d.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for k, v := range d.header {
					w.Header().Set(k, v)
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(d.status)
				fmt.Fprint(w, d.body)
			}))
			defer srv.Close()
			_, err := client(d.provider, srv.URL).Complete(context.Background(),
				llm.Request{Model: "gpt-4o", System: "Summarize.", User: "File: a.go\n   1 +x := 1", MaxOutput: 50})
			if !errors.Is(err, d.want) {
				t.Fatalf("got %v, want %v", err, d.want)
			}
			var e *llm.Error
			if !errors.As(err, &e) {
				t.Fatalf("%T is not an *llm.Error", err)
			}
			if e.Status != d.status || e.Code != d.code {
				t.Errorf("status %d code %q, want %d %q", e.Status, e.Code, d.status, d.code)
			}
			for k, v := range d.header {
				if got := e.Header.Get(k); got != v {
					t.Errorf("header %s = %q, want %q (kept for the bucket sync)", k, got, v)
				}
			}
			var doc struct {
				Error struct {
					Message string `json:"message"`
				} `json:"error"`
			}
			if err := json.Unmarshal([]byte(d.body), &doc); err != nil {
				t.Fatal(err)
			}
			msg := err.Error()
			if head := doc.Error.Message[:min(40, len(doc.Error.Message))]; !strings.Contains(msg, head) {
				t.Errorf("%q does not carry the provider's message %q", msg, head)
			}
			if strings.Contains(msg, secretKey) {
				t.Errorf("the API key reached the error text: %q", msg)
			}
		})
	}
}

// TestFakeErrorsAsDocumented: the fake provider answers each failure it
// can be made to give in the documented shape: every member the
// documented body has, with the same JSON type (a documented null
// matches any), at the same status.
func TestFakeErrorsAsDocumented(t *testing.T) {
	fake := fakeopenai.New(fakeopenai.Config{Models: []fakeopenai.Model{{Name: "gpt-4o", RPM: 1000, TPM: 1000000, ContextTokens: 200}},
		Period: time.Hour, Keys: []string{"good"}, Deployments: map[string]string{"prod-4o": "gpt-4o"}})
	srv := httptest.NewServer(fake)
	defer srv.Close()
	doc := func(provider, name string) documented {
		for _, d := range documentedErrors {
			if d.provider == provider && d.name == name {
				return d
			}
		}
		t.Fatalf("no documented %s %s", provider, name)
		return documented{}
	}
	long := strings.Repeat("token ", 400)
	cases := []struct {
		doc    documented
		faults fakeopenai.Faults
		key    string
		user   string
		model  string
	}{
		{doc("openai", "429 rate limit"), fakeopenai.Faults{TooMany: 1}, "good", "hi", "gpt-4o"},
		{doc("openai", "429 insufficient quota"), fakeopenai.Faults{NoQuota: true}, "good", "hi", "gpt-4o"},
		{doc("openai", "401 invalid key"), fakeopenai.Faults{}, "bad", "hi", "gpt-4o"},
		{doc("openai", "400 context length"), fakeopenai.Faults{}, "good", long, "gpt-4o"},
		{doc("openai", "404 model not found"), fakeopenai.Faults{}, "good", "hi", "gpt-9"},
		{doc("openai", "500 server error"), fakeopenai.Faults{ServerError: 1}, "good", "hi", "gpt-4o"},
		{doc("azure", "429 rate limit"), fakeopenai.Faults{TooMany: 1}, "good", "hi", "gpt-4o"},
		{doc("azure", "401 access denied"), fakeopenai.Faults{}, "bad", "hi", "gpt-4o"},
		{doc("azure", "404 deployment not found"), fakeopenai.Faults{}, "good", "hi", "gpt-9"},
		{doc("anthropic", "401 authentication"), fakeopenai.Faults{}, "bad", "hi", "gpt-4o"},
		{doc("anthropic", "429 rate limit"), fakeopenai.Faults{TooMany: 1}, "good", "hi", "gpt-4o"},
		{doc("anthropic", "529 overloaded"), fakeopenai.Faults{ServerError: 1}, "good", "hi", "gpt-4o"},
	}
	for _, c := range cases {
		t.Run(c.doc.provider+" "+c.doc.name, func(t *testing.T) {
			fake.SetFaults(c.faults)
			defer fake.SetFaults(fakeopenai.Faults{})
			status, body := rawCall(t, srv.URL, c.doc.provider, c.key, c.model, c.user)
			if status != c.doc.status {
				t.Errorf("status %d, documented %d (%s)", status, c.doc.status, body)
			}
			var want, got any
			if err := json.Unmarshal([]byte(c.doc.body), &want); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatalf("the fake's error is not JSON: %v: %s", err, body)
			}
			if diff := shapeDiff("", want, got); len(diff) > 0 {
				t.Errorf("the fake's body differs from the documented shape: %s\n fake: %s\n  doc: %s", strings.Join(diff, "; "), body, c.doc.body)
			}
		})
	}
}

// rawCall sends one chat request the way the provider's API takes it
// and returns the status and body as they came.
func rawCall(t *testing.T, base, provider, key, model, user string) (int, []byte) {
	t.Helper()
	var url string
	body := map[string]any{"model": model, "max_tokens": 20, "messages": []map[string]string{{"role": "user", "content": user}}}
	h := http.Header{"Content-Type": {"application/json"}}
	switch provider {
	case "azure":
		dep := "prod-4o"
		if model != "gpt-4o" {
			dep = "missing"
		}
		url = base + "/openai/deployments/" + dep + "/chat/completions?api-version=2024-10-21"
		h.Set("api-key", key)
	case "anthropic":
		url = base + "/v1/messages"
		h.Set("x-api-key", key)
		h.Set("anthropic-version", "2023-06-01")
	default:
		url = base + "/v1/chat/completions"
		h.Set("Authorization", "Bearer "+key)
	}
	b, _ := json.Marshal(body)
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = h
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, raw
}

// shapeDiff names each member of want that got lacks or holds with
// another JSON type; a null in want matches anything.
func shapeDiff(at string, want, got any) []string {
	if want == nil {
		return nil
	}
	if jsonType(want) != jsonType(got) {
		return []string{fmt.Sprintf("%s is %s, documented %s", name(at), jsonType(got), jsonType(want))}
	}
	w, ok := want.(map[string]any)
	if !ok {
		return nil
	}
	g := got.(map[string]any)
	keys := make([]string, 0, len(w))
	for k := range w {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []string
	for _, k := range keys {
		v, ok := g[k]
		if !ok {
			out = append(out, name(at+"."+k)+" is missing")
			continue
		}
		out = append(out, shapeDiff(at+"."+k, w[k], v)...)
	}
	return out
}

func name(at string) string {
	if at == "" {
		return "the body"
	}
	return strings.TrimPrefix(at, ".")
}

func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case string:
		return "string"
	case float64:
		return "number"
	case bool:
		return "boolean"
	}
	return fmt.Sprintf("%T", v)
}
