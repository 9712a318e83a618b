package fakeopenai

// Anthropic's Message Batches as its "Batch processing" guide and API
// reference ("Create a Message Batch", "Retrieve …", "Retrieve Message
// Batch results", "Cancel …", "Errors", "Rate limits") describe them:
//   - the Messages API's auth: x-api-key, anthropic-version;
//   - POST /v1/messages/batches {requests: [{custom_id, params}]}: at most
//     100,000 requests and 256 MB (413 request_too_large beyond);
//     custom_id ^[a-zA-Z0-9_-]{1,64}$, unique in the batch; params a
//     Messages request, validated asynchronously: a bad one ends as an
//     errored result (invalid_request_error), never a refused batch. A
//     batch that would put more of a model's requests in the processing
//     queue than the limit (Model.BatchRequests) is 429 rate_limit_error
//     with retry-after;
//   - the batch: {id, type "message_batch", processing_status in_progress
//     | canceling | ended, request_counts {processing, succeeded, errored,
//     canceled, expired} (every request counts as processing until the
//     batch ends), created_at, expires_at (24 hours on), ended_at,
//     cancel_initiated_at, archived_at, results_url once ended};
//   - GET …/{id}/results: JSONL {custom_id, result}, result {"type":
//     "succeeded", message} | {"type": "errored", error: {"type": "error",
//     error: {type, message}, request_id}} | {"type": "expired"} |
//     {"type": "canceled"};
//   - POST …/{id}/cancel: canceling until the requests in flight finish.
// Not confirmed from Anthropic's documents, and chosen here: the wording
// of the create errors (pydantic-style, as the Messages API's), a
// duplicate custom_id refused at create (400), results asked for before
// the batch ended (400), cancelling an ended batch (400), streaming
// asked for in a batch request (errored).

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Anthropic's limits of a batch.
const (
	messageBatchRequests = 100000
	messageBatchBytes    = 256 << 20
)

func (s *Server) messageBatches(w http.ResponseWriter, r *http.Request, id, op string) {
	key := r.Header.Get("x-api-key")
	if !s.keyOK(key) {
		writeAnthropicError(w, http.StatusUnauthorized, "authentication_error", "invalid x-api-key")
		return
	}
	if r.Header.Get("anthropic-version") == "" {
		writeAnthropicError(w, http.StatusBadRequest, "invalid_request_error", "anthropic-version: header is required")
		return
	}
	switch {
	case r.Method == http.MethodPost && id == "" && op == "":
		s.createMessageBatch(w, r, key)
	case r.Method == http.MethodGet && id != "" && op == "":
		s.messageBatch(w, r, key, id, "")
	case r.Method == http.MethodGet && id != "" && op == "results":
		s.messageBatch(w, r, key, id, "results")
	case r.Method == http.MethodPost && id != "" && op == "cancel":
		s.messageBatch(w, r, key, id, "cancel")
	default:
		writeAnthropicError(w, http.StatusNotFound, "not_found_error", "Not found: "+r.Method+" "+r.URL.Path)
	}
}

