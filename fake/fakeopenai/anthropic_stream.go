package fakeopenai

// The Anthropic mode's streaming (stream: true), as Anthropic's
// "Streaming Messages" documents it: server-sent events, each an event
// line and a data line, in this order: message_start (the message with
// empty content and the input usage), per content block
// content_block_start, ping, content_block_delta (text_delta, or
// input_json_delta for a tool's input), content_block_stop; then
// message_delta (the stop reason and the output usage) and
// message_stop. Rate limits and faults answer before the stream, with a
// status, as without streaming.

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// streamMessage writes a reply as Anthropic's events: block is the one
// content block (text, or tool_use whose input is the JSON text),
// pieces of toks the text deltas.
func (s *Server) streamMessage(w http.ResponseWriter, r *http.Request, id, model string, block map[string]any, text string, toks []uint, stop string, usage msgUsage, output int64) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	send := func(event string, data map[string]any) bool {
		data["type"] = event
		b, _ := json.Marshal(data)
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b); err != nil {
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return r.Context().Err() == nil
	}
	ok := send("message_start", map[string]any{"message": map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": usage.json(1)}})
	start := map[string]any{"type": "text", "text": ""}
	if block["type"] == "tool_use" {
		start = map[string]any{"type": "tool_use", "id": block["id"], "name": block["name"], "input": map[string]any{}}
	}
	ok = ok && send("content_block_start", map[string]any{"index": 0, "content_block": start}) && send("ping", map[string]any{})
	if block["type"] == "tool_use" {
		for i := 0; ok && i < len(text); i += 40 {
			ok = send("content_block_delta", map[string]any{"index": 0, "delta": map[string]any{"type": "input_json_delta", "partial_json": text[i:min(i+40, len(text))]}})
		}
	} else {
		for j := 0; ok && j < len(toks); j += 8 {
			piece, _ := s.codec.Decode(toks[j:min(j+8, len(toks))])
			ok = send("content_block_delta", map[string]any{"index": 0, "delta": map[string]any{"type": "text_delta", "text": piece}})
		}
	}
	_ = ok && send("content_block_stop", map[string]any{"index": 0}) &&
		send("message_delta", map[string]any{"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": map[string]any{"output_tokens": output}}) &&
		send("message_stop", map[string]any{})
}
