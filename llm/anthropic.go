package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	anthropic "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
)

// Anthropic calls Anthropic's Messages API through its official SDK.
// The SDK's own retries are off: a 429 goes back to admission, other
// failures are retried by the workers through admission.
type Anthropic struct {
	c       anthropic.Client
	timeout time.Duration
}

// NewAnthropic returns a client. baseURL defaults to Anthropic's (it is
// the API's root, without /v1); timeout bounds one call (default 120s).
// Nothing is read from the environment (ANTHROPIC_API_KEY,
// ANTHROPIC_BASE_URL): prq's configuration names the key.
func NewAnthropic(apiKey, baseURL string, timeout time.Duration, hc *http.Client) *Anthropic {
	// the key goes in x-api-key, the header Anthropic's API reference
	// documents (the SDK's WithAPIKey sends it as a bearer token)
	opts := []option.RequestOption{option.WithoutEnvironmentDefaults(), option.WithHeader("x-api-key", apiKey), option.WithMaxRetries(0)}
	if baseURL != "" {
		opts = append(opts, option.WithBaseURL(strings.TrimSuffix(baseURL, "/")+"/"))
	}
	if hc != nil {
		opts = append(opts, option.WithHTTPClient(hc))
	}
	if timeout <= 0 {
		timeout = 120 * time.Second
	}
	return &Anthropic{c: anthropic.NewClient(opts...), timeout: timeout}
}

// anthropicParams builds the Messages request: System as the system
// prompt, Context and User as the first user message's two text blocks,
// then the turns. A JSON-schema format becomes one
// tool whose input_schema is the schema, and tool_choice forces it: the
// reply is the tool's input, which the API validates as JSON. The other
// formats rely on the prompt (Anthropic has no json_object mode).
func anthropicParams(r Request) (anthropic.MessageNewParams, string, error) {
	p := anthropic.MessageNewParams{Model: anthropic.Model(r.Model), MaxTokens: r.MaxOutput}
	if p.MaxTokens <= 0 {
		p.MaxTokens = 1024 // required by the API
	}
	// Two cache breakpoints ("Prompt caching": a cache_control block ends
	// a cached prefix of tools, system and messages; at most 4): the
	// instructions, the same for every pull request, and the pull
	// request's context, the same for all its calls. A prefix shorter
	// than the model's minimum is not cached, without an error.
	cache := anthropic.NewCacheControlEphemeralParam()
	if r.CacheLong {
		cache.TTL = anthropic.CacheControlEphemeralTTLTTL1h
	}
	if r.System != "" {
		p.System = []anthropic.TextBlockParam{{Text: r.System, CacheControl: cache}}
	}
	first := []anthropic.ContentBlockParamUnion{anthropic.NewTextBlock(r.User)}
	if r.Context != "" {
		first = append([]anthropic.ContentBlockParamUnion{{OfText: &anthropic.TextBlockParam{Text: r.Context, CacheControl: cache}}}, first...)
	}
	p.Messages = append(p.Messages, anthropic.NewUserMessage(first...))
	for _, t := range r.Turns {
		if t.Role == "assistant" {
			p.Messages = append(p.Messages, anthropic.NewAssistantMessage(anthropic.NewTextBlock(t.Content)))
		} else {
			p.Messages = append(p.Messages, anthropic.NewUserMessage(anthropic.NewTextBlock(t.Content)))
		}
	}
	if r.Format.Type != FormatJSONSchema || len(r.Format.Schema) == 0 {
		return p, "", nil
	}
	var schema map[string]any
	if err := json.Unmarshal(r.Format.Schema, &schema); err != nil {
		return p, "", fmt.Errorf("format schema: %w", err)
	}
	in := anthropic.ToolInputSchemaParam{Properties: schema["properties"], ExtraFields: map[string]any{}}
	if req, ok := schema["required"].([]any); ok {
		for _, x := range req {
			if s, ok := x.(string); ok {
				in.Required = append(in.Required, s)
			}
		}
	}
	for k, v := range schema {
		if k != "properties" && k != "required" && k != "type" {
			in.ExtraFields[k] = v
		}
	}
	name := r.Format.Name
	if name == "" {
		name = "reply"
	}
	p.Tools = []anthropic.ToolUnionParam{anthropic.ToolUnionParamOfTool(in, name)}
	p.ToolChoice = anthropic.ToolChoiceParamOfTool(name)
	return p, name, nil
}

// Complete makes one call.
func (a *Anthropic) Complete(ctx context.Context, r Request) (Response, error) {
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	ctx, stop := withFirstByte(ctx, r.FirstByte)
	defer stop()
	p, tool, err := anthropicParams(r)
	if err != nil {
		return Response{}, &Error{Kind: ErrPermanent, Message: err.Error()}
	}
	var hr *http.Response
	msg, err := a.c.Messages.New(ctx, p, option.WithResponseInto(&hr))
	var h http.Header
	if hr != nil {
		h = hr.Header
	}
	if fb := noFirstByte(ctx, err); fb != nil {
		return Response{}, fb
	}
	if err != nil {
		return Response{}, classifyAnthropic(err, h)
	}
	var text strings.Builder
	for _, b := range msg.Content {
		switch {
		case b.Type == "tool_use" && b.Name == tool && tool != "":
			text.Reset()
			text.Write(b.Input)
		case b.Type == "text":
			text.WriteString(b.Text)
		}
	}
	finish := "stop"
	if msg.StopReason == anthropic.StopReasonMaxTokens {
		finish = "length"
	}
	if strings.TrimSpace(text.String()) == "" {
		if finish == "length" {
			return Response{}, &Error{Kind: ErrTransient, Message: "empty content: the output cap was used up", Header: h}
		}
		return Response{}, &Error{Kind: ErrTransient, Message: "empty content", Header: h}
	}
	u := msg.Usage
	return Response{Text: text.String(), FinishReason: finish,
		PromptTokens: u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens, OutputTokens: u.OutputTokens,
		CachedTokens: u.CacheReadInputTokens, CacheWriteTokens: u.CacheCreationInputTokens, Header: h}, nil
}

// classifyAnthropic sorts a failure as Anthropic's error reference
// describes its statuses: 401/403 authentication or permission and 402
// billing are the account's; 429 rate_limit_error goes back to
// admission; 529 overloaded_error and 5xx are transient; a prompt too
// long (400) or a request too large (413) does not fit.
func classifyAnthropic(err error, h http.Header) error {
	var ae *anthropic.Error
	if !errors.As(err, &ae) {
		return &Error{Kind: ErrTransient, Message: err.Error(), Header: h}
	}
	if ae.Response != nil {
		h = ae.Response.Header
	}
	e := &Error{Status: ae.StatusCode, Code: string(ae.Type()), Message: ae.Message, Header: h}
	e.Kind = KindOf(e.Status, e.Code, "", e.Message, false)
	return e
}
