package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// A request body is read once into a canonical form, and everything the
// gateway counts and forwards comes from that form:
//
//   - The body is decoded into generic JSON and encoded again, so a key
//     given twice at any depth is kept once (the last, as Go keeps it):
//     what is forwarded is what was read.
//   - Fields are looked up by their exact names. A key that is not a
//     known field's name but equals one ignoring case ("Messages",
//     "Model", "N", a message's "Content") is refused with 400: Go's
//     decoder would match it to the field while the provider, which
//     matches exactly, would read the other one.
//   - Input is counted on everything forwarded that is not a known scalar
//     parameter (see scalarParams): each message's content and, as JSON,
//     its other fields but the role (name, tool_calls, ...); and, as JSON,
//     every other top-level field (tools, tool_choice, response_format
//     with its schema, prediction, stop, logit_bias, metadata, fields the
//     gateway does not know...). JSON counts more tokens than the
//     provider's rendering of it, so the count errs high, never low.

// scalarParams are the top-level parameters that cost no input tokens
// (numbers, booleans, short enums): they are not counted.
var scalarParams = map[string]bool{
	"model": true, "stream": true, "max_tokens": true, "max_completion_tokens": true, "n": true,
	"temperature": true, "top_p": true, "presence_penalty": true, "frequency_penalty": true, "seed": true,
	"logprobs": true, "top_logprobs": true, "user": true, "store": true, "parallel_tool_calls": true,
	"service_tier": true, "reasoning_effort": true, "stream_options": true, "modalities": true, "verbosity": true,
}

// chatPolicy scans a chat completion's body.
var chatPolicy = scanPolicy{uncounted: scalarParams}

// countedParams are the top-level parameters the gateway knows that are
// counted as input.
var countedParams = map[string]bool{
	"messages": true, "tools": true, "tool_choice": true, "functions": true, "function_call": true,
	"response_format": true, "stop": true, "logit_bias": true, "metadata": true, "prediction": true,
	"audio": true, "web_search_options": true,
}

// messageFields and partFields are the known fields of a message and of
// a content part.
var (
	messageFields = []string{"role", "content", "name", "tool_calls", "tool_call_id", "function_call", "refusal", "audio"}
	partFields    = []string{"type", "text", "image_url", "input_audio", "file", "refusal"}
	topFields     = func() []string {
		var out []string
		for _, m := range []map[string]bool{scalarParams, countedParams} {
			for k := range m {
				out = append(out, k)
			}
		}
		sort.Strings(out)
		return out
	}()
)

// chatRequest is what the gateway reads of a request.
type chatRequest struct {
	Model               string
	Stream              bool
	MaxTokens           *int64
	MaxCompletionTokens *int64
	// N choices each take up to the output cap.
	N             *int64
	StreamOptions json.RawMessage

	// raw is the canonical body by field, forwarded with the output cap
	// and stream options set; messages are its messages by field.
	raw      map[string]json.RawMessage
	messages []map[string]json.RawMessage
}

// requestError is a 400 naming the parameter at fault.
type requestError struct {
	param, msg string
}

func (e *requestError) Error() string { return e.msg }

// caseVariant returns the known name that key equals ignoring case but
// not exactly, if any.
func caseVariant(key string, known []string) (string, bool) {
	for _, k := range known {
		if k != key && strings.EqualFold(k, key) {
			return k, true
		}
	}
	return "", false
}

func checkCase(obj map[string]json.RawMessage, known []string, where string) error {
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if want, ok := caseVariant(k, known); ok {
			return &requestError{param: where + k, msg: fmt.Sprintf("Unrecognized request argument supplied: %s%s (did you mean %q? names are case-sensitive).", where, k, want)}
		}
	}
	return nil
}

// canonical decodes body as generic JSON and encodes it again: a
// duplicated key is kept once, numbers as written.
func canonical(body []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("data after the JSON value")
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(out.Bytes(), "\n"), nil
}

