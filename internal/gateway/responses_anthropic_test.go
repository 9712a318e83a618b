package gateway_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/prq-dev/prq/internal/gateway"
)

// TestResponsesOnAnthropic: the Responses API for an Anthropic model is
// translated to the Messages API (instructions as the system prompt, a
// forced function tool as a forced tool_use) and its reply, whole and
// streamed, back; the quota holds the usage.
func TestResponsesOnAnthropic(t *testing.T) {
	t.Parallel()
	r := newMultiRig(t)
	secret, k := r.key(t, gateway.Spec{Name: "agents-sdk", Tier: "paid", QuotaTokens: 100000})
	c := openai.NewClient(option.WithBaseURL(r.url+"/v1/"), option.WithAPIKey(secret), option.WithMaxRetries(0))
	ctx := context.Background()
	resp, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: r.claude, MaxOutputTokens: openai.Int(80),
		Instructions: openai.String("Answer briefly."), Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("What changed?")}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.OutputText() == "" || resp.Usage.TotalTokens == 0 {
		t.Fatalf("reply %s", resp.RawJSON())
	}
	usage := resp.Usage.TotalTokens
	seen := r.antSeen.all()
	var sent struct {
		System    []struct{ Text string } `json:"system"`
		MaxTokens int64                   `json:"max_tokens"`
	}
	json.Unmarshal(seen[len(seen)-1].Body, &sent)
	if len(sent.System) != 1 || sent.System[0].Text != "Answer briefly." || sent.MaxTokens != 80 {
		t.Fatalf("sent to Anthropic: %s", seen[len(seen)-1].Body)
	}
	st := c.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: r.claude, Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Use the tool.")},
		Tools: []responses.ToolUnionParam{{OfFunction: &responses.FunctionToolParam{Name: "grep", Parameters: map[string]any{"type": "object",
			"properties": map[string]any{"pattern": map[string]any{"type": "string"}}, "required": []string{"pattern"}}}}},
		ToolChoice: responses.ResponseNewParamsToolChoiceUnion{OfToolChoiceMode: openai.Opt(responses.ToolChoiceOptionsRequired)}})
	var final responses.Response
	var args strings.Builder
	for st.Next() {
		switch ev := st.Current(); ev.Type {
		case "response.function_call_arguments.delta":
			args.WriteString(ev.Delta)
		case "response.completed":
			final = ev.Response
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	var a map[string]string
	if json.Unmarshal([]byte(args.String()), &a) != nil || a["pattern"] == "" || len(final.Output) == 0 || final.Output[0].Name != "grep" {
		t.Fatalf("streamed tool call: args %q, final %s", args.String(), final.RawJSON())
	}
	usage += final.Usage.TotalTokens
	if got := r.used(t, k); got != usage {
		t.Fatalf("quota used %d, usage %d", got, usage)
	}
}
