package gateway

// A model of an Anthropic provider is served by translation: the client
// speaks OpenAI's chat completions, the gateway sends Anthropic's
// Messages API (POST {base}/v1/messages, x-api-key, anthropic-version)
// and answers with the reply as a chat completion.
//
// Translated: system and developer messages become the system prompt
// (text blocks, in order); user and assistant messages with text content
// become the messages (a turn's consecutive messages joined as blocks of
// one); the output cap (max_tokens or max_completion_tokens, lowered to
// what the key's quota leaves) becomes max_tokens; stop becomes
// stop_sequences; temperature (0 to 1) and top_p as they are; user
// becomes metadata.user_id; n must be 1; response_format text, or
// json_schema as one tool forced by tool_choice whose input (the JSON
// reply) becomes the content. Any other parameter, and any other field
// of a message or a content part, is refused with 400 naming it, unless
// it asks for nothing (null, false, 0, "", {} or []): tools and
// functions, tool messages, images, logprobs, json_object, seed,
// penalties...
//
// Streaming: a stream: true request is streamed from Anthropic and its
// events translated to OpenAI's chunks as they come (the role, the
// content deltas, the finish reason, the usage when
// stream_options.include_usage, [DONE]; forwardAnthropicStream).
//
// The reply: the text blocks' text (or the forced tool's input) as the
// message's content; stop_reason end_turn, stop_sequence (or the forced
// tool's tool_use) → "stop", max_tokens → "length"; usage
// prompt_tokens = input_tokens plus the cache's input tokens,
// completion_tokens = output_tokens. Errors come back in OpenAI's shape:
// 429 after the gateway's own requeues stays 429; 529 (overloaded) is 503;
// a refusal of the gateway's key or account (401, 402, 403) is a 502
// that names no key;
// other refusals keep their status and Anthropic's message.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"
)

// anthropicRequest is the Messages API request a chat completion becomes.
type anthropicRequest struct {
	Model         string             `json:"model"`
	MaxTokens     int64              `json:"max_tokens"`
	System        []anthropicBlock   `json:"system,omitempty"`
	Messages      []anthropicMessage `json:"messages"`
	StopSequences []string           `json:"stop_sequences,omitempty"`
	Temperature   json.RawMessage    `json:"temperature,omitempty"`
	TopP          json.RawMessage    `json:"top_p,omitempty"`
	Metadata      *anthropicMetadata `json:"metadata,omitempty"`
	Tools         []anthropicTool    `json:"tools,omitempty"`
	ToolChoice    *anthropicChoice   `json:"tool_choice,omitempty"`
	Stream        bool               `json:"stream,omitempty"`

	// tool is the forced tool that carries a json_schema reply ("": none)
	tool string
}

type anthropicTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema"`
}

type anthropicChoice struct {
	Type string `json:"type"`
	Name string `json:"name"`
}

// toolName is what Anthropic takes as a tool's name (and OpenAI as a
// json_schema's).
var toolName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

type anthropicBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type anthropicMessage struct {
	Role    string           `json:"role"`
	Content []anthropicBlock `json:"content"`
}

type anthropicMetadata struct {
	UserID string `json:"user_id"`
}

// untranslatable is the 400 of a parameter the gateway cannot send to an
// Anthropic model.
func untranslatable(param, model, why string) error {
	return &requestError{param: param, msg: fmt.Sprintf(
		"'%s' is not supported for %s: the gateway translates requests to Anthropic's Messages API, and %s. Remove it, or use a model of an OpenAI-compatible provider.", param, model, why)}
}

// asksNothing reports whether a parameter's value is null or its type's
// zero (false, 0, "", {}, []): sent or not, it changes nothing.
func asksNothing(v json.RawMessage) bool {
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.UseNumber()
	var x any
	if dec.Decode(&x) != nil {
		return false
	}
	switch x := x.(type) {
	case nil:
		return true
	case bool:
		return !x
	case string:
		return x == ""
	case json.Number:
		f, err := x.Float64()
		return err == nil && f == 0
	case map[string]any:
		return len(x) == 0
	case []any:
		return len(x) == 0
	}
	return false
}

// unit reads a number between 0 and 1 (temperature, top_p).
func unit(v json.RawMessage, param, model string) (json.RawMessage, error) {
	if string(v) == "null" {
		return nil, nil
	}
	var f float64
	if err := json.Unmarshal(v, &f); err != nil {
		return nil, &requestError{param: param, msg: fmt.Sprintf("Invalid type for '%s': a number is expected.", param)}
	}
	if f < 0 || f > 1 {
		return nil, &requestError{param: param, msg: fmt.Sprintf("'%s' must be between 0 and 1 for %s (Anthropic's range), got %s.", param, model, v)}
	}
	return v, nil
}

