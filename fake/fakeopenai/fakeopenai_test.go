//lint:file-ignore SA1019 the fake must accept max_tokens: clients of non-reasoning models still send it

package fakeopenai_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/ratelimit"
)

func newClient(url, key string) *openai.Client {
	cfg := openai.DefaultConfig(key)
	cfg.BaseURL = url + "/v1"
	return openai.NewClientWithConfig(cfg)
}

// TestLimiterUnderConcurrency: 32 concurrent clients hammer the fake; the
// interval checker confirms it never admitted more than its limit allows
// in any window, and that it answered 429s with OpenAI's headers.
func TestLimiterUnderConcurrency(t *testing.T) {
	fake := fakeopenai.New(fakeopenai.Config{
		// A minute's period: the clients use up the allowance long before
		// it refills, however slow a loaded machine makes them.
		Models: []fakeopenai.Model{{Name: "m", RPM: 1000, TPM: 20000}},
		Period: time.Minute, Record: true,
	})
	srv := httptest.NewServer(fake)
	defer srv.Close()
	c := newClient(srv.URL, "sk-test")
	var wg sync.WaitGroup
	var mu sync.Mutex
	var limited, ok int
	var sawHeaders bool
	deadline := time.Now().Add(20 * time.Second) // a bound; each client stops at its first 429
	for i := 0; i < 32; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for time.Now().Before(deadline) {
				resp, err := c.CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{
					Model: "m", MaxTokens: 100 + 10*i,
					Messages: []openai.ChatCompletionMessage{{Role: "user", Content: strings.Repeat("word ", 50+i)}},
				})
				var apiErr *openai.APIError
				mu.Lock()
				switch {
				case err == nil:
					ok++
					if resp.Header().Get("x-ratelimit-remaining-tokens") != "" && resp.Usage.PromptTokens > 0 {
						sawHeaders = true
					}
				case errors.As(err, &apiErr) && apiErr.HTTPStatusCode == 429:
					limited++
				default:
					t.Error(err)
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}(i)
	}
	wg.Wait()
	var adm []ratelimit.Admission
	for _, a := range fake.Admissions("m") {
		adm = append(adm, ratelimit.Admission{At: a.At, Cost: a.Cost})
	}
	rep := ratelimit.CheckIntervals(adm, 20000, time.Minute, 20000)
	t.Logf("ok %d, 429 %d, worst window %.3f of allowance, stats %+v", ok, limited, rep.WorstRatio, fake.Stats()["m"])
	if rep.Violations > 0 {
		t.Fatalf("fake admitted over its limit in %d intervals", rep.Violations)
	}
	if limited == 0 || ok == 0 || !sawHeaders {
		t.Fatalf("want both admissions and 429s with headers: ok %d, 429 %d, headers %v", ok, limited, sawHeaders)
	}
}

func TestRateLimitResponse(t *testing.T) {
	fake := fakeopenai.New(fakeopenai.Config{Models: []fakeopenai.Model{{Name: "m", RPM: 1, TPM: 10000}}})
	srv := httptest.NewServer(fake)
	defer srv.Close()
	body := `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`
	do := func() *http.Response {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer k")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	if r := do(); r.StatusCode != 200 {
		t.Fatalf("first: %d", r.StatusCode)
	}
	r := do()
	if r.StatusCode != 429 {
		t.Fatalf("second: %d", r.StatusCode)
	}
	for _, h := range []string{"retry-after", "retry-after-ms", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests"} {
		if r.Header.Get(h) == "" {
			t.Errorf("429 lacks %s", h)
		}
	}
	if d, err := time.ParseDuration(r.Header.Get("x-ratelimit-reset-requests")); err != nil || d <= 0 {
		t.Errorf("reset header %q is not Go-duration text", r.Header.Get("x-ratelimit-reset-requests"))
	}
	var e struct {
		Error struct{ Code, Message string }
	}
	decode(t, r, &e)
	if e.Error.Code != "rate_limit_exceeded" || !strings.Contains(e.Error.Message, "Please try again in") {
		t.Fatalf("body: %+v", e)
	}
}

func decode(t *testing.T, r *http.Response, v any) {
	t.Helper()
	defer r.Body.Close()
	if err := jsonDecode(r, v); err != nil {
		t.Fatal(err)
	}
}

