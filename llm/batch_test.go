package llm_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/llm"
)

// steppedClock is the fake's clock, moved by the test.
type steppedClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *steppedClock { return &steppedClock{t: time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)} }

func (c *steppedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *steppedClock) Step(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// batchProvider is one provider's batch client against the fake.
type batchProvider struct {
	name  string
	model string
	new   func(url string) llm.Batcher
}

var batchProviders = []batchProvider{
	{"openai", "gpt-4o-mini", func(url string) llm.Batcher { return llm.New("sk-test", url+"/v1", 5*time.Second, nil) }},
	{"azure", "gpt-4o-mini", func(url string) llm.Batcher {
		return llm.NewAzure("sk-test", url, "2024-10-21", func(string) string { return "batch-4o-mini" }, 5*time.Second, nil)
	}},
	{"anthropic", "claude-haiku-4-5", func(url string) llm.Batcher { return llm.NewAnthropic("sk-test", url, 5*time.Second, nil) }},
}

// batchFake is a fake whose models' synchronous limits would refuse
// all but one small call a period: a batch is not charged to them.
func batchFake(clk *steppedClock, m ...fakeopenai.Model) (*fakeopenai.Server, *httptest.Server) {
	if len(m) == 0 {
		m = []fakeopenai.Model{{Name: "gpt-4o-mini", RPM: 1, TPM: 2000, BatchLatency: 10 * time.Minute},
			{Name: "claude-haiku-4-5", RPM: 1, TPM: 2000, BatchLatency: 10 * time.Minute}}
	}
	fake := fakeopenai.New(fakeopenai.Config{Models: m, Period: time.Hour, Keys: []string{"sk-test"}, Now: clk.Now, Record: true,
		Deployments: map[string]string{"batch-4o-mini": "gpt-4o-mini"}})
	return fake, httptest.NewServer(fake)
}

// reviewItems are a batch of two reviews asked for with a JSON schema
// and a summary without a format, sharing a cached prefix.
func reviewItems(model string) []llm.BatchItem {
	system := `Review the file; answer with "summary" and "comments".`
	review := func(id, path string) llm.BatchItem {
		return llm.BatchItem{ID: id, Request: llm.Request{Model: model, System: system, CacheKey: "pr-7",
			User: "File: " + path + "\n   3 +x := f()\n   4 +return x", MaxOutput: 400,
			Format: llm.Format{Type: llm.FormatJSONSchema, Name: "file_review", Schema: json.RawMessage(reviewSchema)}}}
	}
	return []llm.BatchItem{review("file-a", "a.go"), review("file-b", "b.go"),
		{ID: "summary", Request: llm.Request{Model: model, System: "Summarize the change.", Context: "Pull request: batch lane",
			User: "File: c.go\n   1 +package c", MaxOutput: 100}}}
}

// TestBatchRoundTrip: through each provider's SDK against the fake, a
// batch of reviews (JSON schema) and a summary runs on the stepped clock
// (in progress, part done, ended), apart from the synchronous limits,
// and its results come back once per custom_id, read as the synchronous
// replies are (a review's JSON, usage), priced at batch prices.
func TestBatchRoundTrip(t *testing.T) {
	for _, p := range batchProviders {
		t.Run(p.name, func(t *testing.T) {
			clk := newClock()
			fake, srv := batchFake(clk)
			defer srv.Close()
			ctx := context.Background()
			c := p.new(srv.URL)
			items := reviewItems(p.model)
			b, err := c.SubmitBatch(ctx, items)
			if err != nil {
				t.Fatal(err)
			}
			if b.ID == "" || b.State != llm.BatchInProgress || !b.Created.Equal(clk.Now()) || b.Expires.Sub(b.Created) != 24*time.Hour {
				t.Fatalf("submitted %+v", b)
			}
			if _, err := c.BatchResults(ctx, b.ID); !errors.Is(err, llm.ErrTransient) {
				t.Fatalf("results of a batch in progress: %v, want ErrTransient", err)
			}
			clk.Step(5 * time.Minute) // one of three due (at 3m20s)
			b, err = c.Batch(ctx, b.ID)
			if err != nil || b.State != llm.BatchInProgress || b.Total != 3 {
				t.Fatalf("half way: %+v %v", b, err)
			}
			if want := 1; p.name == "anthropic" {
				want = 0 // Anthropic counts a request only when the batch has ended
				if b.Done != want {
					t.Fatalf("half way: %d done, want %d", b.Done, want)
				}
			} else if b.Done != want {
				t.Fatalf("half way: %d done, want %d", b.Done, want)
			}
			clk.Step(5 * time.Minute)
			b, err = c.Batch(ctx, b.ID)
			if err != nil || b.State != llm.BatchEnded || b.Done != 3 || b.Failed != 0 || b.Err != nil {
				t.Fatalf("ended: %+v %v", b, err)
			}
			results, err := c.BatchResults(ctx, b.ID)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			prices := llm.Prices{Input: 2, CachedInput: 1, CacheWrite: 2.5, Output: 8}
			for _, r := range results {
				ids = append(ids, r.ID)
				if r.Err != nil || r.Response.PromptTokens <= 0 || r.Response.OutputTokens <= 0 || r.Response.FinishReason != "stop" {
					t.Fatalf("%s: %+v %v", r.ID, r.Response, r.Err)
				}
				if math.Abs(prices.Batch().Cost(r.Response)-prices.Cost(r.Response)/2) > 1e-15 {
					t.Errorf("%s: batch cost is not half", r.ID)
				}
				if r.ID == "summary" {
					continue
				}
				var review struct {
					Summary  string            `json:"summary"`
					Comments []json.RawMessage `json:"comments"`
				}
				if err := json.Unmarshal([]byte(r.Response.Text), &review); err != nil || review.Summary == "" || len(review.Comments) == 0 {
					t.Fatalf("%s: review %q: %v", r.ID, r.Response.Text, err)
				}
			}
			sort.Strings(ids)
			if strings.Join(ids, ",") != "file-a,file-b,summary" {
				t.Fatalf("result ids %v, want each custom_id once", ids)
			}
			// the fake bills in lane batch what the results report
			want := fakeopenai.Usage{Requests: 3}
			for _, r := range results {
				want.Prompt += r.Response.PromptTokens
				want.Cached += r.Response.CachedTokens
				want.CacheWrite += r.Response.CacheWriteTokens
				want.Output += r.Response.OutputTokens
			}
			if bill := fake.Stats()[p.model].Bill; bill[fakeopenai.LaneBatch] != want || bill[fakeopenai.LaneSync].Requests != 0 {
				t.Fatalf("the fake's bill %+v, want %+v in lane batch and nothing synchronous", bill, want)
			}
			st := fake.Stats()[p.model]
			if st.Batch.Submitted != 1 || st.Batch.Completed != 1 || st.Batch.Requests != 3 || st.Requests != 0 || st.RateLimited != 0 || st.Answered != 3 {
				t.Fatalf("fake stats %+v: want one batch completed, 3 batch requests, no synchronous request", st)
			}
			var batched int
			keys := map[string]string{}
			for _, call := range fake.Calls() {
				if call.Batch && call.Status == 200 && call.Complete {
					batched++
					keys[call.Prompt] = call.CacheKey
				}
			}
			if batched != 3 {
				t.Fatalf("%d batch calls recorded, want 3", batched)
			}
			// as Complete sends it: Context a user message of its own
			// before User (OpenAI), prompt_cache_key from CacheKey
			if p.name != "anthropic" && (keys["Pull request: batch lane"] != "" || keys["File: a.go\n   3 +x := f()\n   4 +return x"] != "pr-7") {
				t.Fatalf("recorded prompts and cache keys %q", keys)
			}
			// the synchronous limits were left alone: one call still fits
			if p.name == "anthropic" {
				if _, err := llm.NewAnthropic("sk-test", srv.URL, 5*time.Second, nil).Complete(ctx, items[2].Request); err != nil {
					t.Fatalf("a synchronous call after the batch: %v", err)
				}
			}
		})
	}
}

// TestBatchPromptCache: OpenAI batch requests that share a long prefix
// are served from the prompt cache as synchronous calls are, and the
// cached tokens come back in the results' usage.
func TestBatchPromptCache(t *testing.T) {
	clk := newClock()
	fake, srv := batchFake(clk, fakeopenai.Model{Name: "gpt-4o-mini", RPM: 1, TPM: 2000, BatchLatency: 2 * time.Minute})
	defer srv.Close()
	ctx := context.Background()
	c := llm.New("sk-test", srv.URL+"/v1", 5*time.Second, nil)
	system := strings.Repeat("review ", 1300)
	items := []llm.BatchItem{
		{ID: "a", Request: llm.Request{Model: "gpt-4o-mini", System: system, User: "File: a.go", MaxOutput: 50}},
		{ID: "b", Request: llm.Request{Model: "gpt-4o-mini", System: system, User: "File: b.go", MaxOutput: 50}},
	}
	b, err := c.SubmitBatch(ctx, items)
	if err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Hour)
	results, err := c.BatchResults(ctx, b.ID)
	if err != nil || len(results) != 2 {
		t.Fatalf("results %+v %v", results, err)
	}
	cached := map[string]int64{}
	for _, r := range results {
		cached[r.ID] = r.Response.CachedTokens
	}
	if cached["a"] != 0 || cached["b"] != 1280 {
		t.Fatalf("cached tokens %v, want a 0 and b 1280 (the shared prefix in 128-token steps)", cached)
	}
	if st := fake.Stats()["gpt-4o-mini"]; st.CachedTokens != 1280 {
		t.Fatalf("the fake counted %d cached tokens, want 1280", st.CachedTokens)
	}
}

