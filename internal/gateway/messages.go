package gateway

// POST /v1/messages (?beta=true too) and POST /v1/messages/count_tokens:
// Anthropic's Messages API, authenticated by x-api-key or a bearer
// token, with Anthropic's error shapes. Forwarded natively to
// Anthropic-kind providers (the body as it came but max_tokens, lowered
// to what the key's quota leaves, and a thinking budget below it; the
// client's anthropic-version and anthropic-beta headers; role "system"
// messages moved to the system prompt), and translated
// to chat completions for OpenAI-kind and Azure providers (conv.go), the
// reply, whole or streamed with Anthropic's events, translated back.
//
// max_tokens is required, as Anthropic requires it. Read for a
// translation: system (a string or text blocks), messages of text,
// tool_use and tool_result blocks (thinking blocks dropped; a role
// "system" message taken as system text), custom tools (input_schema's
// $schema and defer_loading dropped), tool_choice (auto, any, tool,
// none, disable_parallel_tool_use), stop_sequences, temperature, top_p,
// metadata.user_id. Ignored: thinking, context_management, output_config,
// top_k, service_tier, betas. Refused with 400: images and documents
// (the gateway cannot count them), server tools and other blocks a chat
// completion cannot carry, mcp_servers.
//
// count_tokens answers the gateway's own count of the input (what it
// reserves), charging nothing.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/prq-dev/prq/ratelimit"
)

// messagesScalars are the Messages API fields that cost no input tokens.
var messagesScalars = map[string]bool{
	"model": true, "max_tokens": true, "stream": true, "temperature": true, "top_p": true, "top_k": true,
	"service_tier": true, "thinking": true, "metadata": true,
}

var messagesPolicy = scanPolicy{uncounted: messagesScalars}

// minThinkingBudget is the least thinking budget Anthropic takes.
const minThinkingBudget = 1024

type messagesRequest struct {
	raw       map[string]json.RawMessage
	model     string
	maxTokens *int64
	stream    bool
	messages  []map[string]json.RawMessage
}

func parseMessages(body []byte) (messagesRequest, error) {
	var req messagesRequest
	if err := json.Unmarshal(body, &req.raw); err != nil || req.raw == nil {
		return req, &requestError{msg: "There was an issue with the format or content of your request: a JSON object is expected."}
	}
	for _, f := range []struct {
		name string
		dst  any
	}{{"model", &req.model}, {"max_tokens", &req.maxTokens}, {"stream", &req.stream}, {"messages", &req.messages}} {
		if v, ok := req.raw[f.name]; ok && string(v) != "null" {
			if err := json.Unmarshal(v, f.dst); err != nil {
				return req, &requestError{param: f.name, msg: fmt.Sprintf("%s: Input should be of another type.", f.name)}
			}
		}
	}
	if req.model == "" {
		return req, &requestError{param: "model", msg: "model: Field required"}
	}
	if len(req.messages) == 0 {
		return req, &requestError{param: "messages", msg: "messages: at least one message is required"}
	}
	for i, m := range req.messages {
		if m == nil {
			return req, &requestError{param: fmt.Sprintf("messages.%d", i), msg: fmt.Sprintf("messages.%d: Input should be an object", i)}
		}
		blocks, err := contentBlocks(m["content"], fmt.Sprintf("messages.%d.content", i))
		if err != nil {
			return req, err
		}
		for j, b := range blocks {
			switch b.Type {
			case "image", "document":
				return req, &requestError{param: fmt.Sprintf("messages.%d.content.%d", i, j), msg: fmt.Sprintf("messages.%d.content.%d: %s blocks are not supported by the gateway, which cannot count them against the key's quota; send text.", i, j, b.Type)}
			}
		}
	}
	return req, nil
}

// block is what the gateway reads of a content block.
type block struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
	raw       json.RawMessage
}

