// Package llm is prq's adapter to its LLM providers: an OpenAI-compatible
// chat completions API and Azure OpenAI (go-openai), and Anthropic's
// Messages API (anthropic-sdk-go), behind one Request and Response, with
// a Router that sends each model to its provider: one call with a timeout, the
// response headers kept for the rate-limit sync, the right max-tokens
// field for reasoning models, and every failure classified so the caller
// knows whether to go back to admission, retry, split, pause or give up.
// The same clients send batches to the providers' batch APIs (Batcher,
// batch.go). It does not retry, wait for room or count tokens against limits:
// ratelimit and admission own those, and the workers act on its errors.
package llm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"
)

// Client calls the provider.
type Client struct {
	c       *openai.Client
	timeout time.Duration
	// deployment is an Azure client's model-to-deployment mapping (nil
	// for OpenAI): a batch file's lines name the deployment.
	deployment func(model string) string
}

// New returns a client. baseURL defaults to OpenAI's; timeout bounds one
// call (default 120s).
func New(apiKey, baseURL string, timeout time.Duration, hc *http.Client) *Client {
	cfg := openai.DefaultConfig(apiKey)
	if baseURL != "" {
		cfg.BaseURL = strings.TrimSuffix(baseURL, "/")
	}
	var doer openai.HTTPDoer = http.DefaultClient
	if hc != nil {
		doer = hc
	}
	cfg.HTTPClient = cacheKeyDoer{next: doer}
	if timeout <= 0 {
		timeout = 120 * time.Second
	}
	return &Client{c: openai.NewClientWithConfig(cfg), timeout: timeout}
}

// NewAzure returns a client of an Azure OpenAI resource (go-openai's
// Azure configuration: the api-key header, the api-version query, and
// /openai/deployments/{deployment}/ paths). deployment maps a model name
// to its deployment (nil: the model's own name).
func NewAzure(apiKey, endpoint, apiVersion string, deployment func(model string) string, timeout time.Duration, hc *http.Client) *Client {
	cfg := openai.DefaultAzureConfig(apiKey, strings.TrimSuffix(endpoint, "/"))
	cfg.APIVersion = apiVersion
	if deployment != nil {
		cfg.AzureModelMapperFunc = deployment
	}
	if hc != nil {
		cfg.HTTPClient = hc
	}
	if timeout <= 0 {
		timeout = 120 * time.Second
	}
	return &Client{c: openai.NewClientWithConfig(cfg), timeout: timeout, deployment: cfg.GetAzureDeploymentByModel}
}

// Request is one chat call.
type Request struct {
	Model  string
	System string
	// Context is the part of the prompt every call about one pull
	// request shares (its title, description, files): sent after System
	// and before User, so that System and Context are a prefix the
	// provider's prompt cache can serve to the pull request's next calls:
	// a user message of its own on OpenAI-compatible APIs; on Anthropic
	// the first text block of the first user message (User the next),
	// with a cache breakpoint after System and one after Context. ""
	// sends none.
	Context string
	User    string
	// Turns follow User: an earlier reply and the correction asked for
	// (a repair attempt), in order.
	Turns     []Message
	MaxOutput int64
	// Reasoning models take MaxCompletionTokens (it includes reasoning).
	Reasoning bool
	// Format asks for a reply format; the zero value asks for nothing.
	Format Format
	// Key is the index of the provider's API key to call with (a Router
	// holds one client per key; admission says which key a job was
	// charged to). 0: the first.
	Key int
	// ServiceTier asks OpenAI for a processing tier: ServiceTierFlex for
	// flex processing (batch prices, slower, sometimes refused); ""
	// asks for none (the project's default).
	ServiceTier string
	// CacheKey groups requests that share a prefix on one cache
	// (OpenAI's prompt_cache_key): one per pull request. "" sends none.
	CacheKey string
	// CacheLong asks for the provider's longer cache lifetime where it
	// sells one (Anthropic's 1-hour cache_control, for batches), else
	// its default (5 minutes).
	CacheLong bool
	// FirstByte, when positive, abandons the call (ErrTransient) when no
	// byte of the reply arrived within it: a hung provider is noticed
	// before the call timeout. A non-streamed reply's headers come when
	// it is done, so it must exceed the longest reply. 0: none; a flex
	// call has none.
	FirstByte time.Duration
}

