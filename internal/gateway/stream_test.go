package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prq-dev/prq/internal/gateway"
)

// TestAnthropicStopReasons: each of Anthropic's stop reasons reaches
// every API the same, whole and streamed (the stream sent a few bytes a
// write): a chat completion's finish_reason, a response's status and
// incomplete reason, and, on the Messages API, the stop reason itself.
func TestAnthropicStopReasons(t *testing.T) {
	t.Parallel()
	stopIn := regexp.MustCompile(`stop=([a-z_]+);`)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		m := stopIn.FindSubmatch(body)
		if r.URL.Path != "/v1/messages" || m == nil {
			http.Error(w, "not a Messages call naming its stop", http.StatusNotFound)
			return
		}
		stop := string(m[1])
		if !strings.Contains(string(body), `"stream":true`) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"Hi"}],"stop_reason":%q,"stop_sequence":null,"usage":{"input_tokens":5,"output_tokens":3}}`, stop)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		stream := `event: message_start` + "\n" + `data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"usage":{"input_tokens":5,"output_tokens":1}}}` + "\n\n" +
			`event: content_block_start` + "\n" + `data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}` + "\n\n" +
			`event: content_block_delta` + "\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}` + "\n\n" +
			`event: content_block_stop` + "\n" + `data: {"type":"content_block_stop","index":0}` + "\n\n" +
			`event: message_delta` + "\n" + fmt.Sprintf(`data: {"type":"message_delta","delta":{"stop_reason":%q,"stop_sequence":null},"usage":{"output_tokens":3}}`, stop) + "\n\n" +
			`event: message_stop` + "\n" + `data: {"type":"message_stop"}` + "\n\n"
		for len(stream) > 0 { // an event split across reads
			n := min(7, len(stream))
			io.WriteString(w, stream[:n])
			w.(http.Flusher).Flush()
			stream = stream[n:]
		}
	}))
	t.Cleanup(up.Close)
	r := newRigWith(t, rigOpts{cfg: func(c *gateway.Config) {
		for name := range c.Models {
			c.Models[name] = gateway.Model{Provider: &gateway.Provider{Kind: gateway.KindAnthropic, BaseURL: up.URL, Keys: []string{"sk-up"}}}
		}
	}})
	secret, _ := r.key(t, gateway.Spec{Name: "stops", Tier: "paid", QuotaTokens: 1000000})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	call := func(path, body string) []byte {
		t.Helper()
		res, err := r.postTo(ctx, path, secret, body)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %v %s", path, res.StatusCode, err, b)
		}
		return b
	}
	// events are a stream's data, each decoded into a fresh v
	events := func(b []byte, each func(data []byte)) {
		sc := bufio.NewScanner(strings.NewReader(string(b)))
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok && data != "[DONE]" {
				each([]byte(data))
			}
		}
	}
	tests := []struct{ stop, finish, status, incomplete string }{
		{"end_turn", "stop", "completed", ""},
		{"stop_sequence", "stop", "completed", ""},
		{"pause_turn", "stop", "completed", ""},
		{"max_tokens", "length", "incomplete", "max_output_tokens"},
		{"model_context_window_exceeded", "length", "incomplete", "max_output_tokens"},
		{"tool_use", "tool_calls", "completed", ""},
		{"refusal", "content_filter", "incomplete", "content_filter"},
	}
	type response struct {
		Status            string `json:"status"`
		IncompleteDetails *struct {
			Reason string `json:"reason"`
		} `json:"incomplete_details"`
	}
	reason := func(r response) string {
		if r.IncompleteDetails == nil {
			return ""
		}
		return r.IncompleteDetails.Reason
	}
	for _, tt := range tests {
		chat := fmt.Sprintf(`{"model":%q,"max_tokens":50,"messages":[{"role":"user","content":"stop=%s;"}]`, r.model, tt.stop)
		var whole struct {
			Choices []struct {
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
		}
		json.Unmarshal(call("/v1/chat/completions", chat+"}"), &whole)
		streamed := ""
		events(call("/v1/chat/completions", chat+`,"stream":true}`), func(data []byte) {
			var c struct {
				Choices []struct {
					FinishReason *string `json:"finish_reason"`
				} `json:"choices"`
			}
			if json.Unmarshal(data, &c) == nil && len(c.Choices) > 0 && c.Choices[0].FinishReason != nil {
				streamed = *c.Choices[0].FinishReason
			}
		})
		if len(whole.Choices) != 1 || whole.Choices[0].FinishReason != tt.finish || streamed != tt.finish {
			t.Errorf("%s on chat completions: whole %+v, streamed %q; want %q", tt.stop, whole.Choices, streamed, tt.finish)
		}

		resp := fmt.Sprintf(`{"model":%q,"max_output_tokens":50,"input":"stop=%s;"`, r.model, tt.stop)
		var rw response
		json.Unmarshal(call("/v1/responses", resp+"}"), &rw)
		var rs response
		events(call("/v1/responses", resp+`,"stream":true}`), func(data []byte) {
			var ev struct {
				Type     string   `json:"type"`
				Response response `json:"response"`
			}
			if json.Unmarshal(data, &ev) == nil && (ev.Type == "response.completed" || ev.Type == "response.incomplete") {
				rs = ev.Response
			}
		})
		if rw.Status != tt.status || reason(rw) != tt.incomplete || rs.Status != tt.status || reason(rs) != tt.incomplete {
			t.Errorf("%s on responses: whole %q/%q, streamed %q/%q; want %q/%q", tt.stop, rw.Status, reason(rw), rs.Status, reason(rs), tt.status, tt.incomplete)
		}

		msgs := fmt.Sprintf(`{"model":%q,"max_tokens":50,"messages":[{"role":"user","content":"stop=%s;"}]`, r.model, tt.stop)
		var mw struct {
			StopReason string `json:"stop_reason"`
		}
		json.Unmarshal(call("/v1/messages", msgs+"}"), &mw)
		ms := ""
		events(call("/v1/messages", msgs+`,"stream":true}`), func(data []byte) {
			var ev struct {
				Type  string `json:"type"`
				Delta struct {
					StopReason string `json:"stop_reason"`
				} `json:"delta"`
			}
			if json.Unmarshal(data, &ev) == nil && ev.Type == "message_delta" {
				ms = ev.Delta.StopReason
			}
		})
		if mw.StopReason != tt.stop || ms != tt.stop {
			t.Errorf("%s on messages: whole %q, streamed %q", tt.stop, mw.StopReason, ms)
		}
	}
}