func TestErrorsAndFaults(t *testing.T) {
	fake := fakeopenai.New(fakeopenai.Config{Models: []fakeopenai.Model{{Name: "m", RPM: 1000, TPM: 1000000, ContextTokens: 200}}, Keys: []string{"good"}})
	srv := httptest.NewServer(fake)
	defer srv.Close()
	ctx := context.Background()
	req := openai.ChatCompletionRequest{Model: "m", MaxTokens: 5, Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "File: a.go\nhello"}}}
	status := func(err error) (int, string) {
		var apiErr *openai.APIError
		if errors.As(err, &apiErr) {
			return apiErr.HTTPStatusCode, fmt.Sprint(apiErr.Code)
		}
		return 0, fmt.Sprint(err)
	}
	if _, err := newClient(srv.URL, "bad").CreateChatCompletion(ctx, req); err == nil {
		t.Fatal("bad key accepted")
	} else if s, code := status(err); s != 401 || code != "invalid_api_key" {
		t.Fatalf("bad key: %d %s", s, code)
	}
	c := newClient(srv.URL, "good")
	resp, err := c.CreateChatCompletion(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Choices[0].FinishReason != "length" || resp.Usage.CompletionTokens != 5 {
		t.Fatalf("cap not applied: %+v %+v", resp.Choices[0].FinishReason, resp.Usage)
	}
	long := req
	long.Messages = []openai.ChatCompletionMessage{{Role: "user", Content: strings.Repeat("token ", 400)}}
	if _, err := c.CreateChatCompletion(ctx, long); err == nil {
		t.Fatal("over context accepted")
	} else if s, code := status(err); s != 400 || code != "context_length_exceeded" {
		t.Fatalf("context: %d %s", s, code)
	}
	fake.SetFaults(fakeopenai.Faults{ServerError: 1})
	if _, err := c.CreateChatCompletion(ctx, req); err == nil {
		t.Fatal("fault not injected")
	} else if s, _ := status(err); s != 500 {
		t.Fatalf("server error: %d", s)
	}
	fake.SetFaults(fakeopenai.Faults{Truncated: 1})
	if _, err := c.CreateChatCompletion(ctx, req); err == nil {
		t.Fatal("truncated JSON parsed")
	}
	fake.SetFaults(fakeopenai.Faults{Empty: 1})
	if r, err := c.CreateChatCompletion(ctx, req); err != nil || r.Choices[0].Message.Content != "" {
		t.Fatalf("empty: %v", err)
	}
	fake.SetFaults(fakeopenai.Faults{NoQuota: true})
	if _, err := c.CreateChatCompletion(ctx, req); err == nil {
		t.Fatal("no quota")
	} else if s, code := status(err); s != 429 || code != "insufficient_quota" {
		t.Fatalf("quota: %d %s", s, code)
	}
	fake.SetFaults(fakeopenai.Faults{Timeout: 1, TimeoutAfter: "5s"})
	tctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := c.CreateChatCompletion(tctx, req); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("timeout: %v", err)
	}
}

func TestReviewCitesRealLines(t *testing.T) {
	fake := fakeopenai.New(fakeopenai.Config{Models: []fakeopenai.Model{{Name: "m", RPM: 100, TPM: 100000}}})
	srv := httptest.NewServer(fake)
	defer srv.Close()
	resp, err := newClient(srv.URL, "k").CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{
		Model: "m", MaxTokens: 500,
		Messages: []openai.ChatCompletionMessage{
			{Role: "system", Content: `Answer with JSON: {"summary": "...", "comments": [{"line": N, "body": "..."}]}`},
			{Role: "user", Content: "File: x.go\n@@ -1,2 +1,3 @@\n   1  a\n   2 +b := 1\n   3  c\n"},
		}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(resp.Choices[0].Message.Content, `"line":2`) {
		t.Fatalf("review does not cite the added line 2: %s", resp.Choices[0].Message.Content)
	}
}

// hammerFake runs 32 clients against a fake for d and returns its
// admissions and how many 429s it answered.
func hammerFake(t *testing.T, fake *fakeopenai.Server, d time.Duration) (tok, req []ratelimit.Admission, limited int) {
	t.Helper()
	srv := httptest.NewServer(fake)
	defer srv.Close()
	c := newClient(srv.URL, "sk-test")
	var wg sync.WaitGroup
	var mu sync.Mutex
	deadline := time.Now().Add(d)
	for i := 0; i < 32; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for time.Now().Before(deadline) {
				_, err := c.CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{
					Model: "m", MaxTokens: 100 + 10*i,
					Messages: []openai.ChatCompletionMessage{{Role: "user", Content: strings.Repeat("word ", 50+i)}},
				})
				var apiErr *openai.APIError
				switch {
				case err == nil:
				case errors.As(err, &apiErr) && apiErr.HTTPStatusCode == 429:
					mu.Lock()
					limited++
					mu.Unlock()
					time.Sleep(5 * time.Millisecond)
				default:
					t.Error(err)
					return
				}
			}
		}(i)
	}
	wg.Wait()
	for _, a := range fake.Admissions("m") {
		tok = append(tok, ratelimit.Admission{At: a.At, Cost: a.Cost})
		req = append(req, ratelimit.Admission{At: a.At, Cost: 1})
	}
	return tok, req, limited
}

