package fakeopenai_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prq-dev/prq/fake/fakeopenai"
)

func post(t *testing.T, url string, h map[string]string, body string) (*http.Response, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%d: body is not JSON: %s", resp.StatusCode, b)
	}
	return resp, out
}

func errorType(body map[string]any) string {
	e, _ := body["error"].(map[string]any)
	s, _ := e["type"].(string)
	return s
}

// TestAnthropicMode: auth, version header, reply shape with a forced
// tool, headers with RFC 3339 resets, and output tokens limited apart
// from input tokens (a request whose input fits but whose max_tokens
// does not is refused with Anthropic's 429).
func TestAnthropicMode(t *testing.T) {
	fake := fakeopenai.New(fakeopenai.Config{Models: []fakeopenai.Model{{Name: "claude", RPM: 100, TPM: 100000, ITPM: 100000, OTPM: 1000}},
		Period: time.Hour, Keys: []string{"sk-ant"}})
	srv := httptest.NewServer(fake)
	defer srv.Close()
	url := srv.URL + "/v1/messages"
	ok := map[string]string{"x-api-key": "sk-ant", "anthropic-version": "2023-06-01", "content-type": "application/json"}
	review := `{"model":"claude","max_tokens":600,"system":[{"type":"text","text":"Return \"comments\" for the diff."}],
		"messages":[{"role":"user","content":[{"type":"text","text":"File: a.go\n  3 +x := 1"}]}],
		"tools":[{"name":"review","input_schema":{"type":"object","properties":{"summary":{"type":"string"},"comments":{"type":"array"}}}}],
		"tool_choice":{"type":"tool","name":"review"}}`

	if resp, body := post(t, url, map[string]string{"anthropic-version": "2023-06-01"}, review); resp.StatusCode != 401 || body["type"] != "error" || errorType(body) != "authentication_error" {
		t.Fatalf("no key: %d %v", resp.StatusCode, body)
	}
	if resp, body := post(t, url, map[string]string{"x-api-key": "sk-ant"}, review); resp.StatusCode != 400 || errorType(body) != "invalid_request_error" {
		t.Fatalf("no version: %d %v", resp.StatusCode, body)
	}
	resp, body := post(t, url, ok, review)
	if resp.StatusCode != 200 || body["type"] != "message" || body["stop_reason"] != "tool_use" {
		t.Fatalf("review: %d %v", resp.StatusCode, body)
	}
	block := body["content"].([]any)[0].(map[string]any)
	if block["type"] != "tool_use" || block["name"] != "review" || block["input"].(map[string]any)["comments"] == nil {
		t.Fatalf("review block: %v", block)
	}
	usage := body["usage"].(map[string]any)
	if usage["input_tokens"].(float64) <= 0 || usage["output_tokens"].(float64) <= 0 {
		t.Fatalf("usage: %v", usage)
	}
	if got := resp.Header.Get("anthropic-ratelimit-output-tokens-remaining"); got != "400" {
		t.Fatalf("output tokens remaining %q, want 400 (1000 - max_tokens 600)", got)
	}
	if resp.Header.Get("anthropic-ratelimit-tokens-remaining") != "400" || resp.Header.Get("anthropic-ratelimit-tokens-limit") != "1000" {
		t.Fatalf("tokens-* must be the most restrictive dimension (output): %v", resp.Header)
	}
	for _, dim := range []string{"requests", "tokens", "input-tokens", "output-tokens"} {
		if _, err := time.Parse(time.RFC3339, resp.Header.Get("anthropic-ratelimit-"+dim+"-reset")); err != nil {
			t.Fatalf("%s reset: %v", dim, err)
		}
	}
	// input has plenty of room; output has 400 left of the 600 asked
	resp, body = post(t, url, ok, review)
	if resp.StatusCode != 429 || body["type"] != "error" || errorType(body) != "rate_limit_error" || resp.Header.Get("retry-after") == "" {
		t.Fatalf("output over its limit: %d %v %v", resp.StatusCode, body, resp.Header)
	}
	if st := fake.Stats()["claude"]; st.RateLimited != 1 || st.Requests != 2 {
		t.Fatalf("stats %+v", st)
	}
	fake.SetFaults(fakeopenai.Faults{ServerError: 1})
	small := strings.Replace(review, `"max_tokens":600`, `"max_tokens":10`, 1)
	if resp, body := post(t, url, ok, small); resp.StatusCode != 529 || errorType(body) != "overloaded_error" {
		t.Fatalf("overloaded: %d %v", resp.StatusCode, body)
	}
}