// TestBatchExpiresPartway: a batch that expires after answering half
// its requests returns those answers and the rest as ErrBatchExpired.
func TestBatchExpiresPartway(t *testing.T) {
	for _, p := range batchProviders {
		t.Run(p.name, func(t *testing.T) {
			clk := newClock()
			fake, srv := batchFake(clk)
			defer srv.Close()
			fake.SetFaults(fakeopenai.Faults{BatchExpire: 1, BatchExpireDone: 0.5})
			ctx := context.Background()
			c := p.new(srv.URL)
			items := append(reviewItems(p.model), llm.BatchItem{ID: "fourth", Request: reviewItems(p.model)[2].Request})
			b, err := c.SubmitBatch(ctx, items)
			if err != nil {
				t.Fatal(err)
			}
			clk.Step(time.Hour) // the half it will answer is answered; the rest waits
			if b, err = c.Batch(ctx, b.ID); err != nil || b.State != llm.BatchInProgress {
				t.Fatalf("after an hour: %+v %v", b, err)
			}
			clk.Step(24 * time.Hour)
			if b, err = c.Batch(ctx, b.ID); err != nil || b.State != llm.BatchExpired || b.Done != 2 || b.Total != 4 {
				t.Fatalf("after the window: %+v %v", b, err)
			}
			results, err := c.BatchResults(ctx, b.ID)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, r := range results {
				if _, dup := got[r.ID]; dup {
					t.Fatalf("%s twice", r.ID)
				}
				switch {
				case r.Err == nil && r.Response.Text != "":
					got[r.ID] = "answered"
				case errors.Is(r.Err, llm.ErrBatchExpired):
					got[r.ID] = "expired"
				default:
					got[r.ID] = r.Err.Error()
				}
			}
			want := map[string]string{"file-a": "answered", "file-b": "answered", "summary": "expired", "fourth": "expired"}
			if len(got) != len(want) {
				t.Fatalf("results %v, want %v", got, want)
			}
			for id, w := range want {
				if got[id] != w {
					t.Fatalf("results %v, want %v", got, want)
				}
			}
			if st := fake.Stats()[p.model].Batch; st.Expired != 1 || st.Requests != 2 {
				t.Fatalf("fake batch stats %+v", st)
			}
		})
	}
}

