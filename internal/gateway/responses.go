package gateway

// POST /v1/responses: OpenAI's Responses API, stateless, translated to
// chat completions for OpenAI-kind and Azure providers (any
// OpenAI-compatible server serves it then, and the fake needs no
// Responses of its own) and to the Messages API for Anthropic models;
// the reply (whole, or streamed as response.created,
// response.output_text.delta, ..., response.completed) is the Responses
// API's.
//
// Read: input as a string or items (messages with input_text and
// output_text parts, function_call and function_call_output; reasoning
// items are dropped), instructions, function tools, tool_choice,
// parallel_tool_calls, max_output_tokens, temperature, top_p, user,
// text.format json_schema (the chat wire). Refused with 400: what needs
// state the gateway does not keep (previous_response_id, conversation,
// store: true, background), items and tools it cannot translate (images,
// files, built-in tools). Ignored: include, truncation, metadata,
// prompt_cache_key, reasoning, service_tier, safety_identifier.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/prq-dev/prq/ratelimit"
)

// responsesScalars are the Responses fields that cost no input tokens.
var responsesScalars = map[string]bool{
	"model": true, "stream": true, "max_output_tokens": true, "temperature": true, "top_p": true, "store": true,
	"parallel_tool_calls": true, "service_tier": true, "user": true, "safety_identifier": true, "prompt_cache_key": true,
	"truncation": true, "background": true, "previous_response_id": true, "reasoning": true, "include": true,
	"top_logprobs": true, "metadata": true, "max_tool_calls": true, "stream_options": true, "prompt_cache_retention": true,
}

var responsesPolicy = scanPolicy{uncounted: responsesScalars}

// minOutputTokens is the least max_output_tokens the Responses API takes.
const minOutputTokens = 16

type responsesRequest struct {
	raw             map[string]json.RawMessage
	model           string
	stream          bool
	maxOutputTokens *int64
	instructions    string
	conv            conversation
}

