package gateway

// A request translated from one API to another goes through a
// conversation, the terms the APIs share: system text, user and
// assistant turns of text, tool calls and tool results, function tools
// and a tool choice, the sampling parameters. Its reply comes back as a
// completion (text, tool calls, why it ended, usage), or, streamed, as
// streamEvents. Each client API reads its request into a conversation
// and writes a completion in its own shape (responses.go, messages.go);
// each wire (OpenAI's chat completions, Anthropic's Messages API) renders
// a conversation and reads its replies here. What a translation cannot
// carry is refused with 400 naming it; what it does not need (cache
// hints, betas, a tool's defer_loading) is dropped.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// conversation is a request in the APIs' shared terms.
type conversation struct {
	system []string
	turns  []turn
	tools  []toolDef
	// toolChoice is "", "auto", "none", "required", or a tool's name
	// prefixed "tool:"
	toolChoice string
	// parallel is false when the client forbids parallel tool calls
	parallel    *bool
	stop        []string
	temperature json.RawMessage
	topP        json.RawMessage
	user        string
	stream      bool
	// schema, when set, asks for a JSON reply of this schema (OpenAI's
	// json_schema response format; the chat wire only)
	schema *jsonSchema
}

type jsonSchema struct {
	Name   string          `json:"name"`
	Schema json.RawMessage `json:"schema"`
	Strict *bool           `json:"strict,omitempty"`
}

// turn is one role's consecutive message.
type turn struct {
	role  string // user or assistant
	parts []part
}

const (
	partText       = "text"
	partToolCall   = "tool_call"   // an assistant's call: id, name, args
	partToolResult = "tool_result" // a user's result of a call: id, text
)

type part struct {
	kind     string
	text     string
	id, name string
	args     string // a call's arguments, JSON text
	isError  bool
}

type toolDef struct {
	name, description string
	schema            json.RawMessage
}

// add appends a part to the last turn of role, or to a new one.
func (c *conversation) add(role string, p part) {
	if n := len(c.turns); n > 0 && c.turns[n-1].role == role {
		c.turns[n-1].parts = append(c.turns[n-1].parts, p)
		return
	}
	c.turns = append(c.turns, turn{role: role, parts: []part{p}})
}

// chatBody renders the conversation as a chat completion of model with
// the output cap (max_completion_tokens for a reasoning model).
func (c *conversation) chatBody(model string, m Model, cap int64) ([]byte, error) {
	var msgs []map[string]any
	if len(c.system) > 0 {
		msgs = append(msgs, map[string]any{"role": "system", "content": strings.Join(c.system, "\n\n")})
	}
	for _, t := range c.turns {
		var text strings.Builder
		var calls []map[string]any
		for _, p := range t.parts {
			switch p.kind {
			case partText:
				text.WriteString(p.text)
			case partToolCall:
				calls = append(calls, map[string]any{"id": p.id, "type": "function", "function": map[string]any{"name": p.name, "arguments": p.args}})
			case partToolResult:
				content := p.text
				if p.isError {
					content = "Error: " + content
				}
				msgs = append(msgs, map[string]any{"role": "tool", "tool_call_id": p.id, "content": content})
			}
		}
		switch {
		case t.role == "assistant" && (text.Len() > 0 || len(calls) > 0):
			msg := map[string]any{"role": "assistant", "content": nil}
			if text.Len() > 0 {
				msg["content"] = text.String()
			}
			if len(calls) > 0 {
				msg["tool_calls"] = calls
			}
			msgs = append(msgs, msg)
		case t.role == "user" && text.Len() > 0:
			msgs = append(msgs, map[string]any{"role": "user", "content": text.String()})
		}
	}
	body := map[string]any{"model": model, "messages": msgs}
	if m.Reasoning {
		body["max_completion_tokens"] = cap
	} else {
		body["max_tokens"] = cap
	}
	if len(c.tools) > 0 {
		var tools []map[string]any
		for _, t := range c.tools {
			f := map[string]any{"name": t.name, "parameters": withoutSchemaKeyword(t.schema)}
			if t.description != "" {
				f["description"] = t.description
			}
			tools = append(tools, map[string]any{"type": "function", "function": f})
		}
		body["tools"] = tools
		switch ch := c.toolChoice; {
		case ch == "":
		case strings.HasPrefix(ch, "tool:"):
			body["tool_choice"] = map[string]any{"type": "function", "function": map[string]any{"name": strings.TrimPrefix(ch, "tool:")}}
		default:
			body["tool_choice"] = ch
		}
		if c.parallel != nil {
			body["parallel_tool_calls"] = *c.parallel
		}
	}
	if len(c.stop) > 0 {
		body["stop"] = c.stop
	}
	if len(c.temperature) > 0 {
		body["temperature"] = c.temperature
	}
	if len(c.topP) > 0 {
		body["top_p"] = c.topP
	}
	if c.user != "" {
		body["user"] = c.user
	}
	if c.schema != nil {
		body["response_format"] = map[string]any{"type": "json_schema", "json_schema": c.schema}
	}
	if c.stream {
		body["stream"] = true
		body["stream_options"] = map[string]any{"include_usage": true}
	}
	return json.Marshal(body)
}