// contentBlocks reads content: a string (one text block) or blocks.
func contentBlocks(raw json.RawMessage, at string) ([]block, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, &requestError{param: at, msg: at + ": " + err.Error()}
		}
		return []block{{Type: "text", Text: s, raw: raw}}, nil
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(raw, &raws); err != nil {
		return nil, &requestError{param: at, msg: at + ": Input should be a valid string or list of blocks"}
	}
	out := make([]block, len(raws))
	for i, r := range raws {
		if err := json.Unmarshal(r, &out[i]); err != nil {
			return nil, &requestError{param: fmt.Sprintf("%s.%d", at, i), msg: fmt.Sprintf("%s.%d: Input should be an object", at, i)}
		}
		out[i].raw = r
	}
	return out, nil
}

// blocksText is what blocks are counted as: text as it is, any other
// block as its JSON (a call's input, a result's content: errs high).
func blocksText(blocks []block) string {
	var b strings.Builder
	for _, bl := range blocks {
		if bl.Type == "text" {
			b.WriteString(bl.Text)
		} else {
			b.WriteString(" " + string(bl.raw))
		}
	}
	return b.String()
}

// texts is what the request is counted as: the system prompt, one text
// per message, and as JSON every other field that is not a known scalar
// (tools, tool_choice, stop_sequences, fields the gateway does not know).
func (req messagesRequest) texts() []string {
	var out []string
	if sys, err := contentBlocks(req.raw["system"], "system"); err == nil && len(sys) > 0 {
		out = append(out, blocksText(sys))
	}
	for _, m := range req.messages {
		blocks, _ := contentBlocks(m["content"], "")
		out = append(out, blocksText(blocks))
	}
	keys := make([]string, 0, len(req.raw))
	for k := range req.raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !messagesScalars[k] && k != "messages" && k != "system" {
			out = append(out, k+string(req.raw[k]))
		}
	}
	return out
}

// conversation reads the request for a translation (see above).
func (req messagesRequest) conversation(model string) (conversation, error) {
	var c conversation
	c.stream = req.stream
	untranslated := func(param, what string) error {
		return &requestError{param: param, msg: fmt.Sprintf("%s: %s cannot be sent to %s, which the gateway serves through an OpenAI-compatible provider; remove it, or use an Anthropic model.", param, what, model)}
	}
	sys, err := contentBlocks(req.raw["system"], "system")
	if err != nil {
		return c, err
	}
	for _, b := range sys {
		if b.Type == "text" && b.Text != "" {
			c.system = append(c.system, b.Text)
		}
	}
	for i, m := range req.messages {
		var role string
		json.Unmarshal(m["role"], &role)
		at := fmt.Sprintf("messages.%d", i)
		blocks, err := contentBlocks(m["content"], at+".content")
		if err != nil {
			return c, err
		}
		switch role {
		case "user", "assistant", "system":
		default:
			return c, &requestError{param: at + ".role", msg: fmt.Sprintf("%s.role: Input should be 'user' or 'assistant'", at)}
		}
		for j, b := range blocks {
			bat := fmt.Sprintf("%s.content.%d", at, j)
			switch {
			case b.Type == "text" && role == "system":
				c.system = append(c.system, b.Text)
			case b.Type == "text":
				c.add(role, part{kind: partText, text: b.Text})
			case b.Type == "tool_use" && role == "assistant":
				c.add(role, part{kind: partToolCall, id: b.ID, name: b.Name, args: string(nonNull(b.Input))})
			case b.Type == "tool_result" && role == "user":
				inner, err := contentBlocks(b.Content, bat+".content")
				if err != nil {
					return c, err
				}
				var text strings.Builder
				for _, ib := range inner {
					if ib.Type != "text" {
						return c, untranslated(bat+".content", "a tool result's "+ib.Type+" block")
					}
					text.WriteString(ib.Text)
				}
				c.add(role, part{kind: partToolResult, id: b.ToolUseID, text: text.String(), isError: b.IsError})
			case b.Type == "thinking" || b.Type == "redacted_thinking":
				// the model's own reasoning, which another model cannot read: dropped
			default:
				return c, untranslated(bat, "a "+b.Type+" block")
			}
		}
	}
	if v := nonNull(req.raw["tools"]); len(v) > 0 {
		var tools []struct {
			Type        string          `json:"type"`
			Name        string          `json:"name"`
			Description string          `json:"description"`
			InputSchema json.RawMessage `json:"input_schema"`
		}
		if err := json.Unmarshal(v, &tools); err != nil {
			return c, &requestError{param: "tools", msg: "tools: Input should be a valid list"}
		}
		for i, t := range tools {
			if t.Type != "" && t.Type != "custom" {
				return c, untranslated(fmt.Sprintf("tools.%d", i), "the server tool "+t.Type)
			}
			c.tools = append(c.tools, toolDef{name: t.Name, description: t.Description, schema: t.InputSchema})
		}
	}
	if v := nonNull(req.raw["tool_choice"]); len(v) > 0 {
		var tc struct {
			Type                   string `json:"type"`
			Name                   string `json:"name"`
			DisableParallelToolUse bool   `json:"disable_parallel_tool_use"`
		}
		if err := json.Unmarshal(v, &tc); err != nil {
			return c, &requestError{param: "tool_choice", msg: "tool_choice: Input should be an object"}
		}
		switch tc.Type {
		case "auto", "none":
			c.toolChoice = tc.Type
		case "any":
			c.toolChoice = "required"
		case "tool":
			c.toolChoice = "tool:" + tc.Name
		default:
			return c, &requestError{param: "tool_choice.type", msg: fmt.Sprintf("tool_choice.type: %q is not auto, any, tool or none", tc.Type)}
		}
		if tc.DisableParallelToolUse {
			no := false
			c.parallel = &no
		}
	}
	if v := nonNull(req.raw["stop_sequences"]); len(v) > 0 {
		if err := json.Unmarshal(v, &c.stop); err != nil {
			return c, &requestError{param: "stop_sequences", msg: "stop_sequences: Input should be a valid list of strings"}
		}
		if len(c.stop) > 4 {
			return c, untranslated("stop_sequences", "more than 4 stop sequences")
		}
	}
	if v := nonNull(req.raw["mcp_servers"]); len(v) > 0 && string(v) != "[]" {
		return c, untranslated("mcp_servers", "MCP servers")
	}
	c.temperature, c.topP = nonNull(req.raw["temperature"]), nonNull(req.raw["top_p"])
	var meta struct {
		UserID string `json:"user_id"`
	}
	json.Unmarshal(req.raw["metadata"], &meta)
	c.user = meta.UserID
	return c, nil
}