// toAnthropic translates a request for an Anthropic model (see the rules
// above); a *requestError names what cannot be translated. MaxTokens is
// set at the call, when the cap is known.
func toAnthropic(req chatRequest) (*anthropicRequest, error) {
	model := req.Model
	a := &anthropicRequest{Model: model}
	var err error
	for _, k := range sortedKeys(req.raw) {
		v := req.raw[k]
		switch k {
		case "model", "messages", "max_tokens", "max_completion_tokens", "stream", "stream_options":
			// read by the gateway itself
		case "n":
			if req.N != nil && *req.N != 1 {
				return nil, untranslatable("n", model, "an Anthropic model answers with one choice (n must be 1)")
			}
		case "stop":
			switch {
			case string(v) == "null":
			case len(v) > 0 && v[0] == '"':
				var s string
				json.Unmarshal(v, &s)
				if s != "" {
					a.StopSequences = []string{s}
				}
			default:
				if err := json.Unmarshal(v, &a.StopSequences); err != nil {
					return nil, &requestError{param: "stop", msg: "Invalid type for 'stop': a string or an array of strings is expected."}
				}
			}
		case "temperature":
			if a.Temperature, err = unit(v, k, model); err != nil {
				return nil, err
			}
		case "top_p":
			if a.TopP, err = unit(v, k, model); err != nil {
				return nil, err
			}
		case "user":
			var s string
			if json.Unmarshal(v, &s) != nil {
				return nil, &requestError{param: "user", msg: "Invalid type for 'user': a string is expected."}
			}
			if s != "" {
				a.Metadata = &anthropicMetadata{UserID: s}
			}
		case "response_format":
			if err := a.responseFormat(v); err != nil {
				return nil, err
			}
		default:
			if !asksNothing(v) {
				return nil, untranslatable(k, model, "it has no translation for this parameter")
			}
		}
	}
	for i, m := range req.messages {
		var role string
		if err := json.Unmarshal(m["role"], &role); err != nil {
			return nil, &requestError{param: fmt.Sprintf("messages[%d].role", i), msg: fmt.Sprintf("messages[%d].role must be a string.", i)}
		}
		switch role {
		case "system", "developer", "user", "assistant":
		default:
			return nil, untranslatable(fmt.Sprintf("messages[%d].role", i), model, fmt.Sprintf("it translates system, developer, user and assistant messages, not %q (tools are not translated)", role))
		}
		for _, k := range sortedKeys(m) {
			if k != "role" && k != "content" && !asksNothing(m[k]) {
				return nil, untranslatable(fmt.Sprintf("messages[%d].%s", i, k), model, "it translates a message's role and text content only")
			}
		}
		blocks, err := anthropicBlocks(m["content"], i, model)
		if err != nil {
			return nil, err
		}
		switch role {
		case "system", "developer":
			a.System = append(a.System, blocks...)
		default: // user, assistant
			if len(blocks) == 0 {
				continue
			}
			if n := len(a.Messages); n > 0 && a.Messages[n-1].Role == role {
				a.Messages[n-1].Content = append(a.Messages[n-1].Content, blocks...)
			} else {
				a.Messages = append(a.Messages, anthropicMessage{Role: role, Content: blocks})
			}
		}
	}
	if len(a.Messages) == 0 || a.Messages[0].Role != "user" {
		return nil, &requestError{param: "messages", msg: fmt.Sprintf("'messages': %s is an Anthropic model, whose conversation (besides system and developer messages) must start with a user message with some text.", model)}
	}
	return a, nil
}

