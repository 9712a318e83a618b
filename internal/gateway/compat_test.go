package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prq-dev/prq/internal/gateway"
)

// TestOpenAICompatibility: what OpenAI's clients rely on beyond the
// happy path. Unrouted paths and methods under /v1/ answer OpenAI's JSON
// error; the bearer scheme matches in any case; x-ratelimit-*-tokens
// describe a per-minute limit (the key's tpm, else the model's bucket),
// the quota its own x-prq-quota-* headers; a deadline 429 of a key
// without quota still has x-ratelimit-* headers; a request too large for
// the bucket by itself is 400, not a 429 the SDKs would retry.
func TestOpenAICompatibility(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	ctx := context.Background()
	metered, _ := r.key(t, gateway.Spec{Name: "metered", Tier: "paid", QuotaTokens: 50000, TPM: 7000})
	plain, _ := r.key(t, gateway.Spec{Name: "plain", Tier: "paid"})
	do := func(method, path, auth, body string, header map[string]string) (*http.Response, apiErr) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, r.url+path, strings.NewReader(body))
		req.Header.Set("Authorization", auth)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var e apiErr
		if res.StatusCode != http.StatusOK {
			if err := jsonDecode(res, &e); err != nil || e.Error.Message == "" {
				t.Fatalf("%s %s: %d, not OpenAI's error shape (%v)", method, path, res.StatusCode, err)
			}
		}
		return res, e
	}
	chat := func(max int) string {
		return fmt.Sprintf(`{"model":%q,"max_tokens":%d,"messages":[{"role":"user","content":"hello"}]}`, r.model, max)
	}
	for _, tc := range []struct{ method, path string }{{"GET", "/v1/engines"}, {"GET", "/v1/chat/completions"}, {"POST", "/v1/embeddings"}, {"DELETE", "/v1/models"}} {
		if res, _ := do(tc.method, tc.path, "Bearer "+plain, "{}", nil); res.StatusCode != http.StatusNotFound {
			t.Errorf("%s %s: %d, want 404", tc.method, tc.path, res.StatusCode)
		}
	}
	for _, scheme := range []string{"bearer", "BEARER"} {
		if res, _ := do("POST", "/v1/chat/completions", scheme+" "+plain, chat(10), nil); res.StatusCode != http.StatusOK {
			t.Errorf("scheme %q: %d", scheme, res.StatusCode)
		}
	}
	res, _ := do("POST", "/v1/chat/completions", "Bearer "+metered, chat(10), nil)
	if got := res.Header.Get("x-ratelimit-limit-tokens"); res.StatusCode != http.StatusOK || got != "7000" {
		t.Errorf("a key with a tpm: %d x-ratelimit-limit-tokens %q, want its 7000 per minute", res.StatusCode, got)
	}
	if got := res.Header.Get("x-prq-quota-limit"); got != "50000" {
		t.Errorf("x-prq-quota-limit %q, want 50000", got)
	}
	res, _ = do("POST", "/v1/chat/completions", "Bearer "+plain, chat(10), nil)
	if got := res.Header.Get("x-ratelimit-limit-tokens"); got != "100000" || res.Header.Get("x-ratelimit-remaining-tokens") == "" || res.Header.Get("x-ratelimit-limit-requests") != "1000" {
		t.Errorf("a key without limits: x-ratelimit-limit-tokens %q, requests %q, want the bucket's 100000 and 1000 per minute", got, res.Header.Get("x-ratelimit-limit-requests"))
	}
	if res, e := do("POST", "/v1/chat/completions", "Bearer "+plain, chat(110000), nil); res.StatusCode != http.StatusBadRequest {
		t.Errorf("a request larger than the bucket: %d %+v, want 400", res.StatusCode, e)
	}
	// past the deadline (the model paused)
	if err := r.sched.Pause(ctx, r.model, "test", time.Minute); err != nil {
		t.Fatal(err)
	}
	res, _ = do("POST", "/v1/chat/completions", "Bearer "+plain, chat(10), map[string]string{gateway.MaxWaitHeader: "0.1"})
	if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") == "" || res.Header.Get("x-ratelimit-limit-tokens") == "" || res.Header.Get("x-ratelimit-remaining-tokens") == "" {
		t.Errorf("past the deadline: %d Retry-After %q x-ratelimit-limit-tokens %q, want 429 with both", res.StatusCode, res.Header.Get("Retry-After"), res.Header.Get("x-ratelimit-limit-tokens"))
	}
}