// withoutSchemaKeyword drops a schema's "$schema" (Anthropic's clients
// send it; OpenAI's function parameters take plain schemas).
func withoutSchemaKeyword(schema json.RawMessage) json.RawMessage {
	if len(schema) == 0 || string(schema) == "null" {
		return json.RawMessage(`{"type":"object","properties":{}}`)
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(schema, &m) != nil {
		return schema
	}
	if _, ok := m["$schema"]; !ok {
		return schema
	}
	delete(m, "$schema")
	b, _ := json.Marshal(m)
	return b
}

// anthropicBody renders the conversation as a Messages API request of
// model with max_tokens cap.
func (c *conversation) anthropicBody(model string, cap int64) ([]byte, error) {
	if c.schema != nil {
		return nil, untranslatable("text.format", model, "a JSON-schema reply has no translation there")
	}
	type block map[string]any
	var msgs []map[string]any
	for _, t := range c.turns {
		var blocks []block
		for _, p := range t.parts {
			switch p.kind {
			case partText:
				if p.text != "" {
					blocks = append(blocks, block{"type": "text", "text": p.text})
				}
			case partToolCall:
				input := json.RawMessage(p.args)
				var obj map[string]json.RawMessage
				if json.Unmarshal(input, &obj) != nil {
					input = json.RawMessage(`{}`)
				}
				blocks = append(blocks, block{"type": "tool_use", "id": p.id, "name": p.name, "input": input})
			case partToolResult:
				b := block{"type": "tool_result", "tool_use_id": p.id, "content": p.text}
				if p.isError {
					b["is_error"] = true
				}
				blocks = append(blocks, b)
			}
		}
		if len(blocks) == 0 {
			continue
		}
		if n := len(msgs); n > 0 && msgs[n-1]["role"] == t.role {
			msgs[n-1]["content"] = append(msgs[n-1]["content"].([]block), blocks...)
			continue
		}
		msgs = append(msgs, map[string]any{"role": t.role, "content": blocks})
	}
	if len(msgs) == 0 || msgs[0]["role"] != "user" {
		return nil, &requestError{param: "input", msg: fmt.Sprintf("%s is an Anthropic model, whose conversation (besides instructions) must start with a user message.", model)}
	}
	body := map[string]any{"model": model, "max_tokens": cap, "messages": msgs}
	if len(c.system) > 0 {
		var sys []block
		for _, s := range c.system {
			if s != "" {
				sys = append(sys, block{"type": "text", "text": s})
			}
		}
		if len(sys) > 0 {
			body["system"] = sys
		}
	}
	if len(c.tools) > 0 {
		var tools []map[string]any
		for _, t := range c.tools {
			schema := t.schema
			if len(schema) == 0 || string(schema) == "null" {
				schema = json.RawMessage(`{"type":"object","properties":{}}`)
			}
			tools = append(tools, map[string]any{"name": t.name, "description": t.description, "input_schema": schema})
		}
		body["tools"] = tools
		choice := map[string]any{}
		switch ch := c.toolChoice; {
		case ch == "" || ch == "auto":
			choice["type"] = "auto"
		case ch == "none":
			choice["type"] = "none"
		case ch == "required":
			choice["type"] = "any"
		default:
			choice["type"], choice["name"] = "tool", strings.TrimPrefix(ch, "tool:")
		}
		if c.parallel != nil && !*c.parallel && choice["type"] != "none" {
			choice["disable_parallel_tool_use"] = true
		}
		body["tool_choice"] = choice
	}
	if len(c.stop) > 0 {
		body["stop_sequences"] = c.stop
	}
	var err error
	if len(c.temperature) > 0 {
		if body["temperature"], err = unit(c.temperature, "temperature", model); err != nil {
			return nil, err
		}
	}
	if len(c.topP) > 0 {
		if body["top_p"], err = unit(c.topP, "top_p", model); err != nil {
			return nil, err
		}
	}
	if c.user != "" {
		body["metadata"] = map[string]any{"user_id": c.user}
	}
	if c.stream {
		body["stream"] = true
	}
	return json.Marshal(body)
}

// Why a completion ended, in the gateway's terms (OpenAI's).
const (
	finishStop   = "stop"
	finishLength = "length"
	finishTools  = "tool_calls"
	finishFilter = "content_filter"
)

// anthropicFinish is a Messages API stop reason in the gateway's terms.
func anthropicFinish(stop string) string {
	switch stop {
	case "max_tokens", "model_context_window_exceeded":
		return finishLength
	case "tool_use":
		return finishTools
	case "refusal":
		return finishFilter
	}
	return finishStop
}

// completion is a reply in the APIs' shared terms.
type completion struct {
	id     string
	text   string
	calls  []toolCall
	finish string
	usage  *usage
}

type toolCall struct{ id, name, args string }

// completionFromChat reads a chat completion (its first choice).
func completionFromChat(body []byte) (completion, error) {
	var r struct {
		ID      string `json:"id"`
		Choices []struct {
			Message struct {
				Content   *string `json:"content"`
				Refusal   *string `json:"refusal"`
				ToolCalls []struct {
					ID       string `json:"id"`
					Function struct {
						Name      string `json:"name"`
						Arguments string `json:"arguments"`
					} `json:"function"`
				} `json:"tool_calls"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage *usage `json:"usage"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return completion{}, err
	}
	if len(r.Choices) == 0 {
		return completion{}, fmt.Errorf("no choices")
	}
	ch := r.Choices[0]
	c := completion{id: r.ID, finish: ch.FinishReason, usage: r.Usage}
	if ch.Message.Content != nil {
		c.text = *ch.Message.Content
	} else if ch.Message.Refusal != nil {
		c.text, c.finish = *ch.Message.Refusal, finishFilter
	}
	for _, tc := range ch.Message.ToolCalls {
		c.calls = append(c.calls, toolCall{id: tc.ID, name: tc.Function.Name, args: tc.Function.Arguments})
	}
	return c, nil
}

// completionFromAnthropic reads a Messages API reply.
func completionFromAnthropic(body []byte) (completion, error) {
	var r struct {
		ID      string `json:"id"`
		Type    string `json:"type"`
		Content []struct {
			Type  string          `json:"type"`
			Text  string          `json:"text"`
			ID    string          `json:"id"`
			Name  string          `json:"name"`
			Input json.RawMessage `json:"input"`
		} `json:"content"`
		StopReason string         `json:"stop_reason"`
		Usage      anthropicUsage `json:"usage"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return completion{}, err
	}
	if r.Type != "message" {
		return completion{}, fmt.Errorf("a reply of type %q", r.Type)
	}
	c := completion{id: r.ID, finish: anthropicFinish(r.StopReason), usage: r.Usage.of(r.Usage)}
	var text strings.Builder
	for _, b := range r.Content {
		switch b.Type {
		case "text":
			text.WriteString(b.Text)
		case "tool_use":
			c.calls = append(c.calls, toolCall{id: b.ID, name: b.Name, args: string(b.Input)})
		}
	}
	c.text = text.String()
	return c, nil
}

// streamEvent is one step of a reply as it streams.
type streamEvent struct {
	kind   string // "start" (the reply begins), "text", "call" (a tool call begins), "args", "finish"
	index  int    // a call's index among the reply's calls
	text   string // text, or a call's arguments, delta
	id     string // a call's
	name   string // a call's
	finish string
}

// streamIn reads a wire's stream: each event's data, in order.
type streamIn interface {
	// read takes one event (its name when the wire names them) and
	// returns what it says; done at the stream's end, failure (its
	// message) on an error event.
	read(event string, data []byte) (evs []streamEvent, done bool, failure string)
	// usage is the provider's count, nil if the stream did not give it.
	usage() *usage
}

// chatStreamIn reads OpenAI's chat completion chunks (of the first
// choice), the usage chunk the gateway asks for, and [DONE].
type chatStreamIn struct {
	u     *usage
	calls map[int]bool
}

func (s *chatStreamIn) usage() *usage { return s.u }

func (s *chatStreamIn) read(_ string, data []byte) ([]streamEvent, bool, string) {
	data = bytes.TrimSpace(data)
	if bytes.Equal(data, []byte("[DONE]")) {
		return nil, true, ""
	}
	var ch struct {
		Choices []struct {
			Index int `json:"index"`
			Delta struct {
				Content   *string `json:"content"`
				Refusal   *string `json:"refusal"`
				ToolCalls []struct {
					Index    int    `json:"index"`
					ID       string `json:"id"`
					Function struct {
						Name      string `json:"name"`
						Arguments string `json:"arguments"`
					} `json:"function"`
				} `json:"tool_calls"`
			} `json:"delta"`
			FinishReason *string `json:"finish_reason"`
		} `json:"choices"`
		Usage *usage `json:"usage"`
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(data, &ch) != nil {
		return nil, false, ""
	}
	if ch.Error != nil {
		return nil, false, ch.Error.Message
	}
	if ch.Usage != nil {
		s.u = ch.Usage
	}
	var evs []streamEvent
	for _, c := range ch.Choices {
		if c.Index != 0 {
			continue
		}
		if c.Delta.Content != nil && *c.Delta.Content != "" {
			evs = append(evs, streamEvent{kind: "text", text: *c.Delta.Content})
		}
		if c.Delta.Refusal != nil && *c.Delta.Refusal != "" {
			evs = append(evs, streamEvent{kind: "text", text: *c.Delta.Refusal})
		}
		for _, tc := range c.Delta.ToolCalls {
			if s.calls == nil {
				s.calls = map[int]bool{}
			}
			if !s.calls[tc.Index] {
				s.calls[tc.Index] = true
				evs = append(evs, streamEvent{kind: "call", index: tc.Index, id: tc.ID, name: tc.Function.Name})
			}
			if tc.Function.Arguments != "" {
				evs = append(evs, streamEvent{kind: "args", index: tc.Index, text: tc.Function.Arguments})
			}
		}
		if c.FinishReason != nil && *c.FinishReason != "" {
			evs = append(evs, streamEvent{kind: "finish", finish: *c.FinishReason})
		}
	}
	return evs, false, ""
}

// anthropicEvent is what the gateway reads of a Messages stream's event.
type anthropicEvent struct {
	Type    string `json:"type"`
	Index   int    `json:"index"`
	Message *struct {
		ID    string         `json:"id"`
		Usage anthropicUsage `json:"usage"`
	} `json:"message"`
	ContentBlock *struct {
		Type string `json:"type"`
		ID   string `json:"id"`
		Name string `json:"name"`
	} `json:"content_block"`
	Delta *struct {
		Type        string `json:"type"`
		Text        string `json:"text"`
		PartialJSON string `json:"partial_json"`
		StopReason  string `json:"stop_reason"`
	} `json:"delta"`
	Usage *anthropicUsage `json:"usage"`
	Error *struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

// anthropicStreamIn is the gateway's one reader of a Messages API
// stream, whatever API the client speaks: message_start → a "start"
// event (the message's id and input usage kept), a tool block's start →
// a call, text and input JSON deltas → text and args, message_delta →
// the finish (anthropicFinish) and the output usage, message_stop → done,
// an error event → a failure (its type kept).
type anthropicStreamIn struct {
	id       string // the message's
	errType  string // an error event's
	in, out  anthropicUsage
	sawDelta bool
	tools    map[int]int // content block index → call index
}

func (s *anthropicStreamIn) usage() *usage {
	if !s.sawDelta {
		return nil
	}
	u := s.in.of(s.out)
	return u
}

func (s *anthropicStreamIn) read(_ string, data []byte) ([]streamEvent, bool, string) {
	var ev anthropicEvent
	if json.Unmarshal(bytes.TrimSpace(data), &ev) != nil {
		return nil, false, ""
	}
	switch ev.Type {
	case "message_start":
		if ev.Message != nil {
			s.id, s.in = ev.Message.ID, ev.Message.Usage
		}
		return []streamEvent{{kind: "start"}}, false, ""
	case "content_block_start":
		if b := ev.ContentBlock; b != nil && (b.Type == "tool_use" || b.Type == "server_tool_use") {
			if s.tools == nil {
				s.tools = map[int]int{}
			}
			i := len(s.tools)
			s.tools[ev.Index] = i
			return []streamEvent{{kind: "call", index: i, id: b.ID, name: b.Name}}, false, ""
		}
	case "content_block_delta":
		switch d := ev.Delta; {
		case d == nil:
		case d.Type == "text_delta" && d.Text != "":
			return []streamEvent{{kind: "text", text: d.Text}}, false, ""
		case d.Type == "input_json_delta" && d.PartialJSON != "":
			if i, ok := s.tools[ev.Index]; ok {
				return []streamEvent{{kind: "args", index: i, text: d.PartialJSON}}, false, ""
			}
		}
	case "message_delta":
		if ev.Usage != nil {
			s.out, s.sawDelta = *ev.Usage, true
		}
		if ev.Delta != nil && ev.Delta.StopReason != "" {
			return []streamEvent{{kind: "finish", finish: anthropicFinish(ev.Delta.StopReason)}}, false, ""
		}
	case "message_stop":
		return nil, true, ""
	case "error":
		msg := "the provider's stream failed"
		if ev.Error != nil {
			s.errType, msg = ev.Error.Type, ev.Error.Type+": "+ev.Error.Message
		}
		return nil, false, msg
	}
	return nil, false, ""
}