func (g *Gateway) messages(w http.ResponseWriter, r *http.Request, q *request) {
	body, left, ok := g.front(w, r, q, messagesPolicy)
	if !ok {
		return
	}
	req, err := parseMessages(body)
	if err != nil {
		q.bad(w, err)
		return
	}
	m, ok := g.model(w, q, req.model)
	if !ok {
		return
	}
	if req.maxTokens == nil {
		q.bad(w, &requestError{param: "max_tokens", msg: "max_tokens: Field required"})
		return
	}
	if !g.outputCap(w, q, m, "max_tokens", *req.maxTokens) {
		return
	}
	ex := &messagesExchange{req: req, version: r.Header.Get("anthropic-version"), betas: r.Header.Values("anthropic-beta")}
	if m.Provider.Kind != KindAnthropic {
		if ex.conv, err = req.conversation(req.model); err != nil {
			q.bad(w, err)
			return
		}
		ex.translated = true
	}
	texts := req.texts()
	if q.input, ok = g.countInput(w, q, m, left, func(budget int64) (int64, error) { return g.counters[req.model].messages(texts, budget) }); !ok {
		return
	}
	w.Header().Set("request-id", "req_"+strings.TrimPrefix(newID(), "gw-"))
	g.proceed(w, r, q, *req.maxTokens, func(m Model, output int64) int64 {
		est := ratelimit.EstimateOpenAI(texts, output)
		if m.Provider.Kind == KindAnthropic && len(nonNull(req.raw["tools"])) > 0 {
			est += ratelimit.AnthropicToolUseTokens
		}
		return est
	}, ex)
}

