package fakeopenai

// The Anthropic mode: POST /v1/messages as Anthropic's Messages API
// documents it (docs.anthropic.com: "Messages", "Errors", "Rate limits"):
//   - auth by the x-api-key header (401 authentication_error otherwise)
//     and a required anthropic-version header (400 without it);
//   - request: model, max_tokens (required), system (a string or text
//     blocks), messages (role user|assistant, content a string or
//     blocks, the first a user turn), tools with input_schema and
//     tool_choice {"type":"tool","name":...};
//   - reply: {"type":"message","role":"assistant","content":[blocks],
//     "stop_reason":"end_turn"|"max_tokens"|"tool_use",
//     "usage":{"input_tokens","output_tokens","cache_creation_input_tokens",
//     "cache_read_input_tokens","cache_creation":{...}}};
//   - prompt caching by cache_control breakpoints (anthropic_cache.go);
//   - stream: true answers with the Messages events (anthropic_stream.go);
//   - errors: {"type":"error","error":{"type":...,"message":...},"request_id":...}, 429
//     rate_limit_error with retry-after (seconds), 529 overloaded_error;
//   - limits per model and key, a continuously refilled bucket per
//     dimension: requests, input tokens (estimated at admission) and
//     output tokens (max_tokens at admission) per minute, reported on
//     every reply in anthropic-ratelimit-{requests,tokens,input-tokens,
//     output-tokens}-{limit,remaining,reset}, reset an RFC 3339 time and
//     tokens-* the most restrictive of input and output.
// The fake charges the input limit ceil(chars/4) of the prompt's blocks
// that its cache does not serve, and the tool-use prompt when it is among
// them (cache reads do not count, as on most of Anthropic's models;
// Model.CacheReadsCount), and the output limit the whole max_tokens, and
// never refunds: stricter than Anthropic, which adjusts both estimates
// to what was used.

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// toolUseTokens is the input Anthropic adds to a request with tools (its
// tool-use system prompt; ratelimit.AnthropicToolUseTokens).
const toolUseTokens = 346

// msgBucket is one (model, key)'s three limiters in the Anthropic mode,
// their levels scaled by the period in µs so the refill is exact (as the
// OpenAI mode's bucket).
type msgBucket struct {
	req, in, out int64
	last         time.Time
}

// levels returns the bucket's levels in requests and tokens.
func (b *msgBucket) levels(per time.Duration) (req, in, out float64) {
	p := float64(per.Microseconds())
	return float64(b.req) / p, float64(b.in) / p, float64(b.out) / p
}

type msgRequest struct {
	Model     string          `json:"model"`
	MaxTokens *int64          `json:"max_tokens"`
	System    json.RawMessage `json:"system"`
	Messages  []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Tools []struct {
		Name         string          `json:"name"`
		Description  string          `json:"description"`
		InputSchema  json.RawMessage `json:"input_schema"`
		CacheControl *cacheControl   `json:"cache_control"`
	} `json:"tools"`
	ToolChoice *struct {
		Type string `json:"type"`
		Name string `json:"name"`
	} `json:"tool_choice"`
	Stream bool `json:"stream"`
	// CacheControl asks for automatic caching (anthropic_cache.go).
	CacheControl *cacheControl `json:"cache_control"`
}

// msgBlock is a content block as the fake reads it: the text it counts
// and its cache_control.
type msgBlock struct {
	typ   string
	text  string
	cache *cacheControl
}

// contentBlocks reads content that is a string or a list of blocks.
func contentBlocks(raw json.RawMessage) ([]msgBlock, bool) {
	if len(raw) == 0 {
		return nil, true
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []msgBlock{{typ: "text", text: s}}, true
	}
	var blocks []struct {
		Type         string          `json:"type"`
		Text         string          `json:"text"`
		Name         string          `json:"name"`
		Input        json.RawMessage `json:"input"`
		Content      json.RawMessage `json:"content"`
		CacheControl *cacheControl   `json:"cache_control"`
	}
	if json.Unmarshal(raw, &blocks) != nil {
		return nil, false
	}
	out := make([]msgBlock, 0, len(blocks))
	for _, bl := range blocks {
		b := msgBlock{typ: bl.Type, cache: bl.CacheControl}
		switch bl.Type {
		case "text":
			b.text = bl.Text
		case "tool_use": // a call in the history, as its name and input
			b.text = bl.Name + string(bl.Input)
		case "tool_result":
			inner, ok := contentBlocks(bl.Content)
			if !ok {
				return nil, false
			}
			b.text = joinText(inner, "")
		case "thinking", "redacted_thinking":
		default:
			return nil, false
		}
		out = append(out, b)
	}
	return out, true
}