func randomID(prefix string) string {
	var b [12]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// parseResponses reads a Responses request (see above).
func parseResponses(body []byte) (responsesRequest, error) {
	var req responsesRequest
	if err := json.Unmarshal(body, &req.raw); err != nil || req.raw == nil {
		return req, &requestError{msg: "We could not parse the JSON body of your request: a JSON object is expected."}
	}
	field := func(name string, dst any) error {
		v, ok := req.raw[name]
		if !ok || string(v) == "null" {
			return nil
		}
		if err := json.Unmarshal(v, dst); err != nil {
			return &requestError{param: name, msg: fmt.Sprintf("Invalid type for '%s': %s is not what it takes.", name, truncate(string(v), 40))}
		}
		return nil
	}
	var store, background *bool
	var prev, conversationRef json.RawMessage
	var user string
	for _, f := range []struct {
		name string
		dst  any
	}{{"model", &req.model}, {"stream", &req.stream}, {"max_output_tokens", &req.maxOutputTokens}, {"instructions", &req.instructions},
		{"store", &store}, {"background", &background}, {"previous_response_id", &prev}, {"conversation", &conversationRef},
		{"parallel_tool_calls", &req.conv.parallel}, {"user", &user}} {
		if err := field(f.name, f.dst); err != nil {
			return req, err
		}
	}
	stateful := func(param, what string) error {
		return &requestError{param: param, msg: fmt.Sprintf("'%s' %s: the gateway keeps no responses (it is stateless). Send the whole conversation as input, with store false or omitted.", param, what)}
	}
	switch {
	case len(prev) > 0 && string(prev) != "null" && string(prev) != `""`:
		return req, stateful("previous_response_id", "refers to a stored response")
	case len(conversationRef) > 0 && string(conversationRef) != "null":
		return req, stateful("conversation", "refers to a stored conversation")
	case store != nil && *store:
		return req, stateful("store", "asks for the response to be stored for retrieval")
	case background != nil && *background:
		return req, stateful("background", "asks for a response retrieved later")
	}
	c := &req.conv
	c.stream, c.user = req.stream, user
	if req.instructions != "" {
		c.system = append(c.system, req.instructions)
	}
	c.temperature, c.topP = nonNull(req.raw["temperature"]), nonNull(req.raw["top_p"])
	if err := c.responsesInput(req.raw["input"]); err != nil {
		return req, err
	}
	if err := c.responsesTools(req.raw["tools"], req.raw["tool_choice"]); err != nil {
		return req, err
	}
	if err := c.responsesFormat(req.raw["text"]); err != nil {
		return req, err
	}
	return req, nil
}

func nonNull(v json.RawMessage) json.RawMessage {
	if len(v) == 0 || string(v) == "null" {
		return nil
	}
	return v
}

// responsesInput reads input: a string (one user message) or items.
func (c *conversation) responsesInput(raw json.RawMessage) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return &requestError{param: "input", msg: "Missing required parameter: 'input'."}
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return &requestError{param: "input", msg: "Invalid 'input': " + err.Error()}
		}
		c.add("user", part{kind: partText, text: s})
		return nil
	}
	var items []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return &requestError{param: "input", msg: "Invalid 'input': a string or an array of items is expected."}
	}
	str := func(item map[string]json.RawMessage, k string) string {
		var s string
		json.Unmarshal(item[k], &s)
		return s
	}
	for i, item := range items {
		at := fmt.Sprintf("input[%d]", i)
		typ := str(item, "type")
		if typ == "" && item["role"] != nil {
			typ = "message"
		}
		switch typ {
		case "message":
			role := str(item, "role")
			text, err := responsesContent(item["content"], at+".content")
			if err != nil {
				return err
			}
			switch role {
			case "system", "developer":
				c.system = append(c.system, text)
			case "user", "assistant":
				c.add(role, part{kind: partText, text: text})
			default:
				return &requestError{param: at + ".role", msg: fmt.Sprintf("Invalid value for '%s.role': %q (user, assistant, system or developer).", at, role)}
			}
		case "function_call":
			c.add("assistant", part{kind: partToolCall, id: str(item, "call_id"), name: str(item, "name"), args: str(item, "arguments")})
		case "function_call_output":
			out, err := responsesContent(item["output"], at+".output")
			if err != nil {
				return err
			}
			c.add("user", part{kind: partToolResult, id: str(item, "call_id"), text: out})
		case "reasoning":
			// the model's own reasoning, which another model cannot read: dropped
		case "item_reference":
			return &requestError{param: at, msg: fmt.Sprintf("'%s' refers to a stored item: the gateway keeps no responses (it is stateless); send the item itself.", at)}
		default:
			return &requestError{param: at + ".type", msg: fmt.Sprintf("'%s' is an item of type %q, which the gateway does not translate (it translates messages, function_call and function_call_output items).", at, typ)}
		}
	}
	return nil
}