// TestAnthropicStreamLineCapEveryAPI: an Anthropic stream that sends a
// line over Config.MaxLine is ended by the gateway with the same words
// on every API, each in its own error event.
func TestAnthropicStreamLineCapEveryAPI(t *testing.T) {
	t.Parallel()
	up := stalling(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "event: message_start\ndata: ")
		chunk := strings.Repeat("x", 32<<10)
		for r.Context().Err() == nil {
			if _, err := fmt.Fprint(w, chunk); err != nil {
				return
			}
		}
	})
	r := newRigWith(t, rigOpts{cfg: func(c *gateway.Config) {
		c.MaxLine = 64 << 10
		for name := range c.Models {
			c.Models[name] = gateway.Model{Provider: &gateway.Provider{Kind: gateway.KindAnthropic, BaseURL: strings.TrimSuffix(up, "/v1"), Keys: []string{"sk-up"}}}
		}
	}})
	secret, _ := r.key(t, gateway.Spec{Name: "cap", Tier: "paid", QuotaTokens: 100000})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range []struct{ path, body, event string }{
		{"/v1/chat/completions", `{"model":%q,"stream":true,"max_tokens":20,"messages":[{"role":"user","content":"hello"}]}`, `data: {"error":`},
		{"/v1/responses", `{"model":%q,"stream":true,"max_output_tokens":20,"input":"hello"}`, `"type":"error"`},
		{"/v1/messages", `{"model":%q,"stream":true,"max_tokens":20,"messages":[{"role":"user","content":"hello"}]}`, "event: error\n"},
	} {
		res, err := r.postTo(ctx, c.path, secret, fmt.Sprintf(c.body, r.model))
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		b := string(body)
		if err != nil || res.StatusCode != http.StatusOK || !strings.Contains(b, c.event) || !strings.Contains(b, "The provider's stream sent a line longer than 65536 bytes; the gateway ended it.") {
			t.Errorf("%s: %d %v, want an error event (%q) about the line cap: %.400q", c.path, res.StatusCode, err, c.event, b)
		}
	}
}