// turnTexts are a message's blocks as the fake model reads them: each
// block with text a message of its own (prq's context and its task
// come as two blocks of one user message), at least one.
func turnTexts(blocks []msgBlock) []string {
	var out []string
	for _, b := range blocks {
		if b.text != "" {
			out = append(out, b.text)
		}
	}
	if len(out) == 0 {
		out = []string{""}
	}
	return out
}

// joinText is the blocks' text joined by sep.
func joinText(blocks []msgBlock, sep string) string {
	texts := make([]string, len(blocks))
	for i, b := range blocks {
		texts[i] = b.text
	}
	return strings.Join(texts, sep)
}

func writeAnthropicError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg},
		"request_id": fmt.Sprintf("req_fake%016x", anthropicRequests.Add(1))})
}

// anthropicRequests numbers the fake's Anthropic error answers' request
// ids, which Anthropic's error bodies carry.
var anthropicRequests atomic.Int64

func (s *Server) messages(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("x-api-key")
	if !s.keyOK(key) {
		writeAnthropicError(w, http.StatusUnauthorized, "authentication_error", "invalid x-api-key")
		return
	}
	if r.Header.Get("anthropic-version") == "" {
		writeAnthropicError(w, http.StatusBadRequest, "invalid_request_error", "anthropic-version: header is required")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 32<<20))
	var req msgRequest
	if err != nil || json.Unmarshal(body, &req) != nil {
		writeAnthropicError(w, http.StatusBadRequest, "invalid_request_error", "There was an issue with the format or content of your request.")
		return
	}
	m, ok := s.models[req.Model]
	if !ok {
		writeAnthropicError(w, http.StatusNotFound, "not_found_error", "model: "+req.Model)
		return
	}
	if req.MaxTokens == nil || *req.MaxTokens < 1 {
		writeAnthropicError(w, http.StatusBadRequest, "invalid_request_error", "max_tokens: Field required")
		return
	}
	if len(req.Messages) == 0 || req.Messages[0].Role != "user" {
		writeAnthropicError(w, http.StatusBadRequest, "invalid_request_error", "messages: the first message must use the \"user\" role")
		return
	}
	tool, choice := "", ""
	if tc := req.ToolChoice; tc != nil {
		choice = tc.Type + "\x00" + tc.Name
		if tc.Type == "any" && len(req.Tools) > 0 { // any: the first tool
			tc.Type, tc.Name = "tool", req.Tools[0].Name
		}
	}
	var schema json.RawMessage
	if tc := req.ToolChoice; tc != nil && tc.Type == "tool" {
		for _, t := range req.Tools {
			if t.Name == tc.Name {
				tool, schema = t.Name, t.InputSchema
			}
		}
		if tool == "" {
			writeAnthropicError(w, http.StatusBadRequest, "invalid_request_error", "tool_choice: tool "+tc.Name+" not found in tools")
			return
		}
	}
	// the prompt's blocks in the order Anthropic caches them (tools,
	// system, messages; anthropic_cache.go), and the same conversation in
	// the OpenAI shape for the fake model
	p := newPromptHasher(key, m.Name)
	count := func(text string) int64 {
		n, _ := s.codec.Count(text)
		return int64(n)
	}
	block := func(path, text string, cc *cacheControl, cacheable bool) (promptBlock, bool) {
		b := promptBlock{path: path, tokens: count(text), chars: utf8.RuneCountInString(text), cacheable: cacheable}
		if cc != nil {
			var msg string
			if b.ttl, msg = cc.lifetime(path); msg != "" {
				writeAnthropicError(w, http.StatusBadRequest, "invalid_request_error", msg)
				return b, false
			}
		}
		return b, true
	}
	for i, t := range req.Tools {
		b, ok := block(fmt.Sprintf("tools.%d", i), t.Description+string(t.InputSchema), t.CacheControl, true)
		if !ok {
			return
		}
		if i == 0 && tool != "" {
			// Anthropic's tool-use system prompt is input too (313 to 346
			// tokens by tool_choice and model): the larger, as a real
			// account's input limit would count it
			b.tokens += toolUseTokens
			b.extra = toolUseTokens
		}
		p.add(b, "tool", t.Name, t.Description, string(t.InputSchema))
	}
	var chat chatRequest
	add := func(role, text string) {
		chat.Messages = append(chat.Messages, struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		}{role, text})
	}
	system, ok := contentBlocks(req.System)
	if !ok {
		writeAnthropicError(w, http.StatusBadRequest, "invalid_request_error", "system: Input should be a valid string or list of text blocks")
		return
	}
	for i, bl := range system {
		b, ok := block(fmt.Sprintf("system.%d", i), bl.text, bl.cache, bl.text != "")
		if !ok {
			return
		}
		if i == 0 {
			b.tokens += 3 // the system prompt's framing
		}
		p.add(b, "system", bl.typ, bl.text)
	}
	if text := joinText(system, "\n"); text != "" {
		add("system", text)
	}
	p.write("tool_choice", choice)
	for i, msg := range req.Messages {
		if msg.Role != "user" && msg.Role != "assistant" {
			writeAnthropicError(w, http.StatusBadRequest, "invalid_request_error", fmt.Sprintf("messages.%d.role: Input should be 'user' or 'assistant'", i))
			return
		}
		blocks, ok := contentBlocks(msg.Content)
		if !ok {
			writeAnthropicError(w, http.StatusBadRequest, "invalid_request_error", fmt.Sprintf("messages.%d.content: unsupported content blocks", i))
			return
		}
		if len(blocks) == 0 {
			blocks = []msgBlock{{typ: "text"}} // a position for the message's framing
		}
		p.write("message", msg.Role)
		for j, bl := range blocks {
			b, ok := block(fmt.Sprintf("messages.%d.content.%d", i, j), bl.text, bl.cache,
				bl.text != "" && bl.typ != "thinking" && bl.typ != "redacted_thinking")
			if !ok {
				return
			}
			if j == 0 {
				b.tokens += 3 // the message's framing
			}
			p.add(b, bl.typ, bl.text)
		}
		for _, text := range turnTexts(blocks) {
			add(msg.Role, text)
		}
	}
	if msg := breakpoints(p.blocks, req.CacheControl); msg != "" {
		writeAnthropicError(w, http.StatusBadRequest, "invalid_request_error", msg)
		return
	}
	if tool != "" {
		chat.ResponseFormat = &responseFormat{Type: "json_schema", JSONSchema: &struct {
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
			Strict bool            `json:"strict"`
		}{Name: tool, Schema: schema}}
	}
	maxOut := *req.MaxTokens
	prompt := int64(0)
	for _, b := range p.blocks {
		prompt += b.tokens
	}
	itpm, otpm := m.ITPM, m.OTPM
	if itpm == 0 {
		itpm = m.TPM
	}
	if otpm == 0 {
		otpm = m.TPM
	}

	s.mu.Lock()
	st := s.statsOf(m.Name)
	st.Requests++
	st.formats["tool:"+strconv.FormatBool(tool != "")]++
	if prompt > m.ContextTokens {
		s.mu.Unlock()
		writeAnthropicError(w, http.StatusBadRequest, "invalid_request_error", fmt.Sprintf("prompt is too long: %d tokens > %d maximum", prompt, m.ContextTokens))
		return
	}
	now := s.cfg.Now()
	pc := s.lookupCache(p.blocks, m.CacheMinTokens, now)
	in := charge(p.blocks, pc, m.CacheReadsCount)
	b := s.msgBucketOf(m, itpm, otpm, key, now)
	perUS := s.cfg.Period.Microseconds()
	if b.req < perUS || b.in < in*perUS || b.out < maxOut*perUS {
		st.RateLimited++
		per := s.cfg.Period
		req, inLeft, outLeft := b.levels(per)
		wait := time.Duration(0)
		need := func(have float64, want, limit int64) {
			if d := time.Duration((float64(want) - have) / float64(limit) * float64(per)); d > wait {
				wait = d
			}
		}
		need(req, 1, m.RPM)
		need(inLeft, in, itpm)
		need(outLeft, maxOut, otpm)
		s.setMsgHeaders(w.Header(), m, itpm, otpm, b, now)
		s.mu.Unlock()
		w.Header().Set("retry-after", strconv.FormatInt(int64(math.Ceil(wait.Seconds())), 10))
		writeAnthropicError(w, http.StatusTooManyRequests, "rate_limit_error",
			"This request would exceed your organization's rate limit. Please try again later.")
		return
	}
	b.req -= perUS
	b.in -= in * perUS
	b.out -= maxOut * perUS
	st.admit(now, in+maxOut, s.cfg.Period)
	if s.cfg.Record {
		s.recorded[m.Name] = append(s.recorded[m.Name], Admission{At: now, Cost: in + maxOut, Input: in, Output: maxOut, Key: KeyLabel(key), Prompt: prompt})
	}
	s.setMsgHeaders(w.Header(), m, itpm, otpm, b, now)
	f := s.faults
	roll := s.rng.Float64()
	latency := time.Duration(float64(m.Latency+time.Duration((s.rng.Float64()*2-1)*float64(m.Jitter))) * s.cfg.LatencyScale)
	if faulted := (f.TooMany > 0 && roll < f.TooMany) || (roll-f.TooMany >= 0 && roll-f.TooMany < f.ServerError+f.Timeout); !faulted {
		s.storeCache(p.blocks, pc, now, now.Add(max(latency, 0)))
		st.PromptTokens += prompt
		st.CachedTokens += pc.usage.read
		st.CacheWriteTokens += pc.usage.write5m + pc.usage.write1h
	}
	s.mu.Unlock()

	if f.TooMany > 0 && roll < f.TooMany {
		s.countFault(m.Name)
		w.Header().Set("retry-after", "1")
		writeAnthropicError(w, http.StatusTooManyRequests, "rate_limit_error", "This request would exceed your organization's rate limit. Please try again later.")
		return
	}
	roll -= f.TooMany
	if roll >= 0 && roll < f.ServerError {
		s.countFault(m.Name)
		writeAnthropicError(w, 529, "overloaded_error", "Overloaded")
		return
	}
	roll -= f.ServerError
	if roll >= 0 && roll < f.Timeout {
		s.hang(r, m.Name, f)
		writeAnthropicError(w, http.StatusGatewayTimeout, "api_error", "Gateway timeout.")
		return
	}
	if latency > 0 {
		select {
		case <-r.Context().Done():
			return
		case <-time.After(latency):
		}
	}
	text, finish := s.answer(chat)
	if obj := map[string]any(nil); tool != "" && json.Unmarshal([]byte(text), &obj) != nil {
		// a prompt other than a review: the tool's schema's example (tools.go)
		b, _ := json.Marshal(exampleOf(chat.ResponseFormat.JSONSchema.Schema))
		text = string(b)
	}
	toks, _, _ := s.codec.Encode(text)
	if int64(len(toks)) > maxOut {
		text, _ = s.codec.Decode(toks[:maxOut])
		toks = toks[:maxOut]
		finish = "length"
	}
	s.mu.Lock()
	st.CompletionToks += int64(len(toks))
	st.billed(LaneSync, prompt, pc.usage.read, pc.usage.write5m+pc.usage.write1h, int64(len(toks)))
	s.mu.Unlock()
	stop := "end_turn"
	reply := map[string]any{"type": "text", "text": text}
	var input map[string]any
	switch {
	case finish == "length":
		stop = "max_tokens"
	case tool != "" && json.Unmarshal([]byte(text), &input) == nil:
		stop = "tool_use"
		reply = map[string]any{"type": "tool_use", "id": fmt.Sprintf("toolu_fake%d", now.UnixNano()), "name": tool, "input": input}
	}
	if req.Stream {
		s.streamMessage(w, r, fmt.Sprintf("msg_fake%d", now.UnixNano()), m.Name, reply, text, toks, stop, pc.usage, int64(len(toks)))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"id": fmt.Sprintf("msg_fake%d", now.UnixNano()), "type": "message", "role": "assistant", "model": m.Name,
		"content": []any{reply}, "stop_reason": stop, "stop_sequence": nil,
		"usage": pc.usage.json(int64(len(toks))),
	})
}