// responseFormat translates response_format: text is the default; a
// json_schema becomes one tool whose input_schema is the schema, forced
// by tool_choice (as prq's own Anthropic client asks for structured
// reviews): the reply is the tool's input, a JSON object. json_object
// has no equivalent (Anthropic has no JSON mode without a schema).
func (a *anthropicRequest) responseFormat(v json.RawMessage) error {
	if string(v) == "null" {
		return nil
	}
	var f struct {
		Type       string `json:"type"`
		JSONSchema *struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Schema      json.RawMessage `json:"schema"`
		} `json:"json_schema"`
	}
	if err := json.Unmarshal(v, &f); err != nil {
		return &requestError{param: "response_format", msg: "Invalid type for 'response_format': an object is expected."}
	}
	switch f.Type {
	case "text":
		return nil
	case "json_schema":
	default:
		return untranslatable("response_format", a.Model, fmt.Sprintf("response_format %q has no equivalent there (text and json_schema do)", f.Type))
	}
	js := f.JSONSchema
	if js == nil {
		return &requestError{param: "response_format.json_schema", msg: "Missing required parameter: 'response_format.json_schema'."}
	}
	if !toolName.MatchString(js.Name) {
		return &requestError{param: "response_format.json_schema.name", msg: "'response_format.json_schema.name' must be 1 to 64 letters, digits, underscores or dashes."}
	}
	var schema struct {
		Type any `json:"type"`
	}
	if err := json.Unmarshal(js.Schema, &schema); err != nil || schema.Type != "object" {
		return untranslatable("response_format.json_schema.schema", a.Model, `a structured reply is a tool's input there, whose schema must be of "type": "object"`)
	}
	a.Tools = []anthropicTool{{Name: js.Name, Description: js.Description, InputSchema: js.Schema}}
	a.ToolChoice = &anthropicChoice{Type: "tool", Name: js.Name}
	a.tool = js.Name
	return nil
}

// anthropicBlocks is a message's content as text blocks (empty text
// dropped: Anthropic refuses empty blocks).
func anthropicBlocks(content json.RawMessage, i int, model string) ([]anthropicBlock, error) {
	where := fmt.Sprintf("messages[%d].content", i)
	switch {
	case len(content) == 0 || string(content) == "null":
		return nil, nil
	case content[0] == '"':
		var s string
		if err := json.Unmarshal(content, &s); err != nil {
			return nil, &requestError{param: where, msg: where + ": " + err.Error()}
		}
		if s == "" {
			return nil, nil
		}
		return []anthropicBlock{{Type: "text", Text: s}}, nil
	case content[0] == '[':
		var parts []map[string]json.RawMessage
		if err := json.Unmarshal(content, &parts); err != nil {
			return nil, &requestError{param: where, msg: where + " must be a string or an array of parts"}
		}
		var out []anthropicBlock
		for j, p := range parts {
			at := fmt.Sprintf("%s[%d]", where, j)
			var typ, text string
			json.Unmarshal(p["type"], &typ)
			if typ != "text" {
				return nil, untranslatable(at+".type", model, fmt.Sprintf("it translates text parts only, not %q", typ))
			}
			if err := json.Unmarshal(p["text"], &text); err != nil {
				return nil, &requestError{param: at + ".text", msg: at + ".text must be a string"}
			}
			for _, k := range sortedKeys(p) {
				if k != "type" && k != "text" && !asksNothing(p[k]) {
					return nil, untranslatable(at+"."+k, model, "it translates a part's text only")
				}
			}
			if text != "" {
				out = append(out, anthropicBlock{Type: "text", Text: text})
			}
		}
		return out, nil
	}
	return nil, &requestError{param: where, msg: where + " must be a string or an array of parts"}
}

// anthropicReply is what the gateway reads of a Messages API reply.
type anthropicReply struct {
	ID      string `json:"id"`
	Type    string `json:"type"`
	Content []struct {
		Type  string          `json:"type"`
		Text  string          `json:"text"`
		Name  string          `json:"name"`
		Input json.RawMessage `json:"input"`
	} `json:"content"`
	StopReason string         `json:"stop_reason"`
	Usage      anthropicUsage `json:"usage"`
}

// anthropicUsage is Anthropic's count of a call.
type anthropicUsage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
}

// input is every input token Anthropic counted, cache writes and reads
// too: OpenAI's prompt tokens.
func (u anthropicUsage) input() int64 {
	return u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens
}

// usage is the reply's count in OpenAI's terms.
func (a anthropicReply) usage() *usage {
	return a.Usage.of(a.Usage)
}

// of is the usage of a reply whose input Anthropic counted in u and
// output in out (the same for a whole reply; a stream's start and its
// last delta).
func (u anthropicUsage) of(out anthropicUsage) *usage {
	in := u
	if out.InputTokens > 0 { // newer streams repeat the input in message_delta
		in = out
	}
	return &usage{PromptTokens: in.input(), CompletionTokens: out.OutputTokens, cacheRead: in.CacheReadInputTokens, cacheWrite: in.CacheCreationInputTokens}
}

// finishReason is OpenAI's name of Anthropic's stop reason (the one
// map, anthropicFinish); the forced tool of a json_schema reply (tool)
// ends it as a stop.
func finishReason(stop, tool string) string {
	return forcedFinish(anthropicFinish(stop), tool)
}