// TestBatchCancel: cancelling lets the request in flight finish; the
// batch is cancelled when it has, and the rest are ErrBatchCancelled.
func TestBatchCancel(t *testing.T) {
	for _, p := range batchProviders {
		t.Run(p.name, func(t *testing.T) {
			clk := newClock()
			fake, srv := batchFake(clk)
			defer srv.Close()
			ctx := context.Background()
			c := p.new(srv.URL)
			b, err := c.SubmitBatch(ctx, reviewItems(p.model)) // due at 3m20s, 6m40s, 10m
			if err != nil {
				t.Fatal(err)
			}
			clk.Step(4 * time.Minute)
			if b, err = c.CancelBatch(ctx, b.ID); err != nil || b.State != llm.BatchInProgress {
				t.Fatalf("cancel: %+v %v", b, err)
			}
			clk.Step(2 * time.Minute) // the request in flight is not yet done
			if b, err = c.Batch(ctx, b.ID); err != nil || b.State != llm.BatchInProgress {
				t.Fatalf("cancelling: %+v %v", b, err)
			}
			clk.Step(time.Minute)
			if b, err = c.Batch(ctx, b.ID); err != nil || b.State != llm.BatchCancelled || b.Done != 2 {
				t.Fatalf("cancelled: %+v %v", b, err)
			}
			results, err := c.BatchResults(ctx, b.ID)
			if err != nil || len(results) != 3 {
				t.Fatalf("results %+v %v", results, err)
			}
			for _, r := range results {
				if want := r.ID != "summary"; (r.Err == nil) != want || (!want && !errors.Is(r.Err, llm.ErrBatchCancelled)) {
					t.Fatalf("%s: %+v %v", r.ID, r.Response, r.Err)
				}
			}
			if st := fake.Stats()[p.model].Batch; st.Cancelled != 1 || st.Requests != 2 {
				t.Fatalf("fake batch stats %+v", st)
			}
		})
	}
}

