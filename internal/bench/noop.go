package bench

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"time"
)

// Upstreams of the ceiling workload: the fake provider (a real HTTP
// server in the bench process, with no latency and limits far above what
// admission can reach) or a no-op provider inside each worker process,
// for when the fake would saturate before prq does.
const (
	UpstreamFake = "fake"
	UpstreamNoop = "noop"
)

// noopProvider answers OpenAI chat completions at once and does nothing
// else: no limits, no tokenizer, no faults. A review prompt (one that
// asks for "comments", as prq's does in its system prompt or schema)
// gets a valid review with no findings; any other prompt a sentence. A
// prompt whose last message states its task ("Task: review …", as prq's
// do) is read by that line.
// Usage is estimated as characters/4 for the prompt. It is the
// cheapest thing that still speaks the provider's protocol over HTTP.
type noopProvider struct{}

var _ http.Handler = (*noopProvider)(nil)

func (p *noopProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"error":{"message":"unknown URL","type":"invalid_request_error","param":null,"code":"unknown_url"}}`)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 32<<20))
	var req struct {
		Model    string `json:"model"`
		Messages []struct {
			Content string `json:"content"`
		} `json:"messages"`
		ResponseFormat *struct {
			JSONSchema *struct {
				Schema json.RawMessage `json:"schema"`
			} `json:"json_schema"`
		} `json:"response_format"`
	}
	if err != nil || json.Unmarshal(body, &req) != nil || len(req.Messages) == 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"error":{"message":"We could not parse the JSON body of your request.","type":"invalid_request_error","param":null,"code":null}}`)
		return
	}
	text := "The change keeps the existing behaviour."
	review := strings.Contains(req.Messages[0].Content, `"comments"`)
	if f := req.ResponseFormat; f != nil && f.JSONSchema != nil && strings.Contains(string(f.JSONSchema.Schema), `"comments"`) {
		review = true
	}
	if task := req.Messages[len(req.Messages)-1].Content; strings.HasPrefix(task, "Task:") {
		review = strings.HasPrefix(task, "Task: review")
	}
	if review {
		text = `{"summary":"No issues found.","comments":[]}`
	}
	prompt := int64(len(body) / 4)
	out := int64(len(text)/4 + 1)
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"id": "chatcmpl-noop", "object": "chat.completion", "created": time.Now().Unix(), "model": req.Model,
		"choices": []map[string]any{{"index": 0, "message": map[string]any{"role": "assistant", "content": text}, "finish_reason": "stop"}},
		"usage":   map[string]any{"prompt_tokens": prompt, "completion_tokens": out, "total_tokens": prompt + out},
	})
}