// ServiceTierFlex is OpenAI's flex processing.
const ServiceTierFlex = "flex"

// FlexTimeout is the least a flex call may take: flex queues (OpenAI
// advises a 15-minute timeout).
const FlexTimeout = 15 * time.Minute

// Message is one turn of a conversation.
type Message struct {
	Role    string // "user" or "assistant"
	Content string
}

// Messages returns the text of every message the request sends, in
// order: what the provider's admission rule (ceil(chars/4) + the output
// cap) counts.
func (r Request) Messages() []string {
	out := []string{}
	if r.System != "" {
		out = append(out, r.System)
	}
	if r.Context != "" {
		out = append(out, r.Context)
	}
	out = append(out, r.User)
	for _, t := range r.Turns {
		out = append(out, t.Content)
	}
	return out
}

// Contents returns the messages and then a response format's schema:
// the model reads the schema as part of its prompt and bills it as input,
// so an exact count of input tokens (for quotas) covers it.
func (r Request) Contents() []string {
	out := r.Messages()
	if r.Format.Type == FormatJSONSchema && len(r.Format.Schema) > 0 {
		out = append(out, string(r.Format.Schema))
	}
	return out
}

// FormatType is how a reply's format is asked for.
type FormatType string

const (
	// FormatText asks for nothing: the prompt describes the format and
	// the parser finds it in the text.
	FormatText FormatType = "text"
	// FormatJSONObject asks for any JSON object (response_format
	// json_object; a message must mention JSON).
	FormatJSONObject FormatType = "json_object"
	// FormatJSONSchema asks for JSON that follows a schema (structured
	// outputs, strict).
	FormatJSONSchema FormatType = "json_schema"
)

// ParseFormatType reads a format setting.
func ParseFormatType(s string) (FormatType, error) {
	switch f := FormatType(s); f {
	case FormatText, FormatJSONObject, FormatJSONSchema:
		return f, nil
	}
	return "", fmt.Errorf("llm: output format %q: want json_schema, json_object or text", s)
}

// Format is a reply format.
type Format struct {
	Type FormatType
	// Name and Schema describe the JSON for FormatJSONSchema.
	Name   string
	Schema json.RawMessage
}

func (f Format) openai() *openai.ChatCompletionResponseFormat {
	switch f.Type {
	case FormatJSONObject:
		return &openai.ChatCompletionResponseFormat{Type: openai.ChatCompletionResponseFormatTypeJSONObject}
	case FormatJSONSchema:
		return &openai.ChatCompletionResponseFormat{Type: openai.ChatCompletionResponseFormatTypeJSONSchema,
			JSONSchema: &openai.ChatCompletionResponseFormatJSONSchema{Name: f.Name, Schema: f.Schema, Strict: true}}
	}
	return nil
}

// Response is a successful call.
type Response struct {
	Text         string
	FinishReason string
	PromptTokens int64
	OutputTokens int64
	// CachedTokens and CacheWriteTokens are the parts of PromptTokens
	// the provider read from its prompt cache and wrote to it (OpenAI's
	// prompt_tokens_details.cached_tokens; Anthropic's
	// cache_read_input_tokens and cache_creation_input_tokens).
	CachedTokens, CacheWriteTokens int64
	// ServiceTier is the processing tier the provider says served the
	// call (OpenAI's service_tier: "flex", "default"); "" when it does not
	// say.
	ServiceTier string
	Header      http.Header
}