// TestWindowLimiterUnderConcurrency: in window mode no window (t−1s, t]
// ever holds more than the limits; in bucket mode the same load overruns
// such a window (the refill admits more while the burst still counts).
func TestWindowLimiterUnderConcurrency(t *testing.T) {
	for _, limiter := range []string{fakeopenai.LimiterWindow, fakeopenai.LimiterBucket} {
		t.Run(limiter, func(t *testing.T) {
			fake := fakeopenai.New(fakeopenai.Config{
				Models: []fakeopenai.Model{{Name: "m", RPM: 1000, TPM: 20000}},
				Period: time.Second, Record: true, Limiter: limiter,
			})
			tok, req, limited := hammerFake(t, fake, 2500*time.Millisecond)
			tr := ratelimit.CheckWindows(tok, 20000, time.Second)
			rr := ratelimit.CheckWindows(req, 1000, time.Second)
			t.Logf("%s: %d admitted, %d 429s, worst window %.3f of TPM, %.3f of RPM", limiter, len(tok), limited, tr.Worst, rr.Worst)
			if limited == 0 {
				t.Fatal("the load never reached the limit")
			}
			over := tr.Violations + rr.Violations
			if limiter == fakeopenai.LimiterWindow && over > 0 {
				t.Fatalf("window fake admitted over its limits in %d windows", over)
			}
			if limiter == fakeopenai.LimiterBucket && over == 0 {
				t.Fatal("bucket fake never overran a window: the test cannot tell the modes apart")
			}
		})
	}
}