// forcedFinish is a finish as the client sees it: a reply that called
// the forced tool of a json_schema request (tool) ended as a stop.
func forcedFinish(finish, tool string) string {
	if finish == finishTools && tool != "" {
		return finishStop
	}
	return finish
}

// text is the reply's content: the input of the forced tool when there
// is one (a json_schema reply), else the text blocks, joined.
func (a anthropicReply) text(tool string) string {
	var b strings.Builder
	for _, c := range a.Content {
		switch {
		case tool != "" && c.Type == "tool_use" && c.Name == tool:
			return string(c.Input)
		case c.Type == "text":
			b.WriteString(c.Text)
		}
	}
	return b.String()
}

// chatCompletion is OpenAI's chat completion object.
type chatCompletion struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   *completionUsage   `json:"usage,omitempty"`
}

type completionChoice struct {
	Index        int                `json:"index"`
	Message      *completionMessage `json:"message,omitempty"`
	Delta        *completionMessage `json:"delta,omitempty"`
	Logprobs     *struct{}          `json:"logprobs"`
	FinishReason *string            `json:"finish_reason"`
}

type completionMessage struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

type completionUsage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

func usageOf(u *usage) *completionUsage {
	return &completionUsage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.PromptTokens + u.CompletionTokens}
}

// completionOf is the reply as a chat completion of model (tool: the
// forced tool of a json_schema reply).
func completionOf(a anthropicReply, model, tool string, created int64) chatCompletion {
	text, finish := a.text(tool), finishReason(a.StopReason, tool)
	return chatCompletion{ID: a.ID, Object: "chat.completion", Created: created, Model: model,
		Choices: []completionChoice{{Message: &completionMessage{Role: "assistant", Content: &text}, FinishReason: &finish}},
		Usage:   usageOf(a.usage())}
}

// forwardAnthropic answers with an Anthropic reply translated: a chat
// completion, or a stream's events translated as they come; an error in
// OpenAI's shape.
func (g *Gateway) forwardAnthropic(w http.ResponseWriter, r *http.Request, q *request, resp *http.Response, stream, clientUsage bool, cancel context.CancelFunc) {
	ctx := r.Context()
	bg := context.WithoutCancel(ctx)
	if stream && resp.StatusCode == http.StatusOK {
		g.forwardAnthropicStream(w, r, q, resp, clientUsage, cancel)
		return
	}
	body, ok := g.readReply(w, r, q, resp)
	if !ok {
		return
	}
	if resp.StatusCode != http.StatusOK {
		g.anthropicError(w, r, q, resp, body)
		return
	}
	var reply anthropicReply
	if err := json.Unmarshal(body, &reply); err != nil || reply.Type != "message" {
		g.settle(bg, q, nil, true) // it ran: never overshoot
		g.log.WarnContext(ctx, "gateway: an Anthropic reply could not be read", "key", q.key.ID, "model", q.model, "err", err, "type", reply.Type)
		q.fail(w, http.StatusBadGateway, "server_error", "", "The provider's reply could not be read.")
		return
	}
	g.settle(bg, q, reply.usage(), true)
	g.keyHeaders(bg, w.Header(), q)
	b, _ := json.Marshal(completionOf(reply, q.model, q.anth.tool, time.Now().Unix()))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(b)
}

