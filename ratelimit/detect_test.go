package ratelimit_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/ratelimit"
)

// TestWindowSuspected syncs a bucket-configured limiter with the fake
// provider's real responses: in window mode the headers give it away
// within a few calls (and it says so once); in bucket mode, 429s
// included, never.
func TestWindowSuspected(t *testing.T) {
	for _, tt := range []struct {
		limiter string
		want    bool
	}{{fakeopenai.LimiterWindow, true}, {fakeopenai.LimiterBucket, false}} {
		t.Run(tt.limiter, func(t *testing.T) {
			per := 2 * time.Second
			fake := fakeopenai.New(fakeopenai.Config{Models: []fakeopenai.Model{{Name: "m", RPM: 5, TPM: 100000}}, Period: per, Limiter: tt.limiter})
			srv := httptest.NewServer(fake)
			defer srv.Close()
			rdb := redistest.Shared(t).Client(t)
			b, err := ratelimit.NewBucket(rdb, "detect-"+tt.limiter, "sk", ratelimit.Limits{RequestsPerPeriod: 5, TokensPerPeriod: 100000, Period: per})
			if err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			b.Log = slog.New(slog.NewTextHandler(&logs, nil))
			ctx := context.Background()
			statuses := map[int]int{}
			for i := 0; i < 8; i++ { // five fit, three are refused
				req, _ := http.NewRequest("POST", srv.URL+"/v1/chat/completions",
					strings.NewReader(`{"model":"m","max_tokens":20,"messages":[{"role":"user","content":"hello"}]}`))
				req.Header.Set("Authorization", "Bearer sk")
				start := time.Now()
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				statuses[resp.StatusCode]++
				if _, err := b.Sync(ctx, resp.StatusCode, resp.Header, time.Since(start)); err != nil {
					t.Fatal(err)
				}
			}
			if statuses[200] == 0 || statuses[429] == 0 {
				t.Fatalf("want both admissions and 429s, got %v", statuses)
			}
			n, _ := b.WindowLikeReports(ctx)
			if got, err := b.WindowSuspected(ctx); err != nil || got != tt.want {
				t.Fatalf("WindowSuspected = %v, %v after %d window-like reports, want %v", got, err, n, tt.want)
			}
			// another process's bucket of the same model and key sees it too
			other, _ := ratelimit.NewBucket(rdb, "detect-"+tt.limiter, "sk", ratelimit.Limits{RequestsPerPeriod: 5, TokensPerPeriod: 100000, Period: per})
			if got, _ := other.WindowSuspected(ctx); got != tt.want {
				t.Fatalf("another process's WindowSuspected = %v, want %v", got, tt.want)
			}
			if n := strings.Count(logs.String(), "provider looks window-limited"); n != map[bool]int{true: 1, false: 0}[tt.want] {
				t.Fatalf("logged the suspicion %d times: %s", n, logs.String())
			}
		})
	}
}