// createMessageBatch serves POST /v1/messages/batches.
func (s *Server) createMessageBatch(w http.ResponseWriter, r *http.Request, key string) {
	body, err := io.ReadAll(io.LimitReader(r.Body, messageBatchBytes+1))
	if len(body) > messageBatchBytes {
		writeAnthropicError(w, http.StatusRequestEntityTooLarge, "request_too_large", "Request exceeds the maximum allowed number of bytes.")
		return
	}
	// keys are matched exactly, as Anthropic's API does (encoding/json
	// would take "Custom_ID" for custom_id)
	var top map[string]json.RawMessage
	var requests []json.RawMessage
	if err != nil || json.Unmarshal(body, &top) != nil {
		writeAnthropicError(w, http.StatusBadRequest, "invalid_request_error", "There was an issue with the format or content of your request.")
		return
	}
	bad := func(format string, args ...any) {
		writeAnthropicError(w, http.StatusBadRequest, "invalid_request_error", fmt.Sprintf(format, args...))
	}
	switch raw, ok := top["requests"]; {
	case !ok:
		bad("requests: Field required")
		return
	case json.Unmarshal(raw, &requests) != nil:
		bad("requests: Input should be a valid list")
		return
	case len(requests) == 0:
		bad("requests: List should have at least 1 item after validation, not 0")
		return
	case len(requests) > messageBatchRequests:
		bad("requests: List should have at most %d items after validation, not %d", messageBatchRequests, len(requests))
		return
	}
	reqs := make([]*batchReq, 0, len(requests))
	perModel := map[string]int64{}
	var models []string
	seen := map[string]bool{}
	for i, raw := range requests {
		var item, params map[string]json.RawMessage
		var id string
		switch {
		case json.Unmarshal(raw, &item) != nil:
			bad("requests.%d: Input should be a valid dictionary", i)
			return
		case item["custom_id"] == nil:
			bad("requests.%d.custom_id: Field required", i)
			return
		case json.Unmarshal(item["custom_id"], &id) != nil:
			bad("requests.%d.custom_id: Input should be a valid string", i)
			return
		case !customID.MatchString(id):
			bad("requests.%d.custom_id: String should match pattern '^[a-zA-Z0-9_-]{1,64}$'", i)
			return
		case seen[id]:
			bad("requests.%d.custom_id: custom_id '%s' is not unique: each request in a batch needs its own", i, id)
			return
		case item["params"] == nil:
			bad("requests.%d.params: Field required", i)
			return
		case json.Unmarshal(item["params"], &params) != nil || params == nil:
			bad("requests.%d.params: Input should be a valid dictionary", i)
			return
		}
		seen[id] = true
		var model string
		json.Unmarshal(params["model"], &model)
		if _, ok := s.models[model]; ok {
			if perModel[model] == 0 {
				models = append(models, model)
			}
			perModel[model]++
		} else {
			model = ""
		}
		reqs = append(reqs, &batchReq{customID: id, model: model, body: item["params"]})
	}
	st := &s.batches
	st.mu.Lock()
	defer st.mu.Unlock()
	now := s.cfg.Now()
	waiting, next := map[string]int64{}, map[string]time.Time{}
	s.pendingBatches(key, now, func(b *fakeBatch) {
		if b.dialect != dialectAnthropic {
			return
		}
		for _, q := range b.reqs {
			if !q.answered && q.model != "" {
				waiting[q.model]++
				if !q.never && (next[q.model].IsZero() || q.at.Before(next[q.model])) {
					next[q.model] = q.at
				}
			}
		}
	})
	for _, name := range models {
		if limit := s.models[name].BatchRequests; limit > 0 && waiting[name]+perModel[name] > limit {
			s.mu.Lock()
			s.batchStatsOf(name).QueueFull++
			s.mu.Unlock()
			wait := time.Minute // until a request of the model leaves the queue
			if t := next[name]; !t.IsZero() {
				wait = t.Sub(now)
			}
			w.Header().Set("retry-after", strconv.FormatInt(max(1, int64(math.Ceil(wait.Seconds()))), 10))
			writeAnthropicError(w, http.StatusTooManyRequests, "rate_limit_error",
				fmt.Sprintf("This batch would put %d requests of %s in the processing queue, over your organization's limit of %d. Please try again once some batches have ended.",
					waiting[name]+perModel[name], name, limit))
			return
		}
	}
	b := &fakeBatch{id: st.nextID("msgbatch_fake"), key: key, dialect: dialectAnthropic, created: now, expires: now.Add(s.batchWindow()),
		state: stateInProgress, reqs: reqs}
	s.schedule(b, models)
	if st.batches == nil {
		st.batches = map[string]*fakeBatch{}
	}
	st.batches[b.id] = b
	s.countBatch(b, func(st *BatchStats) { st.Submitted++ })
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(anthropicBatchObject(b, r))
}