// forwardAnthropicStream translates a Messages stream into OpenAI's
// chunks as its events come: message_start → the role chunk; a text
// block's text_delta (or the forced tool's input_json_delta, for a
// json_schema reply) → a content chunk; message_delta → the finish
// reason and the output usage; message_stop → the finish chunk, the
// usage chunk when the client asked for it, [DONE]. It settles with the
// usage of message_start and message_delta before the client sees
// [DONE]; a stream that breaks off (idle, too long a line, an error
// event, the client gone) keeps its whole reservation, as forwardStream.
func (g *Gateway) forwardAnthropicStream(w http.ResponseWriter, r *http.Request, q *request, resp *http.Response, clientUsage bool, cancel context.CancelFunc) {
	bg := context.WithoutCancel(r.Context())
	g.keyHeaders(bg, w.Header(), q) // the quota as reserved
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	tool := q.anth.tool
	created := time.Now().Unix()
	in := &anthropicStreamIn{}
	finish, toolCall, settled := "", -1, false
	emit := func(choices []completionChoice, u *completionUsage) bool {
		c := chatCompletion{ID: in.id, Object: "chat.completion.chunk", Created: created, Model: q.model, Choices: choices}
		var b []byte
		if clientUsage { // every chunk has a usage field, null but the last's
			b, _ = json.Marshal(struct {
				chatCompletion
				Usage *completionUsage `json:"usage"`
			}{c, u})
		} else {
			b, _ = json.Marshal(c)
		}
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}
	content := func(text string) bool {
		return text == "" || emit([]completionChoice{{Delta: &completionMessage{Content: &text}}}, nil)
	}
	// chunk writes what one event says; false: the client left
	chunk := func(ev streamEvent) bool {
		switch ev.kind {
		case "start":
			empty := ""
			return emit([]completionChoice{{Delta: &completionMessage{Role: "assistant", Content: &empty}}}, nil)
		case "call":
			if tool != "" && ev.name == tool {
				toolCall = ev.index
			}
		case "text":
			if toolCall < 0 {
				return content(ev.text)
			}
		case "args":
			if ev.index == toolCall {
				return content(ev.text)
			}
		case "finish":
			finish = forcedFinish(ev.finish, tool)
		}
		return true
	}
	idle, err := g.relay(resp, cancel, func(line []byte) bool {
		data, isData := bytes.CutPrefix(line, []byte("data:"))
		if !isData {
			return true
		}
		evs, done, failure := in.read("", data)
		for _, ev := range evs {
			if !chunk(ev) {
				return false
			}
		}
		switch {
		case failure != "":
			g.log.WarnContext(bg, "gateway: Anthropic's stream ended with an error", "key", q.key.ID, "model", q.model, "type", in.errType)
			streamError(w, fmt.Sprintf("The provider's stream failed (%s).", in.errType))
			return false
		case done:
			u := in.usage()
			g.settle(bg, q, u, true) // before the client sees the end
			settled = true
			if finish == "" {
				finish = finishStop
			}
			ok := emit([]completionChoice{{Delta: &completionMessage{}, FinishReason: &finish}}, nil)
			if ok && clientUsage && u != nil {
				ok = emit([]completionChoice{}, usageOf(u))
			}
			if ok {
				fmt.Fprint(w, "data: [DONE]\n\n")
				if flusher != nil {
					flusher.Flush()
				}
			}
			return false
		}
		return true
	})
	if err != nil {
		g.streamBrokeOff(bg, w, r, q, idle, err)
	}
	if !settled {
		// the provider may have generated up to the cap: the reservation stands
		g.settle(bg, q, nil, true)
	}
}

// anthropicError answers an Anthropic error in OpenAI's shape and settles
// the call: a refusal generated nothing; an overload or a server error
// may have run (the reservation stands, as for OpenAI's 5xx).
func (g *Gateway) anthropicError(w http.ResponseWriter, r *http.Request, q *request, resp *http.Response, body []byte) {
	ctx := r.Context()
	bg := context.WithoutCancel(ctx)
	var e struct {
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	json.Unmarshal(body, &e)
	status := resp.StatusCode
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden || status == http.StatusPaymentRequired:
		// the gateway's own key or account: not the client's fault
		g.settleNothing(bg, q)
		g.log.ErrorContext(ctx, "gateway: the provider refused the gateway's key", "status", status, "type", e.Error.Type, "model", q.model)
		q.fail(w, http.StatusBadGateway, "server_error", "upstream_auth", "The provider refused the gateway's credentials; the gateway's operator has been told. Your key is fine.")
		return
	case status == http.StatusTooManyRequests:
		g.settle(bg, q, nil, false)
		if v := resp.Header.Get("retry-after"); v != "" {
			w.Header().Set("Retry-After", v)
		}
		g.keyHeaders(bg, w.Header(), q)
		q.fail(w, http.StatusTooManyRequests, "requests", "rate_limit_exceeded", "The provider's rate limit was reached ("+e.Error.Type+"): "+e.Error.Message)
	case status == 529:
		g.settle(bg, q, nil, true)
		g.keyHeaders(bg, w.Header(), q)
		q.fail(w, http.StatusServiceUnavailable, "server_error", "overloaded", "The provider is overloaded; try again later.")
	case status >= 500:
		g.settle(bg, q, nil, true)
		g.log.WarnContext(ctx, "gateway: Anthropic failed", "status", status, "type", e.Error.Type, "model", q.model)
		g.keyHeaders(bg, w.Header(), q)
		q.fail(w, http.StatusBadGateway, "server_error", "", fmt.Sprintf("The provider failed (%d %s).", status, e.Error.Type))
	default:
		g.settle(bg, q, nil, false)
		g.keyHeaders(bg, w.Header(), q)
		msg := e.Error.Message
		if msg == "" {
			msg = http.StatusText(status)
		}
		q.fail(w, status, "invalid_request_error", "", "The provider refused the request: "+msg)
	}
}
