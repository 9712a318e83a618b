package gateway_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prq-dev/prq/internal/gateway"
)

// TestAdmissionContinuesAfterUpstreamErrorBurst replays what was seen
// once: a burst of upstream 401, 403, 404 and 429 replies to one gateway
// process that runs admission itself (prq gateway --admit), then the
// upstream recovers. Every request after the burst must be admitted and
// answered 200 within its wait: nothing the burst leaves behind (a
// reservation, a penalty, a ticket, a waiter) may stall admission past
// the account pause its 401s and 403s set.
func TestAdmissionContinuesAfterUpstreamErrorBurst(t *testing.T) {
	t.Parallel()
	var burst atomic.Bool
	burst.Store(true)
	var calls atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		n := calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		if burst.Load() {
			status, typ := []int{401, 403, 404, 429}[n%4], []string{"invalid_request_error", "permission_error", "invalid_request_error", "requests"}[n%4]
			if status == 429 {
				w.Header().Set("retry-after", "1")
				w.Header().Set("x-ratelimit-remaining-requests", "0")
				w.Header().Set("x-ratelimit-reset-requests", "1s")
			}
			w.WriteHeader(status)
			fmt.Fprintf(w, `{"error":{"message":"burst %d","type":%q,"param":null,"code":null}}`, status, typ)
			return
		}
		fmt.Fprint(w, `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":1,"total_tokens":10}}`)
	}))
	defer up.Close()
	r := newRigWith(t, rigOpts{upstream: up.URL + "/v1", cfg: func(c *gateway.Config) {
		// the burst's 401s and 403s pause the model (llmcall's policy):
		// briefly here, so the rounds after it wait the pause out
		c.MaxWait, c.AccountPause = 20*time.Second, time.Second
	}})
	secret, _ := r.key(t, gateway.Spec{Name: "burst", Tier: "paid"})
	// a key with a quota too: its calls in flight hold it, and a hold the
	// burst left behind would make its later requests wait
	quota, _ := r.key(t, gateway.Spec{Name: "burst-quota", Tier: "paid", QuotaTokens: 1_000_000})
	body := `{"model":"` + r.model + `","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`
	var roundOf func(n int, wait, secret string) map[int]int
	round := func(n int, wait string) map[int]int {
		return roundOf(n, wait, secret)
	}
	roundOf = func(n int, wait, secret string) map[int]int {
		codes := map[int]int{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				code := -1
				if res, err := r.post(context.Background(), secret, body, map[string]string{gateway.MaxWaitHeader: wait}); err == nil {
					io.Copy(io.Discard, res.Body)
					res.Body.Close()
					code = res.StatusCode
				}
				mu.Lock()
				codes[code]++
				mu.Unlock()
			}()
		}
		wg.Wait()
		return codes
	}
	for i := range 2 {
		t.Logf("burst round %d: %v; with a quota: %v", i, round(40, "5"), roundOf(20, "5", quota))
	}
	burst.Store(false)
	during := calls.Load()
	for i := range 2 {
		codes, quotaCodes := round(20, "20"), roundOf(10, "20", quota)
		if codes[http.StatusOK] != 20 || quotaCodes[http.StatusOK] != 10 {
			t.Fatalf("round %d after the burst (%d upstream calls in it): answers %v, with a quota %v; want all 200: admission stalled", i, during, codes, quotaCodes)
		}
	}
}