// parseRequest reads a body; a *requestError is the client's fault (400).
func parseRequest(body []byte) (chatRequest, error) {
	var req chatRequest
	c, err := canonical(body)
	if err == nil {
		err = json.Unmarshal(c, &req.raw)
	}
	if err != nil || req.raw == nil {
		return req, &requestError{msg: "We could not parse the JSON body of your request: a JSON object is expected."}
	}
	if err := checkCase(req.raw, topFields, ""); err != nil {
		return req, err
	}
	fields := []struct {
		name string
		dst  any
	}{{"model", &req.Model}, {"stream", &req.Stream}, {"max_tokens", &req.MaxTokens}, {"max_completion_tokens", &req.MaxCompletionTokens},
		{"n", &req.N}, {"stream_options", &req.StreamOptions}, {"messages", &req.messages}}
	for _, f := range fields {
		v, ok := req.raw[f.name]
		if !ok || string(v) == "null" {
			continue
		}
		if err := json.Unmarshal(v, f.dst); err != nil {
			return req, &requestError{param: f.name, msg: fmt.Sprintf("Invalid type for '%s': %s is not what it takes.", f.name, truncate(string(v), 40))}
		}
	}
	for i, m := range req.messages {
		if m == nil {
			return req, &requestError{param: fmt.Sprintf("messages[%d]", i), msg: fmt.Sprintf("messages[%d] must be an object.", i)}
		}
		if err := checkCase(m, messageFields, fmt.Sprintf("messages[%d].", i)); err != nil {
			return req, err
		}
	}
	return req, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// texts returns what the provider counts of the request, one string per
// message as in ratelimit.Tokenizer.CountMessages (see the rule above).
func (c chatRequest) texts() ([]string, error) {
	var out []string
	for i, m := range c.messages {
		s, err := contentText(m["content"], i)
		if err != nil {
			return nil, err
		}
		for _, k := range sortedKeys(m) {
			if k != "role" && k != "content" {
				s += " " + k + string(m[k])
			}
		}
		out = append(out, s)
	}
	for _, k := range sortedKeys(c.raw) {
		if !scalarParams[k] && k != "messages" {
			out = append(out, k+string(c.raw[k]))
		}
	}
	return out, nil
}

// contentText is a message's content: a string, or its text parts.
func contentText(content json.RawMessage, i int) (string, error) {
	var s string
	switch {
	case len(content) == 0 || string(content) == "null":
	case content[0] == '"':
		if err := json.Unmarshal(content, &s); err != nil {
			return "", &requestError{param: fmt.Sprintf("messages[%d].content", i), msg: fmt.Sprintf("messages[%d].content: %v", i, err)}
		}
	case content[0] == '[':
		var parts []map[string]json.RawMessage
		if err := json.Unmarshal(content, &parts); err != nil {
			return "", &requestError{param: fmt.Sprintf("messages[%d].content", i), msg: fmt.Sprintf("messages[%d].content must be a string or an array of parts", i)}
		}
		for j, p := range parts {
			where := fmt.Sprintf("messages[%d].content[%d].", i, j)
			if err := checkCase(p, partFields, where); err != nil {
				return "", err
			}
			var typ, text string
			json.Unmarshal(p["type"], &typ)
			if typ != "text" {
				return "", &requestError{param: where + "type", msg: fmt.Sprintf("%stype: the gateway counts text parts only, not %q", where, typ)}
			}
			if err := json.Unmarshal(p["text"], &text); err != nil {
				return "", &requestError{param: where + "text", msg: where + "text must be a string"}
			}
			s += text
			for _, k := range sortedKeys(p) {
				if k != "type" && k != "text" {
					s += " " + k + string(p[k])
				}
			}
		}
	default:
		return "", &requestError{param: fmt.Sprintf("messages[%d].content", i), msg: fmt.Sprintf("messages[%d].content must be a string or an array of parts", i)}
	}
	return s, nil
}

func sortedKeys(m map[string]json.RawMessage) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