// messageBatch serves GET /v1/messages/batches/{id}, its results and
// its cancel.
func (s *Server) messageBatch(w http.ResponseWriter, r *http.Request, key, id, op string) {
	st := &s.batches
	st.mu.Lock()
	defer st.mu.Unlock()
	b, ok := st.batches[id]
	if !ok || b.key != key || b.dialect != dialectAnthropic {
		writeAnthropicError(w, http.StatusNotFound, "not_found_error", "No Message Batch with id "+id)
		return
	}
	now := s.cfg.Now()
	s.advance(b, now)
	switch op {
	case "results":
		if !b.over() {
			writeAnthropicError(w, http.StatusBadRequest, "invalid_request_error", fmt.Sprintf("Message Batch %s has not ended: its results are not available yet.", id))
			return
		}
		w.Header().Set("Content-Type", "application/x-jsonl")
		enc := json.NewEncoder(w)
		for _, q := range b.reqs {
			result := json.RawMessage(q.result)
			switch {
			case q.answered:
			case q.final == stateExpired:
				result = json.RawMessage(`{"type":"expired"}`)
			default:
				result = json.RawMessage(`{"type":"canceled"}`)
			}
			enc.Encode(map[string]any{"custom_id": q.customID, "result": result})
		}
		return
	case "cancel":
		if b.over() && b.cancelled.IsZero() {
			writeAnthropicError(w, http.StatusBadRequest, "invalid_request_error", fmt.Sprintf("Message Batch %s has ended and can no longer be canceled.", id))
			return
		}
		cancelBatch(b, now)
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(anthropicBatchObject(b, r))
}

// anthropicBatchObject is a batch as Anthropic reports it.
func anthropicBatchObject(b *fakeBatch, r *http.Request) map[string]any {
	rfc := func(t time.Time) any {
		if t.IsZero() {
			return nil
		}
		return t.UTC().Format(time.RFC3339Nano)
	}
	counts := map[string]int{"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
	status := "in_progress"
	switch {
	case !b.over():
		counts["processing"] = len(b.reqs)
		if !b.cancelled.IsZero() {
			status = "canceling"
		}
	default:
		status = "ended"
		for _, r := range b.reqs {
			switch {
			case r.answered && r.status == http.StatusOK:
				counts["succeeded"]++
			case r.answered:
				counts["errored"]++
			case r.final == stateExpired:
				counts["expired"]++
			default:
				counts["canceled"]++
			}
		}
	}
	obj := map[string]any{"id": b.id, "type": "message_batch", "processing_status": status, "request_counts": counts,
		"created_at": rfc(b.created), "expires_at": rfc(b.expires), "ended_at": nil, "archived_at": nil,
		"cancel_initiated_at": rfc(b.cancelled), "results_url": nil}
	if b.over() {
		obj["ended_at"] = rfc(b.ended)
		obj["results_url"] = "http://" + r.Host + "/v1/messages/batches/" + b.id + "/results"
	}
	return obj
}

// erroredResult is an errored batch result.
func erroredResult(typ, msg string) []byte {
	b, _ := json.Marshal(map[string]any{"type": "errored", "error": map[string]any{"type": "error",
		"error": map[string]any{"type": typ, "message": msg}, "request_id": fmt.Sprintf("req_fake%016x", anthropicRequests.Add(1))}})
	return b
}

// batchMessage answers one request of a Message Batch as messages
// answers a Messages request (its checks, the fake model, usage), without
// the synchronous limits, faults and latency; fault answers api_error.
// It returns the HTTP status the synchronous call would have had and the
// result object.
func (s *Server) batchMessage(r *batchReq, fault bool) (int, []byte) {
	if fault {
		return http.StatusInternalServerError, erroredResult("api_error", "Internal server error")
	}
	req, chat, tool, prompt, status, typ, msg := s.batchPrompt(r.body)
	if status != 0 {
		return status, erroredResult(typ, msg)
	}
	m, maxOut := s.models[req.Model], *req.MaxTokens
	s.mu.Lock()
	s.statsOf(m.Name).formats["tool:"+strconv.FormatBool(tool != "")]++
	s.mu.Unlock()
	text, finish := s.answer(chat)
	if obj := map[string]any(nil); tool != "" && json.Unmarshal([]byte(text), &obj) != nil {
		b, _ := json.Marshal(exampleOf(chat.ResponseFormat.JSONSchema.Schema)) // a prompt other than a review (tools.go)
		text = string(b)
	}
	toks, _, _ := s.codec.Encode(text)
	if int64(len(toks)) > maxOut {
		text, _ = s.codec.Decode(toks[:maxOut])
		toks = toks[:maxOut]
		finish = "length"
	}
	stop := "end_turn"
	block := map[string]any{"type": "text", "text": text}
	var input map[string]any
	switch {
	case finish == "length":
		stop = "max_tokens"
	case tool != "" && json.Unmarshal([]byte(text), &input) == nil:
		stop = "tool_use"
		block = map[string]any{"type": "tool_use", "id": fmt.Sprintf("toolu_fake%d", r.at.UnixNano()), "name": tool, "input": input}
	}
	s.countAnswer(r, chat, m.Name, http.StatusOK, int64(len(toks)))
	s.mu.Lock()
	s.statsOf(m.Name).billed(LaneBatch, prompt, 0, 0, int64(len(toks)))
	s.mu.Unlock()
	out, _ := json.Marshal(map[string]any{"type": "succeeded", "message": map[string]any{
		"id": fmt.Sprintf("msg_fake%d", r.at.UnixNano()), "type": "message", "role": "assistant", "model": m.Name,
		"content": []any{block}, "stop_reason": stop, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": prompt, "output_tokens": len(toks)},
	}})
	return http.StatusOK, out
}

// batchPrompt reads a batch request's params as messages reads a
// Messages request: its checks, in their order, and the conversation in
// the OpenAI shape for the fake model (chat), the tool a tool_choice
// forces, and the prompt's tokens. A refusal is status, typ and msg:
// what the synchronous call would have answered.
// It repeats messages' reading of a request (the two should share one
// reader, and with it whatever prompt cache the Messages mode keeps).
func (s *Server) batchPrompt(params []byte) (req msgRequest, chat chatRequest, tool string, prompt int64, status int, typ, msg string) {
	bad := func(st int, t, m string) (msgRequest, chatRequest, string, int64, int, string, string) {
		return req, chat, "", 0, st, t, m
	}
	if json.Unmarshal(params, &req) != nil {
		return bad(http.StatusBadRequest, "invalid_request_error", "There was an issue with the format or content of your request.")
	}
	m, ok := s.models[req.Model]
	switch {
	case !ok:
		return bad(http.StatusNotFound, "not_found_error", "model: "+req.Model)
	case req.MaxTokens == nil || *req.MaxTokens < 1:
		return bad(http.StatusBadRequest, "invalid_request_error", "max_tokens: Field required")
	case req.Stream:
		return bad(http.StatusBadRequest, "invalid_request_error", "stream: streaming is not supported in a Message Batch")
	case len(req.Messages) == 0 || req.Messages[0].Role != "user":
		return bad(http.StatusBadRequest, "invalid_request_error", "messages: the first message must use the \"user\" role")
	}
	add := func(role, text string) {
		chat.Messages = append(chat.Messages, struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		}{role, text})
	}
	system, ok := paramsText(req.System)
	if !ok {
		return bad(http.StatusBadRequest, "invalid_request_error", "system: Input should be a valid string or list of text blocks")
	}
	if system != "" {
		add("system", system)
	}
	for i, msg := range req.Messages {
		if msg.Role != "user" && msg.Role != "assistant" {
			return bad(http.StatusBadRequest, "invalid_request_error", fmt.Sprintf("messages.%d.role: Input should be 'user' or 'assistant'", i))
		}
		blocks, ok := contentBlocks(msg.Content)
		if !ok {
			return bad(http.StatusBadRequest, "invalid_request_error", fmt.Sprintf("messages.%d.content: unsupported content blocks", i))
		}
		for _, text := range turnTexts(blocks) { // a task block read as its task, as the Messages mode reads it
			add(msg.Role, text)
		}
	}
	if tc := req.ToolChoice; tc != nil && tc.Type == "any" && len(req.Tools) > 0 {
		tc.Type, tc.Name = "tool", req.Tools[0].Name
	}
	if tc := req.ToolChoice; tc != nil && tc.Type == "tool" {
		for _, t := range req.Tools {
			if t.Name == tc.Name {
				tool = t.Name
				chat.ResponseFormat = &responseFormat{Type: "json_schema", JSONSchema: &struct {
					Name   string          `json:"name"`
					Schema json.RawMessage `json:"schema"`
					Strict bool            `json:"strict"`
				}{Name: t.Name, Schema: t.InputSchema}}
			}
		}
		if tool == "" {
			return bad(http.StatusBadRequest, "invalid_request_error", "tool_choice: tool "+tc.Name+" not found in tools")
		}
	}
	for _, msg := range chat.Messages {
		n, _ := s.codec.Count(msg.Content)
		prompt += int64(n) + 3
	}
	if chat.ResponseFormat != nil {
		n, _ := s.codec.Count(string(chat.ResponseFormat.JSONSchema.Schema))
		prompt += int64(n) + toolUseTokens
	}
	if prompt > m.ContextTokens {
		return bad(http.StatusBadRequest, "invalid_request_error", fmt.Sprintf("prompt is too long: %d tokens > %d maximum", prompt, m.ContextTokens))
	}
	return req, chat, tool, prompt, 0, "", ""
}

// paramsText reads content that is a string or a list of blocks as the
// Messages mode does: text, a tool call in the history (its name and
// input), a tool result's content; thinking counts nothing; any other
// block is refused.
func paramsText(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 {
		return "", true
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, true
	}
	var blocks []struct {
		Type    string          `json:"type"`
		Text    string          `json:"text"`
		Name    string          `json:"name"`
		Input   json.RawMessage `json:"input"`
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(raw, &blocks) != nil {
		return "", false
	}
	var b strings.Builder
	for _, bl := range blocks {
		switch bl.Type {
		case "text":
			b.WriteString(bl.Text)
		case "tool_use":
			b.WriteString(bl.Name + string(bl.Input))
		case "tool_result":
			text, ok := paramsText(bl.Content)
			if !ok {
				return "", false
			}
			b.WriteString(text)
		case "thinking", "redacted_thinking":
		default:
			return "", false
		}
	}
	return b.String(), true
}