// TestBatchQueueLimits: OpenAI's enqueued-token limit fails a batch that
// would pass it (ErrBatchQueueFull, not a rate limit) until an earlier
// batch ends; Anthropic's limit of requests waiting refuses the batch at
// once with a 429 classified the same way.
func TestBatchQueueLimits(t *testing.T) {
	ctx := context.Background()
	t.Run("openai", func(t *testing.T) {
		clk := newClock()
		fake, srv := batchFake(clk, fakeopenai.Model{Name: "gpt-4o-mini", RPM: 100, TPM: 100000, BatchLatency: 10 * time.Minute, BatchTokens: 150})
		defer srv.Close()
		c := llm.New("sk-test", srv.URL+"/v1", 5*time.Second, nil)
		items := reviewItems("gpt-4o-mini")[:2] // about 50 prompt tokens each
		first, err := c.SubmitBatch(ctx, items)
		if err != nil {
			t.Fatal(err)
		}
		second, err := c.SubmitBatch(ctx, items)
		if err != nil {
			t.Fatal(err)
		}
		second, err = c.Batch(ctx, second.ID)
		var e *llm.Error
		if err != nil || second.State != llm.BatchFailed || !errors.Is(second.Err, llm.ErrBatchQueueFull) || errors.Is(second.Err, llm.ErrRateLimited) ||
			!errors.As(second.Err, &e) || e.Code != "token_limit_exceeded" || !strings.Contains(e.Message, "Enqueued token limit reached for gpt-4o-mini") {
			t.Fatalf("second batch %+v (%v), want failed with the enqueued-token limit", second, err)
		}
		results, err := c.BatchResults(ctx, second.ID)
		if err != nil || len(results) != 2 || !errors.Is(results[0].Err, llm.ErrBatchQueueFull) {
			t.Fatalf("results of the failed batch: %+v %v", results, err)
		}
		clk.Step(10 * time.Minute)
		if first, err = c.Batch(ctx, first.ID); err != nil || first.State != llm.BatchEnded {
			t.Fatalf("first batch %+v %v", first, err)
		}
		third, err := c.SubmitBatch(ctx, items)
		if err != nil {
			t.Fatal(err)
		}
		if third, err = c.Batch(ctx, third.ID); err != nil || third.State != llm.BatchInProgress {
			t.Fatalf("a batch after the first ended: %+v %v, want it queued", third, err)
		}
		if st := fake.Stats()["gpt-4o-mini"].Batch; st.Submitted != 3 || st.Failed != 1 || st.QueueFull != 1 {
			t.Fatalf("fake batch stats %+v", st)
		}
	})
	t.Run("anthropic", func(t *testing.T) {
		clk := newClock()
		fake, srv := batchFake(clk, fakeopenai.Model{Name: "claude-haiku-4-5", RPM: 100, TPM: 100000, BatchLatency: 10 * time.Minute, BatchRequests: 3})
		defer srv.Close()
		c := llm.NewAnthropic("sk-test", srv.URL, 5*time.Second, nil)
		items := reviewItems("claude-haiku-4-5")[:2]
		if _, err := c.SubmitBatch(ctx, items); err != nil {
			t.Fatal(err)
		}
		_, err := c.SubmitBatch(ctx, items)
		var e *llm.Error
		if !errors.Is(err, llm.ErrBatchQueueFull) || !errors.As(err, &e) || e.Status != 429 || e.RetryAfter != 5*time.Minute {
			t.Fatalf("a batch over the queue limit: %v, want ErrBatchQueueFull with retry-after until the next request leaves (5m)", err)
		}
		clk.Step(4 * time.Minute)
		if _, err := c.SubmitBatch(ctx, items); !errors.Is(err, llm.ErrBatchQueueFull) {
			t.Fatalf("with no request answered: %v, want still full", err)
		}
		clk.Step(time.Minute) // one of the first batch's requests answered: room for two
		if _, err := c.SubmitBatch(ctx, items); err != nil {
			t.Fatalf("after a request left the queue: %v", err)
		}
		if st := fake.Stats()["claude-haiku-4-5"].Batch; st.Submitted != 2 || st.QueueFull != 2 {
			t.Fatalf("fake batch stats %+v", st)
		}
	})
}

