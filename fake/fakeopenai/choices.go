package fakeopenai

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"time"
)

// knownArguments are the top-level arguments OpenAI's chat completions
// take; it refuses any other (a case variant included) with 400
// "Unrecognized request argument supplied".
var knownArguments = map[string]bool{
	"model": true, "messages": true, "max_tokens": true, "max_completion_tokens": true, "n": true,
	"stream": true, "stream_options": true, "temperature": true, "top_p": true, "stop": true,
	"presence_penalty": true, "frequency_penalty": true, "logit_bias": true, "logprobs": true,
	"top_logprobs": true, "user": true, "seed": true, "tools": true, "tool_choice": true,
	"parallel_tool_calls": true, "response_format": true, "functions": true, "function_call": true,
	"service_tier": true, "store": true, "metadata": true, "reasoning_effort": true, "modalities": true,
	"audio": true, "prediction": true, "web_search_options": true, "verbosity": true,
	"safety_identifier": true, "prompt_cache_key": true,
}

// unrecognizedArgument returns OpenAI's message for the first top-level
// argument it does not take, or "".
func unrecognizedArgument(body []byte) string {
	var raw map[string]json.RawMessage
	if json.Unmarshal(body, &raw) != nil {
		return ""
	}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !knownArguments[k] {
			return "Unrecognized request argument supplied: " + k
		}
	}
	return ""
}

// choiceCount reads n (1 to 128, default 1) as OpenAI does; a bad one
// gives its message.
func choiceCount(body []byte) (int64, string) {
	var req struct {
		N *int64 `json:"n"`
	}
	json.Unmarshal(body, &req)
	switch {
	case req.N == nil:
		return 1, ""
	case *req.N < 1:
		return 0, fmt.Sprintf("%d is less than the minimum of 1 - 'n'", *req.N)
	case *req.N > 128:
		return 0, fmt.Sprintf("%d is greater than the maximum of 128 - 'n'", *req.N)
	}
	return *req.N, ""
}

// choices are n copies of one answer (the fake's answers do not vary).
func choices(n int64, text, finish string) []any {
	out := make([]any, 0, n)
	for i := range n {
		out = append(out, map[string]any{"index": i, "message": map[string]any{"role": "assistant", "content": text}, "finish_reason": finish, "logprobs": nil})
	}
	return out
}

// streamChoices answers as OpenAI streams: server-sent events of
// chat.completion.chunk — for each of the n choices (by its index) the
// role first, the content in pieces, the finish reason — then (with
// stream_options.include_usage) a last chunk with no choices and the
// usage of them all, and "data: [DONE]". With include_usage every earlier
// chunk carries "usage": null.
func (s *Server) streamChoices(w http.ResponseWriter, r *http.Request, n int64, model string, now time.Time, text, finish string, toks []uint, prompt promptUsage, withUsage bool) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	id := fmt.Sprintf("chatcmpl-fake%d", now.UnixNano())
	send := func(choices []any, usage any) bool {
		chunk := map[string]any{"id": id, "object": "chat.completion.chunk", "created": now.Unix(), "model": model, "choices": choices}
		if withUsage {
			chunk["usage"] = usage
		}
		b, _ := json.Marshal(chunk)
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return r.Context().Err() == nil
	}
	for i := range n {
		delta := func(d map[string]any, fin any) []any {
			return []any{map[string]any{"index": i, "delta": d, "finish_reason": fin, "logprobs": nil}}
		}
		if !send(delta(map[string]any{"role": "assistant", "content": ""}, nil), nil) {
			return
		}
		for j := 0; j < len(toks); j += 8 {
			piece, _ := s.codec.Decode(toks[j:min(j+8, len(toks))])
			if !send(delta(map[string]any{"content": piece}, nil), nil) {
				return
			}
		}
		if !send(delta(map[string]any{}, finish), nil) {
			return
		}
	}
	completion := n * int64(len(toks))
	if withUsage && !send([]any{}, prompt.with(completion)) {
		return
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	if flusher != nil {
		flusher.Flush()
	}
}

// promptUsage is a request's prompt tokens and the part of them the
// prompt cache served.
type promptUsage struct{ tokens, cached int64 }

func usageOf(tokens, cached int64) promptUsage { return promptUsage{tokens, cached} }

// with is the usage object of a reply of completion tokens, as OpenAI
// writes it (prompt_tokens_details always present).
func (p promptUsage) with(completion int64) map[string]any {
	return map[string]any{"prompt_tokens": p.tokens, "completion_tokens": completion, "total_tokens": p.tokens + completion,
		"prompt_tokens_details": map[string]any{"cached_tokens": p.cached, "audio_tokens": 0}}
}