// Kinds of failure.
var (
	// ErrRateLimited: the provider said 429 rate_limit_exceeded: go back
	// to admission; not a failure of the job.
	ErrRateLimited = errors.New("llm: rate limited")
	// ErrTransient: 5xx, timeouts, broken or empty replies: retry with
	// backoff, through admission.
	ErrTransient = errors.New("llm: transient failure")
	// ErrContextLength: the prompt does not fit: split or skip.
	ErrContextLength = errors.New("llm: context length exceeded")
	// ErrAccount: insufficient_quota or a bad key: pause the model.
	ErrAccount = errors.New("llm: account problem")
	// ErrPermanent: any other 4xx: fail with a clear error.
	ErrPermanent = errors.New("llm: permanent failure")
	// ErrFlexUnavailable: a flex call refused (429 for want of capacity,
	// or a model flex does not serve): not billed; the job goes back to
	// admission to be called at the standard tier.
	ErrFlexUnavailable = errors.New("llm: flex processing unavailable")
)

// Error is a classified failure. Header holds the response headers when
// there was a response (go-openai keeps them on the failed response).
type Error struct {
	Kind       error
	Status     int
	Code       string
	Message    string
	RetryAfter time.Duration
	Header     http.Header
}

func (e *Error) Error() string {
	msg := e.Message
	if len(msg) > 300 {
		msg = msg[:300] + "…"
	}
	if e.Status != 0 {
		return fmt.Sprintf("%v: status %d %s: %s", e.Kind, e.Status, e.Code, msg)
	}
	return fmt.Sprintf("%v: %s", e.Kind, msg)
}

// Unwrap lets errors.Is match the kind.
func (e *Error) Unwrap() error { return e.Kind }

// Complete makes one call.
func (c *Client) Complete(ctx context.Context, r Request) (Response, error) {
	timeout := c.timeout
	if r.ServiceTier == ServiceTierFlex {
		timeout = max(timeout, FlexTimeout)
		r.FirstByte = 0 // flex queues before it answers
	}
	ctx, cancel := context.WithTimeout(withCacheKey(ctx, r.CacheKey), timeout)
	defer cancel()
	ctx, stop := withFirstByte(ctx, r.FirstByte)
	defer stop()
	resp, err := c.c.CreateChatCompletion(ctx, chatRequest(r))
	h := resp.Header()
	if fb := noFirstByte(ctx, err); fb != nil {
		return Response{}, fb
	}
	if err != nil {
		err = classify(err, h)
		if r.ServiceTier == ServiceTierFlex {
			err = flexRefusal(err)
		}
		return Response{}, err
	}
	return chatResponse(resp, h)
}

// chatRequest is the chat completion a request sends: System, Context
// and User as messages of their own, then Turns; the response format; the
// output cap in the field the model takes. (CacheKey travels apart:
// go-openai's request has no prompt_cache_key.)
func chatRequest(r Request) openai.ChatCompletionRequest {
	req := openai.ChatCompletionRequest{Model: r.Model, ServiceTier: openai.ServiceTier(r.ServiceTier)}
	if r.System != "" {
		req.Messages = append(req.Messages, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleSystem, Content: r.System})
	}
	if r.Context != "" {
		req.Messages = append(req.Messages, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: r.Context})
	}
	req.Messages = append(req.Messages, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: r.User})
	for _, t := range r.Turns {
		req.Messages = append(req.Messages, openai.ChatCompletionMessage{Role: t.Role, Content: t.Content})
	}
	req.ResponseFormat = r.Format.openai()
	if r.Reasoning {
		req.MaxCompletionTokens = int(r.MaxOutput)
	} else {
		//lint:ignore SA1019 max_tokens is what non-reasoning models and most OpenAI-compatible providers accept
		req.MaxTokens = int(r.MaxOutput)
	}
	return req
}