// TestAzureMode: deployments, api-version and api-key, Azure's error
// body and its 429 headers.
func TestAzureMode(t *testing.T) {
	fake := fakeopenai.New(fakeopenai.Config{Models: []fakeopenai.Model{{Name: "gpt-4o", RPM: 1, TPM: 100000}},
		Period: time.Hour, Keys: []string{"az-key"}, Deployments: map[string]string{"prod-4o": "gpt-4o"}})
	srv := httptest.NewServer(fake)
	defer srv.Close()
	url := func(dep, version string) string {
		u := srv.URL + "/openai/deployments/" + dep + "/chat/completions"
		if version != "" {
			u += "?api-version=" + version
		}
		return u
	}
	key := map[string]string{"api-key": "az-key"}
	chat := `{"messages":[{"role":"user","content":"hello"}],"max_tokens":20}`
	code := func(body map[string]any) string {
		e, _ := body["error"].(map[string]any)
		s, _ := e["code"].(string)
		return s
	}
	if resp, _ := post(t, url("prod-4o", "2024-10-21"), map[string]string{"Authorization": "Bearer az-key"}, chat); resp.StatusCode != 401 {
		t.Fatalf("bearer instead of api-key: %d", resp.StatusCode)
	}
	if resp, _ := post(t, url("prod-4o", ""), key, chat); resp.StatusCode != 400 {
		t.Fatalf("no api-version: %d", resp.StatusCode)
	}
	if resp, body := post(t, url("gpt-4o", "2024-10-21"), key, chat); resp.StatusCode != 404 || code(body) != "DeploymentNotFound" {
		t.Fatalf("unknown deployment: %d %v", resp.StatusCode, body)
	}
	resp, body := post(t, url("prod-4o", "2024-10-21"), key, chat)
	if resp.StatusCode != 200 || body["choices"] == nil || resp.Header.Get("x-ratelimit-remaining-requests") != "0" || resp.Header.Get("x-ratelimit-limit-requests") != "" {
		t.Fatalf("chat: %d %v %v", resp.StatusCode, body, resp.Header)
	}
	resp, body = post(t, url("prod-4o", "2024-10-21"), key, chat)
	if resp.StatusCode != 429 || code(body) != "429" || resp.Header.Get("retry-after-ms") == "" || !strings.Contains(body["error"].(map[string]any)["message"].(string), "Please retry after") {
		t.Fatalf("over the limit: %d %v %v", resp.StatusCode, body, resp.Header)
	}
}

// TestAnthropicStream: stream: true answers with Anthropic's events in
// their order, the text (or a forced tool's input JSON) in deltas that
// add up to the non-streaming reply's, the usage in message_start
// (input) and message_delta (output).
func TestAnthropicStream(t *testing.T) {
	fake := fakeopenai.New(fakeopenai.Config{Models: []fakeopenai.Model{{Name: "claude", RPM: 100, TPM: 100000}}, Keys: []string{"sk-ant"}})
	srv := httptest.NewServer(fake)
	defer srv.Close()
	h := map[string]string{"x-api-key": "sk-ant", "anthropic-version": "2023-06-01"}
	for _, tc := range []struct{ name, extra, delta string }{
		{"text", ``, "text_delta"},
		{"tool", `,"tools":[{"name":"review","input_schema":{"type":"object","properties":{"comments":{"type":"array"}}}}],"tool_choice":{"type":"tool","name":"review"}`, "input_json_delta"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := `{"model":"claude","max_tokens":300,"system":"Return \"comments\" if asked.","messages":[{"role":"user","content":"File: a.go\n  3 +x := 1"}]` + tc.extra
			_, whole := post(t, srv.URL+"/v1/messages", h, body+`}`)
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/messages", strings.NewReader(body+`,"stream":true}`))
			for k, v := range h {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
				t.Fatalf("%d %s", resp.StatusCode, raw)
			}
			var types []string
			var text strings.Builder
			var in, out float64
			for _, ev := range strings.Split(strings.TrimSpace(string(raw)), "\n\n") {
				name, data, _ := strings.Cut(ev, "\n")
				var d map[string]any
				if err := json.Unmarshal([]byte(strings.TrimPrefix(data, "data: ")), &d); err != nil || "event: "+d["type"].(string) != name {
					t.Fatalf("event %q (%v)", ev, err)
				}
				types = append(types, d["type"].(string))
				switch d["type"] {
				case "message_start":
					in = d["message"].(map[string]any)["usage"].(map[string]any)["input_tokens"].(float64)
				case "content_block_delta":
					delta := d["delta"].(map[string]any)
					if delta["type"] != tc.delta {
						t.Fatalf("delta %v, want %s", delta, tc.delta)
					}
					s, _ := delta["text"].(string)
					p, _ := delta["partial_json"].(string)
					text.WriteString(s + p)
				case "message_delta":
					out = d["usage"].(map[string]any)["output_tokens"].(float64)
				}
			}
			got := strings.Join(types, ",")
			if !strings.HasPrefix(got, "message_start,content_block_start,ping,content_block_delta,") || !strings.HasSuffix(got, ",content_block_stop,message_delta,message_stop") {
				t.Fatalf("events %s", got)
			}
			usage := whole["usage"].(map[string]any)
			if in != usage["input_tokens"] || out != usage["output_tokens"] {
				t.Fatalf("stream usage %v/%v, whole reply's %v", in, out, usage)
			}
			block := whole["content"].([]any)[0].(map[string]any)
			want, _ := block["text"].(string)
			if tc.delta == "input_json_delta" {
				b, _ := json.Marshal(block["input"])
				var a, w any
				json.Unmarshal([]byte(text.String()), &a)
				json.Unmarshal(b, &w)
				if fmt.Sprint(a) != fmt.Sprint(w) {
					t.Fatalf("streamed input %s, whole %s", text.String(), b)
				}
				return
			}
			if text.String() != want {
				t.Fatalf("streamed %q, whole %q", text.String(), want)
			}
		})
	}
}
