package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/prq-dev/prq/internal/gateway"
)

// apiErr is OpenAI's error body.
type apiErr struct {
	Error struct {
		Message, Type string
		Param, Code   *string
	} `json:"error"`
}

// TestCaseVariantKeysRefused: a key that equals a known field's name but
// for case is refused with 400 naming it, at the top level, in a message
// and in a content part: Go would read it as the field while the
// provider reads the exact one, so what is counted (or allowed) would not
// be what is sent. Nothing goes upstream.
func TestCaseVariantKeysRefused(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	secret, _ := r.key(t, gateway.Spec{Name: "sneaky", Tier: "paid", QuotaTokens: 100000, Models: []string{r.model}})
	big := strings.Repeat("word ", 5000)
	tests := []struct{ name, body, param string }{
		{"Messages", fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}],"Messages":[{"role":"user","content":"hi"}]}`, r.model, big), "Messages"},
		{"Model", fmt.Sprintf(`{"model":"gpt-4-forbidden","Model":%q,"messages":[{"role":"user","content":"hi"}]}`, r.model), "Model"},
		{"N", fmt.Sprintf(`{"model":%q,"n":1,"N":4,"messages":[{"role":"user","content":"hi"}]}`, r.model), "N"},
		{"MAX_TOKENS", fmt.Sprintf(`{"model":%q,"max_tokens":5,"MAX_TOKENS":500,"messages":[{"role":"user","content":"hi"}]}`, r.model), "MAX_TOKENS"},
		{"message Content", fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q,"Content":"hi"}]}`, r.model, big), "messages[0].Content"},
		{"part Text", fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":[{"type":"text","text":%q,"Text":"hi"}]}]}`, r.model, big), "messages[0].content[0].Text"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := r.post(context.Background(), secret, tt.body, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			var e apiErr
			if err := jsonDecode(res, &e); err != nil || res.StatusCode != http.StatusBadRequest || e.Error.Param == nil || *e.Error.Param != tt.param {
				t.Fatalf("%d %+v (%v), want 400 naming %s", res.StatusCode, e, err, tt.param)
			}
		})
	}
	if n := r.fake.Stats()[r.model].Requests; n != 0 {
		t.Fatalf("%d upstream calls for refused requests", n)
	}
}

// TestEveryForwardedFieldCounted: what the provider counts beyond the
// messages' content (a message's name, a response_format schema, tools,
// a prediction, fields the gateway does not know) counts as input, so a
// key cannot push its use over its quota with it: each request below
// carries some 5,000 tokens outside the content and a key with 1,000
// left is refused, with nothing sent.
func TestEveryForwardedFieldCounted(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	big := strings.Repeat("word ", 5000)
	msg := `"messages":[{"role":"user","content":"hi"}]`
	tests := []struct{ name, extra string }{
		{"message name", fmt.Sprintf(`"messages":[{"role":"user","name":%q,"content":"hi"}]`, big)},
		{"response_format schema", fmt.Sprintf(`"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","description":%q}}},`+msg, big)},
		{"tool_choice", fmt.Sprintf(`"tool_choice":{"type":"function","function":{"name":%q}},`+msg, big)},
		{"prediction", fmt.Sprintf(`"prediction":{"type":"content","content":%q},`+msg, big)},
		{"unknown field", fmt.Sprintf(`"future_field":%q,`+msg, big)},
		{"tool call id", fmt.Sprintf(`"messages":[{"role":"tool","tool_call_id":%q,"content":"hi"}]`, big)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			secret, k := r.key(t, gateway.Spec{Name: "schema", Tier: "paid", QuotaTokens: 1000})
			res, err := r.post(context.Background(), secret, fmt.Sprintf(`{"model":%q,"max_tokens":20,%s}`, r.model, tt.extra), nil)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusForbidden {
				t.Fatalf("%d, want 403: the request's %s is some 5,000 tokens, the key has 1,000", res.StatusCode, tt.name)
			}
			if got := r.used(t, k); got != 0 {
				t.Fatalf("quota used %d after a refusal", got)
			}
		})
	}
	if n := r.fake.Stats()[r.model].Requests; n != 0 {
		t.Fatalf("%d upstream calls for refused requests", n)
	}
}

// TestOutputCapBounded: an output cap past the model's context window,
// or n past 128, is refused with 400 naming it, before anything is
// reserved: a cap near 2^63 (times n) would wrap the reservation.
func TestOutputCapBounded(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	secret, k := r.key(t, gateway.Spec{Name: "huge", Tier: "paid", QuotaTokens: 100000})
	msg := `"messages":[{"role":"user","content":"hi"}]`
	tests := []struct{ name, params, param string }{
		{"max int64", `"max_tokens":9223372036854775807`, "max_tokens"},
		{"wraps times n", `"max_tokens":4611686018427387905,"n":4`, "max_tokens"},
		{"past the context", `"max_completion_tokens":128001`, "max_completion_tokens"},
		{"n", `"n":129`, "n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := r.post(context.Background(), secret, fmt.Sprintf(`{"model":%q,%s,%s}`, r.model, tt.params, msg), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			var e apiErr
			if err := jsonDecode(res, &e); err != nil || res.StatusCode != http.StatusBadRequest || e.Error.Param == nil || *e.Error.Param != tt.param {
				t.Fatalf("%d %+v (%v), want 400 naming %s", res.StatusCode, e, err, tt.param)
			}
		})
	}
	if got := r.used(t, k); got != 0 {
		t.Fatalf("quota used %d by refused requests", got)
	}
	if n := r.fake.Stats()[r.model].Requests; n != 0 {
		t.Fatalf("%d upstream calls for refused requests", n)
	}
}

// TestSpentKeyRefusedFirst: a key whose quota cannot cover the smallest
// request is refused (403) before its body is parsed or counted, so it
// cannot burn the gateway's CPU: even a body the gateway could not parse
// gets the 403.
func TestSpentKeyRefusedFirst(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	secret, _ := r.key(t, gateway.Spec{Name: "spent", Tier: "paid", QuotaTokens: 10})
	for _, body := range []string{`{`, fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}]}`, r.model, strings.Repeat("word ", 100000))} {
		res, err := r.post(context.Background(), secret, body, nil)
		if err != nil {
			t.Fatal(err)
		}
		var e apiErr
		jsonDecode(res, &e)
		res.Body.Close()
		if res.StatusCode != http.StatusForbidden || e.Error.Type != "insufficient_quota" || res.Header.Get("x-prq-quota-remaining") != "10" {
			t.Fatalf("%d %+v remaining %q, want 403 insufficient_quota with 10 left", res.StatusCode, e, res.Header.Get("x-prq-quota-remaining"))
		}
	}
}