// TestBatchRequestErrors: a request the API refuses comes back as the
// synchronous call's failure would (a prompt too long is
// ErrContextLength), a server error as ErrTransient, a batch that fails
// on the provider's side as transient; the other requests still answer.
func TestBatchRequestErrors(t *testing.T) {
	for _, p := range batchProviders {
		t.Run(p.name, func(t *testing.T) {
			clk := newClock()
			fake, srv := batchFake(clk, fakeopenai.Model{Name: p.model, RPM: 1, TPM: 1000, ContextTokens: 600, BatchLatency: time.Minute})
			defer srv.Close()
			ctx := context.Background()
			c := p.new(srv.URL)
			items := reviewItems(p.model)
			items[1].Request.User += strings.Repeat(" token token", 500) // past the 600-token context
			b, err := c.SubmitBatch(ctx, items)
			if err != nil {
				t.Fatal(err)
			}
			clk.Step(time.Minute)
			if b, err = c.Batch(ctx, b.ID); err != nil || b.State != llm.BatchEnded || b.Done != 2 || b.Failed != 1 {
				t.Fatalf("ended: %+v %v", b, err)
			}
			results, err := c.BatchResults(ctx, b.ID)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range results {
				if want := r.ID == "file-b"; errors.Is(r.Err, llm.ErrContextLength) != want || (r.Err == nil) == want {
					t.Fatalf("%s: %v", r.ID, r.Err)
				}
			}
			fake.SetFaults(fakeopenai.Faults{BatchRequestError: 1})
			b, err = c.SubmitBatch(ctx, items[:1])
			if err != nil {
				t.Fatal(err)
			}
			clk.Step(time.Minute)
			results, err = c.BatchResults(ctx, b.ID)
			if err != nil || len(results) != 1 || !errors.Is(results[0].Err, llm.ErrTransient) {
				t.Fatalf("a request answered with a server error: %+v %v", results, err)
			}
			fake.SetFaults(fakeopenai.Faults{BatchFail: 1})
			b, err = c.SubmitBatch(ctx, items[:1])
			if err != nil {
				t.Fatal(err)
			}
			clk.Step(time.Minute)
			if b, err = c.Batch(ctx, b.ID); err != nil {
				t.Fatal(err)
			}
			results, err = c.BatchResults(ctx, b.ID)
			if err != nil || len(results) != 1 || !errors.Is(results[0].Err, llm.ErrTransient) {
				t.Fatalf("a failed batch %+v: results %+v %v", b, results, err)
			}
		})
	}
}