// countTokens answers POST /v1/messages/count_tokens with the gateway's
// count (what it would reserve as input), charging nothing.
func (g *Gateway) countTokens(w http.ResponseWriter, r *http.Request, q *request) {
	body, _, ok := g.front(w, r, q, messagesPolicy)
	if !ok {
		return
	}
	req, err := parseMessages(body)
	if err != nil {
		q.bad(w, err)
		return
	}
	m, ok := g.model(w, q, req.model)
	if !ok {
		return
	}
	n, ok := g.countInput(w, q, m, unlimited, func(budget int64) (int64, error) { return g.counters[req.model].messages(req.texts(), budget) })
	if !ok {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"input_tokens": n})
}

// messagesExchange is a Messages API request's call: native to an
// Anthropic model, through a chat completion otherwise.
type messagesExchange struct {
	req        messagesRequest
	conv       conversation // the translation, for OpenAI-kind models
	translated bool         // conv is read
	version    string       // the client's anthropic-version
	betas      []string     // and anthropic-beta
}

func (e *messagesExchange) streams() bool { return e.req.stream }

func (e *messagesExchange) build(m Model, q *request) (string, []byte, error) {
	if m.Provider.Kind != KindAnthropic {
		if !e.translated { // a fallback's
			conv, err := e.req.conversation(q.model)
			if err != nil {
				return "", nil, err
			}
			e.conv, e.translated = conv, true
		}
		body, err := e.conv.chatBody(q.model, m, q.cap)
		return opChat, body, err
	}
	raw := make(map[string]json.RawMessage, len(e.req.raw))
	for k, v := range e.req.raw {
		raw[k] = v
	}
	raw["max_tokens"], _ = json.Marshal(q.cap)
	raw["model"], _ = json.Marshal(q.model) // a fallback's
	if err := e.systemMessages(raw); err != nil {
		return "", nil, err
	}
	// a thinking budget must stay below max_tokens: lowered with it, or
	// thinking turned off when no budget fits
	var th map[string]json.RawMessage
	if json.Unmarshal(raw["thinking"], &th) == nil {
		var budget int64
		if json.Unmarshal(th["budget_tokens"], &budget) == nil && budget >= q.cap {
			if q.cap-1 >= minThinkingBudget {
				th["budget_tokens"], _ = json.Marshal(q.cap - 1)
				raw["thinking"], _ = json.Marshal(th)
			} else {
				raw["thinking"] = json.RawMessage(`{"type":"disabled"}`)
			}
		}
	}
	q.upHeader = http.Header{}
	if e.version != "" {
		q.upHeader.Set("anthropic-version", e.version)
	}
	for _, b := range e.betas {
		q.upHeader.Add("anthropic-beta", b)
	}
	body, err := json.Marshal(raw)
	return opMessages, body, err
}

// systemMessages moves the text of role "system" messages (Claude Code
// sends one among its messages) to the end of the system prompt, where
// the Messages API takes system text.
func (e *messagesExchange) systemMessages(raw map[string]json.RawMessage) error {
	var keep []map[string]json.RawMessage
	var moved []block
	for _, m := range e.req.messages {
		var role string
		json.Unmarshal(m["role"], &role)
		if role != "system" {
			keep = append(keep, m)
			continue
		}
		blocks, _ := contentBlocks(m["content"], "")
		for _, b := range blocks {
			if b.Type == "text" {
				moved = append(moved, b)
			}
		}
	}
	if len(keep) == len(e.req.messages) {
		return nil
	}
	sys, _ := contentBlocks(raw["system"], "system")
	var out []json.RawMessage
	for _, b := range append(sys, moved...) {
		if b.Type == "text" && b.raw[0] == '"' {
			b.raw, _ = json.Marshal(map[string]string{"type": "text", "text": b.Text})
		}
		out = append(out, b.raw)
	}
	var err error
	if raw["system"], err = json.Marshal(out); err != nil {
		return err
	}
	raw["messages"], err = json.Marshal(keep)
	return err
}