// msgBucketOf refills and returns a (model, key)'s Anthropic limiters.
// Caller holds mu.
func (s *Server) msgBucketOf(m Model, itpm, otpm int64, key string, now time.Time) *msgBucket {
	k := m.Name + "\x00" + key
	per := s.cfg.Period.Microseconds()
	b, ok := s.msgBuckets[k]
	if !ok {
		b = &msgBucket{req: m.RPM * per, in: itpm * per, out: otpm * per, last: now}
		s.msgBuckets[k] = b
	}
	if el := now.Sub(b.last).Microseconds(); el > 0 {
		b.req = min(m.RPM*per, b.req+el*m.RPM)
		b.in = min(itpm*per, b.in+el*itpm)
		b.out = min(otpm*per, b.out+el*otpm)
		b.last = b.last.Add(time.Duration(el) * time.Microsecond)
	}
	return b
}

// setMsgHeaders writes the anthropic-ratelimit-* headers: limit,
// remaining, and reset as the RFC 3339 time the dimension is full again.
func (s *Server) setMsgHeaders(h http.Header, m Model, itpm, otpm int64, b *msgBucket, now time.Time) {
	set := func(dim string, limit int64, have float64) {
		h.Set("anthropic-ratelimit-"+dim+"-limit", strconv.FormatInt(limit, 10))
		h.Set("anthropic-ratelimit-"+dim+"-remaining", strconv.FormatInt(int64(math.Max(0, have)), 10))
		full := time.Duration((float64(limit) - have) / float64(limit) * float64(s.cfg.Period))
		h.Set("anthropic-ratelimit-"+dim+"-reset", now.Add(full).UTC().Format(time.RFC3339Nano))
	}
	req, in, out := b.levels(s.cfg.Period)
	set("requests", m.RPM, req)
	set("input-tokens", itpm, in)
	set("output-tokens", otpm, out)
	// tokens-*: the most restrictive of the two, as Anthropic reports it
	if in/float64(itpm) <= out/float64(otpm) {
		set("tokens", itpm, in)
	} else {
		set("tokens", otpm, out)
	}
}