// TestBatchSubmitRefusals: what the providers would refuse is refused
// before any call, naming the item.
func TestBatchSubmitRefusals(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	_, srv := batchFake(clk)
	defer srv.Close()
	ok := reviewItems("gpt-4o-mini")
	for _, tc := range []struct {
		name  string
		items []llm.BatchItem
		want  string
	}{
		{"none", nil, "at least one"},
		{"bad id", []llm.BatchItem{{ID: "review-1.acme.web.7", Request: ok[0].Request}}, "not a custom_id"},
		{"repeated id", []llm.BatchItem{ok[0], ok[0]}, "repeated"},
		{"two models", []llm.BatchItem{ok[0], {ID: "x", Request: llm.Request{Model: "gpt-4o", User: "hi"}}}, "one model"},
	} {
		for _, p := range batchProviders[:1] {
			_, err := p.new(srv.URL).SubmitBatch(ctx, tc.items)
			if !errors.Is(err, llm.ErrPermanent) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: %v, want a permanent failure saying %q", tc.name, err, tc.want)
			}
		}
	}
	if id := llm.CustomID("review-1.acme.web.7-abc"); !strings.HasPrefix(id, "review-1_acme_web_7-abc-") || len(id) > 64 || llm.CustomID(id) != id {
		t.Errorf("CustomID %q", id)
	}
	if a, b := llm.CustomID("a.b"), llm.CustomID("a_b"); a == b || llm.CustomID("a_b") != "a_b" {
		t.Errorf("CustomID merges %q and %q", a, b)
	}
	if long := llm.CustomID(strings.Repeat("x", 100)); len(long) != 64 {
		t.Errorf("CustomID of 100 bytes: %d bytes", len(long))
	}
}

// TestRouterBatcher: the router finds a model's batch client by key.
func TestRouterBatcher(t *testing.T) {
	c := llm.New("k", "http://localhost", time.Second, nil)
	a := llm.NewAnthropic("k", "http://localhost", time.Second, nil)
	r := llm.NewRouter(map[string][]llm.Completer{"gpt-4o": {c, c}, "claude": {a}})
	if b, ok := r.Batcher("gpt-4o", 1); !ok || b != llm.Batcher(c) {
		t.Error("gpt-4o key 1")
	}
	if b, ok := r.Batcher("claude", 0); !ok || b != llm.Batcher(a) {
		t.Error("claude key 0")
	}
	for _, tc := range []struct {
		model string
		key   int
	}{{"claude", 1}, {"nope", 0}, {"gpt-4o", -1}} {
		if _, ok := r.Batcher(tc.model, tc.key); ok {
			t.Errorf("%s key %d has a batcher", tc.model, tc.key)
		}
	}
}