func (e *messagesExchange) answer(g *Gateway, w http.ResponseWriter, r *http.Request, q *request, m Model, resp *http.Response, cancel context.CancelFunc) {
	bg := context.WithoutCancel(r.Context())
	native := m.Provider.Kind == KindAnthropic
	if resp.StatusCode == http.StatusOK && e.req.stream {
		if native {
			g.relayAnthropic(w, r, q, resp, cancel)
		} else {
			g.pump(w, r, q, resp, cancel, &chatStreamIn{}, &messagesOut{q: q, id: randomID("msg_")})
		}
		return
	}
	body, ok := g.readReply(w, r, q, resp)
	if !ok {
		return
	}
	switch {
	case resp.StatusCode != http.StatusOK && native && resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden && resp.StatusCode != http.StatusPaymentRequired:
		// Anthropic's own error, already in the client's shape
		g.settle(bg, q, nil, resp.StatusCode >= 500)
		if v := resp.Header.Get("retry-after"); v != "" {
			w.Header().Set("Retry-After", v)
		}
		g.keyHeaders(bg, w.Header(), q)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(resp.StatusCode)
		w.Write(body)
		return
	case resp.StatusCode != http.StatusOK:
		g.providerFailure(w, r, q, resp, body)
		return
	}
	parse := completionFromChat
	if native {
		parse = completionFromAnthropic
	}
	c, err := parse(body)
	if err != nil {
		g.settle(bg, q, nil, true) // it ran: never overshoot
		g.log.WarnContext(r.Context(), "gateway: a provider's reply could not be read", "key", q.key.ID, "model", q.model, "err", err)
		q.fail(w, http.StatusBadGateway, "server_error", "", "The provider's reply could not be read.")
		return
	}
	g.settle(bg, q, c.usage, true)
	g.keyHeaders(bg, w.Header(), q)
	w.Header().Set("Content-Type", "application/json")
	if native {
		w.Write(body)
		return
	}
	json.NewEncoder(w).Encode(messageOf(c, q))
}

// anthropicStop is the Messages API's stop reason of a finish.
func anthropicStop(finish string) string {
	switch finish {
	case finishLength:
		return "max_tokens"
	case finishTools:
		return "tool_use"
	case finishFilter:
		return "refusal"
	}
	return "end_turn"
}

// toolInput is a call's arguments as a tool_use input: a JSON object.
func toolInput(args string) json.RawMessage {
	var obj map[string]json.RawMessage
	if json.Unmarshal([]byte(args), &obj) != nil {
		return json.RawMessage(`{}`)
	}
	return json.RawMessage(args)
}

