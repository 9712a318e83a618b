package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"github.com/prq-dev/prq/internal/gateway"
)

// TestResponses drives the Responses API through the gateway with the
// official openai SDK against the fake's chat completions (the gateway
// translates): a whole reply and a stream (response.created, the
// output_text deltas, response.completed with the usage), a forced
// function tool and the conversation continued with its output; the
// key's quota holds exactly the usage the replies report. Requests that
// need stored state are refused with 400 and nothing sent.
func TestResponses(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	secret, k := r.key(t, gateway.Spec{Name: "codex", Tier: "paid", QuotaTokens: 100000})
	c := r.sdk(secret)
	ctx := context.Background()
	var usage int64

	resp, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: r.model, MaxOutputTokens: openai.Int(100),
		Instructions: openai.String("You are a terse reviewer."), Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Summarise the change.")}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.OutputText() == "" || resp.Status != "completed" || resp.Usage.TotalTokens == 0 || resp.Usage.InputTokens == 0 {
		t.Fatalf("reply %s", resp.RawJSON())
	}
	usage += resp.Usage.TotalTokens
	if got := r.used(t, k); got != usage {
		t.Fatalf("quota used %d, usage %d", got, usage)
	}

	st := c.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: r.model, MaxOutputTokens: openai.Int(60),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Stream a short answer.")}})
	var types []string
	var text strings.Builder
	var final responses.Response
	for st.Next() {
		ev := st.Current()
		types = append(types, ev.Type)
		if ev.Type == "response.output_text.delta" {
			text.WriteString(ev.Delta)
		}
		if ev.Type == "response.completed" {
			final = ev.Response
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if len(types) < 6 || types[0] != "response.created" || types[len(types)-1] != "response.completed" || text.Len() == 0 ||
		final.OutputText() != text.String() || final.Usage.TotalTokens == 0 {
		t.Fatalf("stream: %v, text %q, final %s", types, text.String(), final.RawJSON())
	}
	usage += final.Usage.TotalTokens
	if got := r.used(t, k); got != usage {
		t.Fatalf("quota used %d after the stream, usage %d", got, usage)
	}

	// a forced function tool, then its output sent back
	tools := []responses.ToolUnionParam{{OfFunction: &responses.FunctionToolParam{Name: "read_file", Description: openai.String("Read a file of the repository."),
		Parameters: map[string]any{"type": "object", "properties": map[string]any{"path": map[string]any{"type": "string"}}, "required": []string{"path"}}}}}
	for _, stream := range []bool{false, true} {
		p := responses.ResponseNewParams{Model: r.model, Tools: tools, Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("Open the README.")},
			ToolChoice: responses.ResponseNewParamsToolChoiceUnion{OfFunctionTool: &responses.ToolChoiceFunctionParam{Name: "read_file"}}}
		var got responses.Response
		if stream {
			st := c.Responses.NewStreaming(ctx, p)
			for st.Next() {
				if ev := st.Current(); ev.Type == "response.completed" {
					got = ev.Response
				}
			}
			if err := st.Err(); err != nil {
				t.Fatal(err)
			}
		} else {
			res, err := c.Responses.New(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			got = *res
		}
		var call struct{ Type, CallID, Name, Arguments string }
		for _, item := range got.Output {
			if item.Type == "function_call" {
				json.Unmarshal([]byte(item.RawJSON()), &call)
				call.CallID = item.CallID
			}
		}
		var args map[string]string
		if call.Name != "read_file" || call.CallID == "" || json.Unmarshal([]byte(call.Arguments), &args) != nil || args["path"] == "" {
			t.Fatalf("stream %v: no read_file call: %s", stream, got.RawJSON())
		}
		usage += got.Usage.TotalTokens
		out := responses.ResponseInputItemParamOfFunctionCallOutput("# prq\nA job queue.")
		out.OfFunctionCallOutput.CallID = openai.String(call.CallID)
		next, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: r.model, Tools: tools, Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			responses.ResponseInputItemParamOfMessage("Open the README.", responses.EasyInputMessageRoleUser),
			responses.ResponseInputItemParamOfFunctionCall(call.Arguments, call.CallID, call.Name),
			out,
		}}})
		if err != nil {
			t.Fatal(err)
		}
		if next.OutputText() == "" {
			t.Fatalf("after the tool's output: %s", next.RawJSON())
		}
		usage += next.Usage.TotalTokens
	}
	if got := r.used(t, k); got != usage {
		t.Fatalf("quota used %d after the tool calls, usage %d", got, usage)
	}

	calls := r.fake.Stats()[r.model].Requests
	for _, p := range []responses.ResponseNewParams{
		{Model: r.model, PreviousResponseID: openai.String("resp_123"), Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("and then?")}},
		{Model: r.model, Store: openai.Bool(true), Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("keep this")}},
		{Model: r.model, Tools: []responses.ToolUnionParam{{OfWebSearch: &responses.WebSearchToolParam{Type: responses.WebSearchToolTypeWebSearch}}}, Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("search")}},
	} {
		_, err := c.Responses.New(ctx, p)
		var ae *openai.Error
		if !errors.As(err, &ae) || ae.StatusCode != http.StatusBadRequest || ae.Message == "" {
			t.Fatalf("%v, want a 400 that says why", err)
		}
	}
	if _, err := c.Responses.Get(ctx, resp.ID, responses.ResponseGetParams{}); err == nil || !strings.Contains(err.Error(), "400") {
		t.Fatalf("retrieving a response: %v, want 400", err)
	}
	if n := r.fake.Stats()[r.model].Requests; n != calls {
		t.Fatalf("%d upstream calls for refused requests", n-calls)
	}
}
