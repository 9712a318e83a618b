package fakeopenai_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prq-dev/prq/fake/fakeopenai"
)

// TestLimitersExactPerKey: each key's token bucket refills exactly, in
// both the OpenAI and the Anthropic mode. After a full period's worth of
// small charges on a stepped clock the bucket holds an exact whole
// number of tokens (153 here), a request of exactly that is admitted and
// one more token is not; a float level (152.9999999999992 on this
// sequence) refused what an exact limiter admits. Another key's bucket
// is untouched by all of it.
func TestLimitersExactPerKey(t *testing.T) {
	for _, mode := range []string{"openai", "anthropic"} {
		t.Run(mode, func(t *testing.T) {
			var mu sync.Mutex
			now := time.Unix(1_900_000_000, 0)
			clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
			fake := fakeopenai.New(fakeopenai.Config{Models: []fakeopenai.Model{{Name: "m", RPM: 100000, TPM: 7000}},
				Keys: []string{"sk-a", "sk-b"}, Now: clock})
			srv := httptest.NewServer(fake)
			defer srv.Close()
			call := func(key string, maxTokens int) int {
				t.Helper()
				var req *http.Request
				if mode == "openai" {
					req, _ = http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions",
						strings.NewReader(fmt.Sprintf(`{"model":"m","max_tokens":%d,"messages":[{"role":"user","content":""}]}`, maxTokens)))
					req.Header.Set("Authorization", "Bearer "+key)
				} else {
					req, _ = http.NewRequest(http.MethodPost, srv.URL+"/v1/messages",
						strings.NewReader(fmt.Sprintf(`{"model":"m","max_tokens":%d,"messages":[{"role":"user","content":""}]}`, maxTokens)))
					req.Header.Set("x-api-key", key)
					req.Header.Set("anthropic-version", "2023-06-01")
				}
				req.Header.Set("Content-Type", "application/json")
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				res.Body.Close()
				return res.StatusCode
			}
			if code := call("sk-a", 7000); code != http.StatusOK { // empties key a's tokens
				t.Fatalf("the first call: %d", code)
			}
			// 180 steps of 333ms refill exactly 59940ms x 7000/min = 6993
			// tokens; the calls take 180 x 38 = 6840: 153 are left
			for range 180 {
				mu.Lock()
				now = now.Add(333 * time.Millisecond)
				mu.Unlock()
				if code := call("sk-a", 38); code != http.StatusOK {
					t.Fatalf("a step's call: %d", code)
				}
			}
			if code := call("sk-a", 154); code != http.StatusTooManyRequests {
				t.Fatalf("one token more than the 153 left: %d, want 429", code)
			}
			if code := call("sk-a", 153); code != http.StatusOK {
				t.Fatalf("exactly the 153 left: %d, want 200", code)
			}
			if code := call("sk-b", 7000); code != http.StatusOK {
				t.Fatalf("key b's whole limit: %d, want 200 (its bucket is its own)", code)
			}
		})
	}
}
