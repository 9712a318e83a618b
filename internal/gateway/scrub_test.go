package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prq-dev/prq/internal/gateway"
)

// TestUpstreamErrorScrubbed: an upstream that answers 400 echoing the
// request's credentials (a self-hosted server or proxy can) shows the
// client its status and error type, never a credential: not the
// configured key, nor anything that looks like one.
func TestUpstreamErrorScrubbed(t *testing.T) {
	t.Parallel()
	const upKey = "sk-up-c0nfigured-Upstream-Key-0123456789"
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		msg := fmt.Sprintf("invalid request; headers were Authorization: %s, api-key=%s; a stray key sk-proj-Str4yStr4yStr4y and %s",
			r.Header.Get("Authorization"), strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), upKey)
		json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": "invalid_request_error", "param": nil, "code": "bad_thing"}})
	}))
	defer echo.Close()
	r := newRigWith(t, rigOpts{upstream: echo.URL + "/v1", upstreamKeys: []string{upKey}})
	secret, _ := r.key(t, gateway.Spec{Name: "scrub", Tier: "paid"})
	for _, tc := range []struct{ path, body, wantType string }{
		{"/v1/chat/completions", `{"model":"` + r.model + `","messages":[{"role":"user","content":"hi"}]}`, `"invalid_request_error"`},
		{"/v1/messages", `{"model":"` + r.model + `","max_tokens":20,"messages":[{"role":"user","content":"hi"}]}`, `"invalid_request_error"`},
	} {
		res, err := r.postTo(context.Background(), tc.path, secret, tc.body)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		got := string(b)
		if res.StatusCode != http.StatusBadRequest || !strings.Contains(got, tc.wantType) || !strings.Contains(got, "invalid request") {
			t.Fatalf("%s: %d %s, want 400 with the provider's type and message", tc.path, res.StatusCode, got)
		}
		for _, leak := range []string{upKey, "c0nfigured", "Str4y", "sk-up"} {
			if strings.Contains(got, leak) {
				t.Fatalf("%s: the client saw %q: %s", tc.path, leak, got)
			}
		}
		if !strings.Contains(got, "[redacted]") {
			t.Fatalf("%s: nothing marked redacted: %s", tc.path, got)
		}
	}
}