// responsesContent reads a message's content or a call's output: a
// string, or text parts (input_text, output_text, text).
func responsesContent(raw json.RawMessage, at string) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	}
	var parts []struct {
		Type    string `json:"type"`
		Text    string `json:"text"`
		Refusal string `json:"refusal"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", &requestError{param: at, msg: fmt.Sprintf("Invalid '%s': a string or an array of parts is expected.", at)}
	}
	var b strings.Builder
	for j, p := range parts {
		switch p.Type {
		case "input_text", "output_text", "text":
			b.WriteString(p.Text)
		case "refusal":
			b.WriteString(p.Refusal)
		default:
			return "", &requestError{param: fmt.Sprintf("%s[%d].type", at, j), msg: fmt.Sprintf("'%s[%d]' is a %q part; the gateway translates text parts only.", at, j, p.Type)}
		}
	}
	return b.String(), nil
}

// responsesTools reads function tools and tool_choice.
func (c *conversation) responsesTools(raw, choice json.RawMessage) error {
	if len(nonNull(raw)) > 0 {
		var tools []struct {
			Type        string          `json:"type"`
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		}
		if err := json.Unmarshal(raw, &tools); err != nil {
			return &requestError{param: "tools", msg: "Invalid 'tools': an array of tools is expected."}
		}
		for i, t := range tools {
			if t.Type != "function" {
				return &requestError{param: fmt.Sprintf("tools[%d].type", i), msg: fmt.Sprintf("'tools[%d]' is a %q tool; the gateway translates function tools only.", i, t.Type)}
			}
			if !toolName.MatchString(t.Name) {
				return &requestError{param: fmt.Sprintf("tools[%d].name", i), msg: fmt.Sprintf("'tools[%d].name' must be 1 to 64 letters, digits, underscores or dashes.", i)}
			}
			c.tools = append(c.tools, toolDef{name: t.Name, description: t.Description, schema: t.Parameters})
		}
	}
	choice = nonNull(choice)
	if len(choice) == 0 {
		return nil
	}
	var s string
	if json.Unmarshal(choice, &s) == nil {
		switch s {
		case "auto", "none", "required":
			c.toolChoice = s
			return nil
		}
		return &requestError{param: "tool_choice", msg: fmt.Sprintf("Invalid value for 'tool_choice': %q.", s)}
	}
	var obj struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if json.Unmarshal(choice, &obj) != nil || obj.Type != "function" || obj.Name == "" {
		return &requestError{param: "tool_choice", msg: "'tool_choice' must be auto, none, required or a function tool ({\"type\":\"function\",\"name\":...})."}
	}
	c.toolChoice = "tool:" + obj.Name
	return nil
}

// responsesFormat reads text.format: text, or a json_schema.
func (c *conversation) responsesFormat(raw json.RawMessage) error {
	if len(nonNull(raw)) == 0 {
		return nil
	}
	var text struct {
		Format *struct {
			Type   string          `json:"type"`
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
			Strict *bool           `json:"strict"`
		} `json:"format"`
	}
	if err := json.Unmarshal(raw, &text); err != nil {
		return &requestError{param: "text", msg: "Invalid 'text': an object is expected."}
	}
	f := text.Format
	switch {
	case f == nil || f.Type == "text":
		return nil
	case f.Type == "json_schema":
		if !toolName.MatchString(f.Name) {
			return &requestError{param: "text.format.name", msg: "'text.format.name' must be 1 to 64 letters, digits, underscores or dashes."}
		}
		c.schema = &jsonSchema{Name: f.Name, Schema: f.Schema, Strict: f.Strict}
		return nil
	}
	return &requestError{param: "text.format.type", msg: fmt.Sprintf("'text.format' of type %q is not translated (text and json_schema are).", f.Type)}
}

// texts is what the request is counted as, one text per turn (as
// CountMessages takes messages): each turn's text, a call as its name and
// arguments, a result as its output; then the instructions, and as JSON
// every other field that is not a known scalar (tools, text, ...).
func (req responsesRequest) texts() []string {
	out := append([]string(nil), req.conv.system...)
	for _, t := range req.conv.turns {
		var b strings.Builder
		for _, p := range t.parts {
			b.WriteString(p.text)
			if p.kind == partToolCall {
				b.WriteString(" " + p.id + " " + p.name + " " + p.args)
			}
			if p.kind == partToolResult {
				b.WriteString(" " + p.id)
			}
		}
		out = append(out, b.String())
	}
	keys := make([]string, 0, len(req.raw))
	for k := range req.raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !responsesScalars[k] && k != "input" && k != "instructions" {
			out = append(out, k+string(req.raw[k]))
		}
	}
	return out
}

// storedResponse answers the routes of stored responses (retrieve,
// delete, cancel, input items): the gateway keeps none.
func storedResponse(w http.ResponseWriter, r *http.Request) {
	q := &request{api: apiResponses}
	q.bad(w, &requestError{param: "response_id", msg: fmt.Sprintf("%s %s: the gateway keeps no responses (it is stateless), so none can be retrieved, cancelled or deleted; keep what you need of a reply yourself.", r.Method, r.URL.Path)})
}

func (g *Gateway) responses(w http.ResponseWriter, r *http.Request, q *request) {
	body, left, ok := g.front(w, r, q, responsesPolicy)
	if !ok {
		return
	}
	req, err := parseResponses(body)
	if err != nil {
		q.bad(w, err)
		return
	}
	m, ok := g.model(w, q, req.model)
	if !ok {
		return
	}
	want := m.MaxOutput
	if v := req.maxOutputTokens; v != nil {
		if *v < minOutputTokens {
			q.bad(w, &requestError{param: "max_output_tokens", msg: fmt.Sprintf("Invalid 'max_output_tokens': integer below minimum value. Expected a value >= %d, but got %d instead.", minOutputTokens, *v)})
			return
		}
		if !g.outputCap(w, q, m, "max_output_tokens", *v) {
			return
		}
		want = *v
	}
	if m.Provider.Kind == KindAnthropic { // what cannot be translated is refused before anything is reserved
		if _, err := req.conv.anthropicBody(req.model, want); err != nil {
			q.bad(w, err)
			return
		}
	}
	texts := req.texts()
	if q.input, ok = g.countInput(w, q, m, left, func(budget int64) (int64, error) { return g.counters[req.model].messages(texts, budget) }); !ok {
		return
	}
	g.proceed(w, r, q, want, func(m Model, output int64) int64 {
		est := ratelimit.EstimateOpenAI(texts, output)
		if m.Provider.Kind == KindAnthropic && len(req.conv.tools) > 0 {
			est += ratelimit.AnthropicToolUseTokens
		}
		return est
	}, &responsesExchange{req: req})
}

// responsesExchange is a Responses request's call, through a chat
// completion or a Messages API call.
type responsesExchange struct{ req responsesRequest }

func (e *responsesExchange) streams() bool { return e.req.stream }

func (e *responsesExchange) build(m Model, q *request) (string, []byte, error) {
	if m.Provider.Kind == KindAnthropic {
		body, err := e.req.conv.anthropicBody(q.model, q.cap)
		return opMessages, body, err
	}
	body, err := e.req.conv.chatBody(q.model, m, q.cap)
	return opChat, body, err
}

func (e *responsesExchange) answer(g *Gateway, w http.ResponseWriter, r *http.Request, q *request, m Model, resp *http.Response, cancel context.CancelFunc) {
	anthropic := m.Provider.Kind == KindAnthropic
	if resp.StatusCode == http.StatusOK && e.req.stream {
		var in streamIn = &chatStreamIn{}
		if anthropic {
			in = &anthropicStreamIn{}
		}
		g.pump(w, r, q, resp, cancel, in, newResponsesOut(e.req, q))
		return
	}
	body, ok := g.readReply(w, r, q, resp)
	if !ok {
		return
	}
	if resp.StatusCode != http.StatusOK {
		g.providerFailure(w, r, q, resp, body)
		return
	}
	parse := completionFromChat
	if anthropic {
		parse = completionFromAnthropic
	}
	bg := context.WithoutCancel(r.Context())
	c, err := parse(body)
	if err != nil {
		g.settle(bg, q, nil, true) // it ran: never overshoot
		g.log.WarnContext(r.Context(), "gateway: a provider's reply could not be read", "key", q.key.ID, "model", q.model, "err", err)
		q.fail(w, http.StatusBadGateway, "server_error", "", "The provider's reply could not be read.")
		return
	}
	g.settle(bg, q, c.usage, true)
	g.keyHeaders(bg, w.Header(), q)
	out := newResponsesOut(e.req, q)
	for i, call := range c.calls {
		out.event(nil, streamEvent{kind: "call", index: i, id: call.id, name: call.name})
		out.event(nil, streamEvent{kind: "args", index: i, text: call.args})
	}
	out.text.WriteString(c.text)
	out.finish = c.finish
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out.response("completed", c.usage))
}

// responsesOut builds a Responses reply, whole or as its stream's
// events.
type responsesOut struct {
	req      responsesRequest
	q        *request
	id       string
	created  int64
	seq      int
	msgID    string
	text     strings.Builder
	textOpen bool // a message item streams
	calls    []*responsesCall
	finish   string
}

type responsesCall struct {
	id, callID, name string
	args             strings.Builder
	output           int // its output index
}

func newResponsesOut(req responsesRequest, q *request) *responsesOut {
	return &responsesOut{req: req, q: q, id: randomID("resp_"), created: time.Now().Unix(), msgID: randomID("msg_")}
}

// output is the reply's output items: the message (when it has text, or
// nothing else), then the function calls.
func (o *responsesOut) output(status string) []map[string]any {
	var items []map[string]any
	if o.text.Len() > 0 || len(o.calls) == 0 {
		items = append(items, o.message(status))
	}
	for _, c := range o.calls {
		items = append(items, c.item(status))
	}
	return items
}

func (o *responsesOut) message(status string) map[string]any {
	content := []map[string]any{}
	if status != "in_progress" || o.text.Len() > 0 {
		content = append(content, map[string]any{"type": "output_text", "text": o.text.String(), "annotations": []any{}, "logprobs": []any{}})
	}
	return map[string]any{"type": "message", "id": o.msgID, "status": status, "role": "assistant", "content": content}
}

func (c *responsesCall) item(status string) map[string]any {
	return map[string]any{"type": "function_call", "id": c.id, "call_id": c.callID, "name": c.name, "arguments": c.args.String(), "status": status}
}

// response is the response object; status "completed" becomes
// "incomplete" when the output was cut (max_output_tokens, a filter).
func (o *responsesOut) response(status string, u *usage) map[string]any {
	var incomplete any
	itemStatus := status
	if status == "completed" {
		switch o.finish {
		case finishLength:
			status, incomplete = "incomplete", map[string]any{"reason": "max_output_tokens"}
		case finishFilter:
			status, incomplete = "incomplete", map[string]any{"reason": "content_filter"}
		}
		itemStatus = "completed"
		if status == "incomplete" {
			itemStatus = "incomplete"
		}
	}
	var instructions any
	if o.req.instructions != "" {
		instructions = o.req.instructions
	}
	var usageObj any
	if u != nil {
		usageObj = map[string]any{"input_tokens": u.PromptTokens, "input_tokens_details": map[string]any{"cached_tokens": 0},
			"output_tokens": u.CompletionTokens, "output_tokens_details": map[string]any{"reasoning_tokens": 0},
			"total_tokens": u.PromptTokens + u.CompletionTokens}
	}
	output := []map[string]any{}
	if status != "in_progress" {
		output = o.output(itemStatus)
	}
	toolChoice := any("auto")
	if ch := o.req.conv.toolChoice; strings.HasPrefix(ch, "tool:") {
		toolChoice = map[string]any{"type": "function", "name": strings.TrimPrefix(ch, "tool:")}
	} else if ch != "" {
		toolChoice = ch
	}
	tools := []any{}
	for _, t := range o.req.conv.tools {
		tools = append(tools, map[string]any{"type": "function", "name": t.name, "description": t.description, "parameters": t.schema, "strict": false})
	}
	return map[string]any{"id": o.id, "object": "response", "created_at": o.created, "status": status, "error": nil,
		"incomplete_details": incomplete, "instructions": instructions, "max_output_tokens": o.q.cap, "model": o.q.model,
		"output": output, "parallel_tool_calls": o.req.conv.parallel == nil || *o.req.conv.parallel, "previous_response_id": nil,
		"reasoning": map[string]any{"effort": nil, "summary": nil}, "store": false, "temperature": nil, "top_p": nil,
		"text": map[string]any{"format": map[string]any{"type": "text"}}, "tool_choice": toolChoice, "tools": tools,
		"truncation": "disabled", "usage": usageObj, "user": nil, "metadata": map[string]any{}}
}

// emit writes one Responses stream event (w nil: building a whole reply).
func (o *responsesOut) emit(w http.ResponseWriter, typ string, fields map[string]any) error {
	if w == nil {
		return nil
	}
	fields["type"] = typ
	fields["sequence_number"] = o.seq
	o.seq++
	return sse(w, typ, fields)
}

func (o *responsesOut) begin(w http.ResponseWriter) error {
	if err := o.emit(w, "response.created", map[string]any{"response": o.response("in_progress", nil)}); err != nil {
		return err
	}
	return o.emit(w, "response.in_progress", map[string]any{"response": o.response("in_progress", nil)})
}

func (o *responsesOut) event(w http.ResponseWriter, ev streamEvent) error {
	switch ev.kind {
	case "text":
		if !o.textOpen {
			o.textOpen = true
			if err := o.emit(w, "response.output_item.added", map[string]any{"output_index": 0, "item": o.message("in_progress")}); err != nil {
				return err
			}
			if err := o.emit(w, "response.content_part.added", map[string]any{"item_id": o.msgID, "output_index": 0, "content_index": 0,
				"part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}}}); err != nil {
				return err
			}
		}
		o.text.WriteString(ev.text)
		return o.emit(w, "response.output_text.delta", map[string]any{"item_id": o.msgID, "output_index": 0, "content_index": 0, "delta": ev.text, "logprobs": []any{}})
	case "call":
		for len(o.calls) <= ev.index {
			o.calls = append(o.calls, nil)
		}
		id := ev.id
		if id == "" {
			id = randomID("call_")
		}
		out := len(o.calls) - 1 // the message's item, when it streams, is first
		if o.textOpen {
			out++
		}
		c := &responsesCall{id: randomID("fc_"), callID: id, name: ev.name, output: out}
		o.calls[ev.index] = c
		return o.emit(w, "response.output_item.added", map[string]any{"output_index": c.output, "item": c.item("in_progress")})
	case "args":
		if ev.index >= len(o.calls) || o.calls[ev.index] == nil {
			return nil
		}
		c := o.calls[ev.index]
		c.args.WriteString(ev.text)
		return o.emit(w, "response.function_call_arguments.delta", map[string]any{"item_id": c.id, "output_index": c.output, "delta": ev.text})
	case "finish":
		o.finish = ev.finish
	}
	return nil
}

func (o *responsesOut) end(w http.ResponseWriter, u *usage) error {
	var calls []*responsesCall
	for _, c := range o.calls {
		if c != nil {
			calls = append(calls, c)
		}
	}
	o.calls = calls
	if o.textOpen {
		text := o.text.String()
		o.emit(w, "response.output_text.done", map[string]any{"item_id": o.msgID, "output_index": 0, "content_index": 0, "text": text, "logprobs": []any{}})
		o.emit(w, "response.content_part.done", map[string]any{"item_id": o.msgID, "output_index": 0, "content_index": 0,
			"part": map[string]any{"type": "output_text", "text": text, "annotations": []any{}}})
		o.emit(w, "response.output_item.done", map[string]any{"output_index": 0, "item": o.message("completed")})
	}
	for _, c := range o.calls {
		o.emit(w, "response.function_call_arguments.done", map[string]any{"item_id": c.id, "output_index": c.output, "arguments": c.args.String(), "name": c.name})
		o.emit(w, "response.output_item.done", map[string]any{"output_index": c.output, "item": c.item("completed")})
	}
	resp := o.response("completed", u)
	typ := "response.completed"
	if resp["status"] == "incomplete" {
		typ = "response.incomplete"
	}
	return o.emit(w, typ, map[string]any{"response": resp})
}

func (o *responsesOut) fail(w http.ResponseWriter, msg string) {
	o.emit(w, "error", map[string]any{"code": "server_error", "message": msg, "param": nil})
	resp := o.response("failed", nil)
	resp["error"] = map[string]any{"code": "server_error", "message": msg}
	o.emit(w, "response.failed", map[string]any{"response": resp})
}
