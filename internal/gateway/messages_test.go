package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/prq-dev/prq/internal/gateway"
)

// TestMessages drives POST /v1/messages with the official Anthropic SDK,
// against an Anthropic model (forwarded natively) and an OpenAI model
// (translated to chat completions and back): a whole reply with a system
// prompt, a stream of Anthropic's events (accumulated by the SDK), a
// forced tool and the conversation continued with its result. The key's
// quota holds the usage the replies report, across both.
func TestMessages(t *testing.T) {
	t.Parallel()
	r := newMultiRig(t)
	secret, k := r.key(t, gateway.Spec{Name: "claude-code", Tier: "paid", QuotaTokens: 100000})
	c := anthropic.NewClient(option.WithoutEnvironmentDefaults(), option.WithBaseURL(r.url+"/"), option.WithAPIKey(secret), option.WithMaxRetries(0))
	ctx := context.Background()
	var usage int64
	add := func(u anthropic.Usage) { usage += u.InputTokens + u.OutputTokens }
	for _, model := range []string{r.claude, r.openai} {
		msg, err := c.Messages.New(ctx, anthropic.MessageNewParams{Model: anthropic.Model(model), MaxTokens: 100,
			System:   []anthropic.TextBlockParam{{Text: "You review code."}},
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Summarise the change."))}})
		if err != nil {
			t.Fatalf("%s: %v", model, err)
		}
		if len(msg.Content) == 0 || msg.Content[0].Text == "" || msg.Usage.OutputTokens == 0 || msg.StopReason == "" {
			t.Fatalf("%s: reply %s", model, msg.RawJSON())
		}
		add(msg.Usage)

		st := c.Messages.NewStreaming(ctx, anthropic.MessageNewParams{Model: anthropic.Model(model), MaxTokens: 60,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Stream a short answer."))}})
		var acc anthropic.Message
		events := 0
		for st.Next() {
			events++
			if err := acc.Accumulate(st.Current()); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.Err(); err != nil {
			t.Fatalf("%s stream: %v", model, err)
		}
		if events < 5 || len(acc.Content) == 0 || acc.Content[0].Text == "" || acc.Usage.OutputTokens == 0 {
			t.Fatalf("%s stream: %d events, %+v", model, events, acc)
		}
		add(acc.Usage)

		schema := anthropic.ToolInputSchemaParam{Properties: map[string]any{"path": map[string]any{"type": "string"}}, Required: []string{"path"}}
		tools := []anthropic.ToolUnionParam{anthropic.ToolUnionParamOfTool(schema, "read_file")}
		for _, stream := range []bool{false, true} {
			p := anthropic.MessageNewParams{Model: anthropic.Model(model), MaxTokens: 200, Tools: tools, ToolChoice: anthropic.ToolChoiceParamOfTool("read_file"),
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Open the README."))}}
			var got anthropic.Message
			if stream {
				st := c.Messages.NewStreaming(ctx, p)
				for st.Next() {
					if err := got.Accumulate(st.Current()); err != nil {
						t.Fatal(err)
					}
				}
				if err := st.Err(); err != nil {
					t.Fatal(err)
				}
			} else {
				res, err := c.Messages.New(ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				got = *res
			}
			add(got.Usage)
			var use *anthropic.ContentBlockUnion
			for i := range got.Content {
				if got.Content[i].Type == "tool_use" {
					use = &got.Content[i]
				}
			}
			var in map[string]string
			if use == nil || use.Name != "read_file" || json.Unmarshal(use.Input, &in) != nil || in["path"] == "" || got.StopReason != anthropic.StopReasonToolUse {
				t.Fatalf("%s stream %v: no read_file call: %s", model, stream, got.RawJSON())
			}
			next, err := c.Messages.New(ctx, anthropic.MessageNewParams{Model: anthropic.Model(model), MaxTokens: 100, Tools: tools,
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Open the README.")), got.ToParam(),
					anthropic.NewUserMessage(anthropic.NewToolResultBlock(use.ID, "# prq\nA job queue.", false))}})
			if err != nil {
				t.Fatalf("%s: after the tool result: %v", model, err)
			}
			if len(next.Content) == 0 || next.Content[0].Text == "" {
				t.Fatalf("%s: after the tool result: %s", model, next.RawJSON())
			}
			add(next.Usage)
		}
	}
	if got := r.used(t, k); got != usage {
		t.Fatalf("quota used %d, the replies' usage %d", got, usage)
	}

	// Anthropic's errors: max_tokens required, an unknown key
	_, err := c.Messages.New(ctx, anthropic.MessageNewParams{Model: anthropic.Model(r.claude),
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}})
	var ae *anthropic.Error
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusBadRequest || !strings.Contains(ae.RawJSON(), `"invalid_request_error"`) || !strings.Contains(ae.RawJSON(), "max_tokens") {
		t.Fatalf("without max_tokens: %v", err)
	}
	bad := anthropic.NewClient(option.WithoutEnvironmentDefaults(), option.WithBaseURL(r.url+"/"), option.WithAPIKey(gateway.KeyPrefix+"nope"), option.WithMaxRetries(0))
	_, err = bad.Messages.New(ctx, anthropic.MessageNewParams{Model: anthropic.Model(r.claude), MaxTokens: 10,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}})
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusUnauthorized || !strings.Contains(ae.RawJSON(), `"authentication_error"`) {
		t.Fatalf("unknown key: %v", err)
	}
	n, err := c.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: anthropic.Model(r.claude),
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Summarise the change."))}})
	if err != nil || n.InputTokens <= 0 {
		t.Fatalf("count_tokens: %+v %v", n, err)
	}
	if got := r.used(t, k); got != usage {
		t.Fatalf("count_tokens charged the quota: %d, was %d", got, usage)
	}
}

// claudeCodeBody is a request shaped like Claude Code's (RESEARCH.md):
// betas, thinking, context_management, output_config, a role "system"
// message inside messages, a tool with $schema and defer_loading, a large
// max_tokens.
func claudeCodeBody(model string, stream bool) string {
	b, _ := json.Marshal(map[string]any{
		"model": model, "max_tokens": 32000, "stream": stream,
		"thinking": map[string]any{"type": "enabled", "budget_tokens": 31999}, "context_management": map[string]any{"edits": []any{}},
		"output_config": map[string]any{"effort": "medium"}, "metadata": map[string]any{"user_id": "user_abc"},
		"system": []any{map[string]any{"type": "text", "text": "You are Claude Code.", "cache_control": map[string]any{"type": "ephemeral"}}},
		"messages": []any{
			map[string]any{"role": "system", "content": "The repository is prq."},
			map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "What does the gateway do?"}}},
		},
		"tools": []any{map[string]any{"name": "Read", "description": "Read a file", "defer_loading": true,
			"input_schema": map[string]any{"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "properties": map[string]any{"file_path": map[string]any{"type": "string"}}, "required": []string{"file_path"}}}},
	})
	return string(b)
}

// TestMessagesClaudeCodeShaped: what Claude Code sends (?beta=true,
// x-api-key, anthropic-beta, thinking, a system message in messages,
// $schema and defer_loading) is taken on either kind of model: natively
// with max_tokens lowered to what the quota leaves and the thinking
// budget below it, the betas passed on; translated with what a chat
// completion does not need dropped.
func TestMessagesClaudeCodeShaped(t *testing.T) {
	t.Parallel()
	r := newMultiRig(t)
	// the quota lowers max_tokens: four calls' caps stay within the
	// model's 20,000 output tokens per minute
	secret, _ := r.key(t, gateway.Spec{Name: "claude-code", Tier: "chat", QuotaTokens: 4000})
	for _, model := range []string{r.claude, r.openai} {
		for _, stream := range []bool{false, true} {
			req, _ := http.NewRequest(http.MethodPost, r.url+"/v1/messages?beta=true", strings.NewReader(claudeCodeBody(model, stream)))
			req.Header.Set("x-api-key", secret)
			req.Header.Set("anthropic-version", "2023-06-01")
			req.Header.Add("anthropic-beta", "interleaved-thinking-2025-05-14")
			req.Header.Add("anthropic-beta", "context-management-2025-06-27")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusOK || (stream && !strings.Contains(string(body), "event: message_stop")) || (!stream && !strings.Contains(string(body), `"type":"message"`)) {
				t.Fatalf("%s stream %v: %d %s", model, stream, res.StatusCode, body)
			}
		}
	}
	seen := r.antSeen.all()
	last := seen[len(seen)-1]
	var sent struct {
		MaxTokens int64 `json:"max_tokens"`
		Thinking  struct {
			Type   string `json:"type"`
			Budget int64  `json:"budget_tokens"`
		} `json:"thinking"`
	}
	json.Unmarshal(last.Body, &sent)
	if sent.MaxTokens >= 4000 || sent.Thinking.Budget >= sent.MaxTokens || len(last.Header.Values("anthropic-beta")) != 2 {
		t.Fatalf("sent natively: max_tokens %d, thinking %+v, betas %v", sent.MaxTokens, sent.Thinking, last.Header.Values("anthropic-beta"))
	}
	oa := r.oaSeen.all()
	if b := string(oa[len(oa)-1].Body); strings.Contains(b, "$schema") || strings.Contains(b, "defer_loading") || strings.Contains(b, "thinking") || !strings.Contains(b, "The repository is prq.") {
		t.Fatalf("translated: %s", b)
	}
}