// chatResponse reads a chat completion: the first choice's text, its
// finish reason and the usage; no text is a transient failure.
func chatResponse(resp openai.ChatCompletionResponse, h http.Header) (Response, error) {
	if len(resp.Choices) == 0 {
		return Response{}, &Error{Kind: ErrTransient, Message: "reply has no choices", Header: h}
	}
	ch := resp.Choices[0]
	if strings.TrimSpace(ch.Message.Content) == "" {
		if ch.FinishReason == openai.FinishReasonLength {
			return Response{}, &Error{Kind: ErrTransient, Message: "empty content: the output cap was used up (reasoning?)", Header: h}
		}
		return Response{}, &Error{Kind: ErrTransient, Message: "empty content", Header: h}
	}
	return Response{Text: ch.Message.Content, FinishReason: string(ch.FinishReason),
		PromptTokens: int64(resp.Usage.PromptTokens), OutputTokens: int64(resp.Usage.CompletionTokens), CachedTokens: cachedTokens(resp.Usage),
		ServiceTier: string(resp.ServiceTier), Header: h}, nil
}

// flexRefusal reads a flex call's failure by KindOf's flex rule: a 429
// saying flex has no capacity, or a 400 naming the service tier, is
// ErrFlexUnavailable; anything else is as classified.
func flexRefusal(err error) error {
	var e *Error
	if errors.As(err, &e) && KindOf(e.Status, e.Code, "", e.Message, true) == ErrFlexUnavailable {
		e.Kind = ErrFlexUnavailable
	}
	return err
}

// KindOf sorts a provider's failure by its HTTP status and its error's
// code, type and message: the one rule every path that calls a provider
// (this package's clients, the gateway's relay) goes by. flex: the call
// asked for flex processing, whose refusals (a 429 "resource
// unavailable", a 400 naming the service tier) are not billed.
//
// 401, 402 and 403 (a refused, unpaid or unpermitted credential) and
// insufficient_quota are the account's; 429 goes back to admission; 413
// and a prompt over the context window do not fit; 5xx, 408 and no
// status are transient; any other 4xx is permanent.
func KindOf(status int, code, typ, message string, flex bool) error {
	text := strings.ToLower(code + " " + typ + " " + message)
	switch {
	case flex && status == http.StatusTooManyRequests && (strings.Contains(text, "resource_unavailable") || strings.Contains(text, "resource unavailable")),
		flex && status == http.StatusBadRequest && strings.Contains(text, "service_tier"):
		return ErrFlexUnavailable
	case code == "insufficient_quota" || typ == "insufficient_quota" || code == "invalid_api_key" ||
		status == http.StatusUnauthorized || status == http.StatusPaymentRequired || status == http.StatusForbidden:
		return ErrAccount
	case status == http.StatusTooManyRequests:
		return ErrRateLimited
	case status == http.StatusRequestEntityTooLarge || code == "context_length_exceeded" ||
		strings.Contains(text, "maximum context length") || strings.Contains(text, "prompt is too long"):
		return ErrContextLength
	case status >= 500 || status == http.StatusRequestTimeout || status == 0:
		return ErrTransient
	}
	return ErrPermanent
}

func classify(err error, h http.Header) error {
	var apiErr *openai.APIError
	var reqErr *openai.RequestError
	switch {
	case errors.As(err, &apiErr):
		e := &Error{Status: apiErr.HTTPStatusCode, Message: apiErr.Message, Header: h}
		// go-openai decodes a JSON null code as the int 0
		switch c := apiErr.Code.(type) {
		case nil:
		case string:
			e.Code = c
		case int:
			if c != 0 {
				e.Code = strconv.Itoa(c)
			}
		default:
			e.Code = fmt.Sprint(c)
		}
		e.Kind = KindOf(e.Status, e.Code, apiErr.Type, e.Message, false)
		return e
	case errors.As(err, &reqErr):
		e := &Error{Status: reqErr.HTTPStatusCode, Message: reqErr.Error(), Header: h}
		e.Kind = KindOf(e.Status, "", "", e.Message, false)
		return e
	}
	// timeouts, connection errors, truncated JSON
	return &Error{Kind: ErrTransient, Message: err.Error(), Header: h}
}

// cachedTokens is the part of a chat completion's prompt served from
// OpenAI's prompt cache (0 when the provider does not say).
func cachedTokens(u openai.Usage) int64 {
	if u.PromptTokensDetails == nil {
		return 0
	}
	return int64(u.PromptTokensDetails.CachedTokens)
}