func TestWindowHeaders(t *testing.T) {
	per := 2 * time.Second
	fake := fakeopenai.New(fakeopenai.Config{Models: []fakeopenai.Model{{Name: "m", RPM: 2, TPM: 10000}}, Period: per, Limiter: fakeopenai.LimiterWindow})
	srv := httptest.NewServer(fake)
	defer srv.Close()
	body := `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`
	do := func() *http.Response {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer k")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	r := do()
	if r.StatusCode != 200 {
		t.Fatalf("first: %d", r.StatusCode)
	}
	s := ratelimit.ParseHeaders(r.Header)
	// one request of two: a bucket would be full again in half a period;
	// the window empties only when this request leaves it
	if s.RemainingRequests != 1 || s.RemainingTokens != 10000-11 || s.ResetRequests <= per/2 || s.ResetRequests > per {
		t.Fatalf("headers after one call: %+v", s)
	}
	if !s.WindowLike(per) {
		t.Fatalf("headers %+v do not look window-limited", s)
	}
	if r := do(); r.StatusCode != 200 {
		t.Fatalf("second: %d", r.StatusCode)
	}
	r = do()
	if r.StatusCode != 429 {
		t.Fatalf("third: %d", r.StatusCode)
	}
	s = ratelimit.ParseHeaders(r.Header)
	if s.RetryAfter <= 0 || s.RetryAfter > per+time.Millisecond || s.RemainingRequests != 0 {
		t.Fatalf("429: retry after %s, want until the first call leaves the %s window; %+v", s.RetryAfter, per, s)
	}
	var e struct {
		Error struct{ Code, Message string }
	}
	decode(t, r, &e)
	if e.Error.Code != "rate_limit_exceeded" || !strings.Contains(e.Error.Message, "requests per min (RPM)") {
		t.Fatalf("body: %+v", e)
	}
}

// TestListModels: GET /v1/models in OpenAI's shape, read by the OpenAI
// client, and refused without a valid key.
func TestListModels(t *testing.T) {
	srv := httptest.NewServer(fakeopenai.New(fakeopenai.Config{Keys: []string{"sk-good"},
		Models: []fakeopenai.Model{{Name: "gpt-4o", RPM: 10, TPM: 1000}, {Name: "gpt-4o-mini", RPM: 10, TPM: 1000}}}))
	t.Cleanup(srv.Close)
	list, err := newClient(srv.URL+"/v1", "sk-good").ListModels(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range list.Models {
		if m.Object != "model" || m.OwnedBy == "" || m.CreatedAt == 0 {
			t.Errorf("model %+v lacks OpenAI's fields", m)
		}
		ids = append(ids, m.ID)
	}
	if strings.Join(ids, ",") != "gpt-4o,gpt-4o-mini" {
		t.Fatalf("models %v", ids)
	}
	_, err = newClient(srv.URL+"/v1", "sk-bad").ListModels(context.Background())
	var apiErr *openai.APIError
	if !errors.As(err, &apiErr) || apiErr.HTTPStatusCode != http.StatusUnauthorized {
		t.Fatalf("bad key: %v", err)
	}
}

// TestCallsAttributed: with Record, every request is logged with what its
// prompt says of itself (pull request title, file, review part, kind)
// and how it was answered: whole, faulted or refused.
func TestCallsAttributed(t *testing.T) {
	fake := fakeopenai.New(fakeopenai.Config{Models: []fakeopenai.Model{{Name: "m", RPM: 1000, TPM: 1000000}}, Record: true})
	srv := httptest.NewServer(fake)
	defer srv.Close()
	ctx := context.Background()
	c := newClient(srv.URL, "k")
	review := openai.ChatCompletionRequest{Model: "m", MaxTokens: 200, Messages: []openai.ChatCompletionMessage{
		{Role: "system", Content: `Review. Answer {"summary":..., "comments":[...]}`},
		{Role: "user", Content: "Pull request: fix it @abc123\nFile: a/b.go (modified, +1 -0), part 2 of 3 of its diff\n\n   1 +x := 1\nFile: not/this.go\n"}}}
	summary := openai.ChatCompletionRequest{Model: "m", MaxTokens: 50, Messages: []openai.ChatCompletionMessage{
		{Role: "system", Content: "You summarise one file."},
		{Role: "user", Content: "Pull request: fix it @abc123\nFile: c.go (added, +1 -0)\n\n   1 +y\n"}}}
	if _, err := c.CreateChatCompletion(ctx, review); err != nil {
		t.Fatal(err)
	}
	fake.SetFaults(fakeopenai.Faults{Truncated: 1})
	c.CreateChatCompletion(ctx, summary)
	fake.SetFaults(fakeopenai.Faults{ServerError: 1})
	c.CreateChatCompletion(ctx, summary)
	fake.SetFaults(fakeopenai.Faults{})
	if _, err := c.CreateChatCompletion(ctx, summary); err != nil {
		t.Fatal(err)
	}
	got := fake.Calls()
	want := []fakeopenai.Call{
		{Model: "m", Kind: "review", Title: "fix it @abc123", Path: "a/b.go", Part: 2, Parts: 3, Status: 200, Complete: true},
		{Model: "m", Kind: "text", Title: "fix it @abc123", Path: "c.go", Part: 1, Parts: 1, Status: 200},
		{Model: "m", Kind: "text", Title: "fix it @abc123", Path: "c.go", Part: 1, Parts: 1, Status: 500},
		{Model: "m", Kind: "text", Title: "fix it @abc123", Path: "c.go", Part: 1, Parts: 1, Status: 200, Complete: true},
	}
	if len(got) != len(want) {
		t.Fatalf("%d calls logged, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i].At.IsZero() {
			t.Errorf("call %d has no time", i)
		}
		got[i].At = time.Time{}
		if !strings.HasPrefix(got[i].Prompt, "Pull request: fix it @abc123\n") {
			t.Errorf("call %d kept no prompt: %q", i, got[i].Prompt)
		}
		got[i].Prompt, got[i].System = "", ""
		if got[i] != want[i] {
			t.Errorf("call %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

// TestReviewWithoutLinesHasEmptyComments: a review of a diff with no
// added line answers "comments": [] — strict structured outputs never
// send null for a required array, and prq rightly refuses null.
func TestReviewWithoutLinesHasEmptyComments(t *testing.T) {
	fake := fakeopenai.New(fakeopenai.Config{Models: []fakeopenai.Model{{Name: "m", RPM: 1000, TPM: 1000000}}})
	srv := httptest.NewServer(fake)
	defer srv.Close()
	resp, err := newClient(srv.URL, "k").CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{Model: "m", MaxTokens: 200,
		Messages: []openai.ChatCompletionMessage{
			{Role: "system", Content: `Review. Answer {"summary":..., "comments":[...]}`},
			{Role: "user", Content: "Pull request: remove it\nFile: a.go (removed, +0 -3)\n\n"}}})
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Comments *[]json.RawMessage `json:"comments"`
	}
	if err := json.Unmarshal([]byte(resp.Choices[0].Message.Content), &got); err != nil {
		t.Fatalf("reply %q: %v", resp.Choices[0].Message.Content, err)
	}
	if got.Comments == nil || len(*got.Comments) != 0 {
		t.Fatalf("comments in %q: want an empty array", resp.Choices[0].Message.Content)
	}
}
