package fakeopenai

// Tool calls in the chat completions mode: a request whose tool_choice
// forces a function ("required" forces the first tool, or {"type":
// "function","function":{"name":...}} that one) is answered, as OpenAI
// answers it, with one call of that function and finish_reason
// "tool_calls"; its arguments are a JSON object with every required
// property of the function's parameters set to a value of its type. The
// usage counts the arguments' tokens as output. Streamed, the call comes
// as tool_calls deltas: the id and name, then the arguments in pieces.
// A request with tools and tool_choice auto (or none) is answered with
// text, as before.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

type forcedCall struct {
	name string
	args string
}

// forcedTool reads the function a request's tool_choice forces, if any.
func forcedTool(body []byte) (forcedCall, bool) {
	var req struct {
		Tools []struct {
			Type     string `json:"type"`
			Function struct {
				Name       string          `json:"name"`
				Parameters json.RawMessage `json:"parameters"`
			} `json:"function"`
		} `json:"tools"`
		ToolChoice json.RawMessage `json:"tool_choice"`
	}
	if json.Unmarshal(body, &req) != nil || len(req.Tools) == 0 || len(req.ToolChoice) == 0 {
		return forcedCall{}, false
	}
	want := ""
	var s string
	if json.Unmarshal(req.ToolChoice, &s) == nil {
		if s != "required" {
			return forcedCall{}, false
		}
		want = req.Tools[0].Function.Name
	} else {
		var c struct {
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		if json.Unmarshal(req.ToolChoice, &c) != nil {
			return forcedCall{}, false
		}
		want = c.Function.Name
	}
	for _, t := range req.Tools {
		if t.Function.Name == want {
			args, _ := json.Marshal(exampleOf(t.Function.Parameters))
			return forcedCall{name: want, args: string(args)}, true
		}
	}
	return forcedCall{}, false
}

// exampleOf is a value of a JSON schema: an object's required properties
// set, a string "example", a number 1, a boolean true, an array empty.
func exampleOf(schema json.RawMessage) any {
	var s struct {
		Type       any                        `json:"type"`
		Properties map[string]json.RawMessage `json:"properties"`
		Required   []string                   `json:"required"`
		Enum       []any                      `json:"enum"`
	}
	json.Unmarshal(schema, &s)
	if len(s.Enum) > 0 {
		return s.Enum[0]
	}
	switch s.Type {
	case "string":
		return "example"
	case "integer", "number":
		return 1
	case "boolean":
		return true
	case "array":
		return []any{}
	}
	obj := map[string]any{}
	for _, name := range s.Required {
		obj[name] = exampleOf(s.Properties[name])
	}
	return obj
}

// replyToolCall answers a forced tool call, whole or streamed; it
// returns the output tokens.
func (s *Server) replyToolCall(w http.ResponseWriter, r *http.Request, model string, now time.Time, call forcedCall, prompt promptUsage, stream, withUsage bool) int64 {
	toks, _, _ := s.codec.Encode(call.args)
	out := int64(len(toks))
	id := fmt.Sprintf("call_fake%d", now.UnixNano())
	usage := prompt.with(out)
	if !stream {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{
			"id": fmt.Sprintf("chatcmpl-fake%d", now.UnixNano()), "object": "chat.completion", "created": now.Unix(), "model": model,
			"choices": []any{map[string]any{"index": 0, "finish_reason": "tool_calls", "logprobs": nil, "message": map[string]any{
				"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": id, "type": "function",
					"function": map[string]any{"name": call.name, "arguments": call.args}}}}}},
			"usage": usage,
		})
		return out
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	send := func(delta map[string]any, finish any, u any) {
		chunk := map[string]any{"id": fmt.Sprintf("chatcmpl-fake%d", now.UnixNano()), "object": "chat.completion.chunk", "created": now.Unix(), "model": model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": nil}}}
		if delta == nil {
			chunk["choices"] = []any{}
		}
		if withUsage {
			chunk["usage"] = u
		}
		b, _ := json.Marshal(chunk)
		fmt.Fprintf(w, "data: %s\n\n", b)
		if flusher != nil {
			flusher.Flush()
		}
	}
	send(map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"index": 0, "id": id, "type": "function",
		"function": map[string]any{"name": call.name, "arguments": ""}}}}, nil, nil)
	for i := 0; i < len(call.args); i += 10 {
		send(map[string]any{"tool_calls": []any{map[string]any{"index": 0, "function": map[string]any{"arguments": call.args[i:min(i+10, len(call.args))]}}}}, nil, nil)
	}
	send(map[string]any{}, "tool_calls", nil)
	if withUsage {
		send(nil, nil, usage)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	if flusher != nil {
		flusher.Flush()
	}
	return out
}