func messageUsage(u *usage, q *request) map[string]any {
	in, out := q.input, int64(0)
	if u != nil {
		in, out = u.PromptTokens, u.CompletionTokens
	}
	return map[string]any{"input_tokens": in, "output_tokens": out, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
}

// messageOf is a completion as a Messages API reply.
func messageOf(c completion, q *request) map[string]any {
	content := []map[string]any{}
	if c.text != "" {
		content = append(content, map[string]any{"type": "text", "text": c.text})
	}
	for _, call := range c.calls {
		content = append(content, map[string]any{"type": "tool_use", "id": call.id, "name": call.name, "input": toolInput(call.args)})
	}
	id := c.id
	if !strings.HasPrefix(id, "msg_") {
		id = randomID("msg_")
	}
	return map[string]any{"id": id, "type": "message", "role": "assistant", "model": q.model, "content": content,
		"stop_reason": anthropicStop(c.finish), "stop_sequence": nil, "usage": messageUsage(c.usage, q)}
}

// messagesOut writes a translated stream as the Messages API's events.
type messagesOut struct {
	q      *request
	id     string
	blocks int  // content blocks started
	open   bool // the last one is not stopped yet
	text   bool // the open block is text
	calls  map[int]int
	finish string
}

func (o *messagesOut) begin(w http.ResponseWriter) error {
	if err := sse(w, "message_start", map[string]any{"type": "message_start", "message": map[string]any{"id": o.id, "type": "message", "role": "assistant",
		"model": o.q.model, "content": []any{}, "stop_reason": nil, "stop_sequence": nil, "usage": messageUsage(nil, o.q)}}); err != nil {
		return err
	}
	return sse(w, "ping", map[string]any{"type": "ping"})
}

func (o *messagesOut) stop(w http.ResponseWriter) error {
	if !o.open {
		return nil
	}
	o.open = false
	return sse(w, "content_block_stop", map[string]any{"type": "content_block_stop", "index": o.blocks - 1})
}

func (o *messagesOut) start(w http.ResponseWriter, b map[string]any, text bool) error {
	if err := o.stop(w); err != nil {
		return err
	}
	o.blocks++
	o.open, o.text = true, text
	return sse(w, "content_block_start", map[string]any{"type": "content_block_start", "index": o.blocks - 1, "content_block": b})
}

func (o *messagesOut) event(w http.ResponseWriter, ev streamEvent) error {
	switch ev.kind {
	case "text":
		if !o.open || !o.text {
			if err := o.start(w, map[string]any{"type": "text", "text": ""}, true); err != nil {
				return err
			}
		}
		return sse(w, "content_block_delta", map[string]any{"type": "content_block_delta", "index": o.blocks - 1, "delta": map[string]any{"type": "text_delta", "text": ev.text}})
	case "call":
		id := ev.id
		if id == "" {
			id = randomID("toolu_")
		}
		if err := o.start(w, map[string]any{"type": "tool_use", "id": id, "name": ev.name, "input": map[string]any{}}, false); err != nil {
			return err
		}
		if o.calls == nil {
			o.calls = map[int]int{}
		}
		o.calls[ev.index] = o.blocks - 1
	case "args":
		if i, ok := o.calls[ev.index]; ok {
			return sse(w, "content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "input_json_delta", "partial_json": ev.text}})
		}
	case "finish":
		o.finish = ev.finish
	}
	return nil
}

func (o *messagesOut) end(w http.ResponseWriter, u *usage) error {
	if err := o.stop(w); err != nil {
		return err
	}
	mu := messageUsage(u, o.q)
	if err := sse(w, "message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": anthropicStop(o.finish), "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": mu["output_tokens"], "input_tokens": mu["input_tokens"]}}); err != nil {
		return err
	}
	return sse(w, "message_stop", map[string]any{"type": "message_stop"})
}

func (o *messagesOut) fail(w http.ResponseWriter, msg string) {
	sse(w, "error", map[string]any{"type": "error", "error": map[string]any{"type": "api_error", "message": msg}})
}

// relayAnthropic relays an Anthropic stream to a Messages API client as
// it came, event by event, reading the usage of message_start and
// message_delta; it settles before the client sees message_stop, and,
// broken off, ends the stream with Anthropic's error event (the
// reservation then stands).
func (g *Gateway) relayAnthropic(w http.ResponseWriter, r *http.Request, q *request, resp *http.Response, cancel context.CancelFunc) {
	bg := context.WithoutCancel(r.Context())
	g.keyHeaders(bg, w.Header(), q)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	in := &anthropicStreamIn{}
	settled := false
	defer func() {
		if !settled {
			g.settle(bg, q, nil, true)
		}
	}()
	var ev bytes.Buffer
	flush := func() error { // the event, with its blank line
		ev.WriteByte('\n')
		_, err := w.Write(ev.Bytes())
		ev.Reset()
		if flusher != nil {
			flusher.Flush()
		}
		return err
	}
	idle, err := g.relay(resp, cancel, func(line []byte) bool {
		if data, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			_, done, failure := in.read("", data)
			if failure != "" {
				g.log.WarnContext(bg, "gateway: the provider's stream ended with an error", "key", q.key.ID, "model", q.model, "err", failure)
			}
			if done && !settled {
				g.settle(bg, q, in.usage(), true) // before the client sees message_stop
				settled = true
			}
		}
		if len(line) > 0 {
			ev.Write(line)
			ev.WriteByte('\n')
		} else if ev.Len() > 0 {
			return flush() == nil
		}
		return true
	})
	if err == nil {
		return // the client left
	}
	if ev.Len() > 0 { // the last event, without its blank line
		flush()
	}
	if settled {
		return
	}
	if msg, ok := g.brokeOff(bg, r, q, idle, err); ok {
		(&messagesOut{q: q}).fail(w, msg)
	}
}
