package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/internal/gateway"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/ratelimit"
)

// gatewayKey creates a virtual key on the stack and returns a go-openai
// client for it, pointed at serve's /v1.
func (s *stack) gatewayKey(spec gateway.Spec) (*openai.Client, gateway.Key, string) {
	s.t.Helper()
	secret, k, err := gateway.NewKeys(s.app.Redis()).Create(context.Background(), spec)
	if err != nil {
		s.t.Fatal(err)
	}
	cc := openai.DefaultConfig(secret)
	cc.BaseURL = "http://" + s.app.ListenAddr() + "/v1"
	return openai.NewClientWithConfig(cc), k, secret
}

// quotaUsed reads a key's quota use in its current window.
func (s *stack) quotaUsed(k gateway.Key) int64 {
	s.t.Helper()
	q, err := ratelimit.NewQuota(s.app.Redis(), ratelimit.QuotaConfig{Period: k.QuotaPeriod})
	if err != nil {
		s.t.Fatal(err)
	}
	u, err := q.Used(context.Background(), "key:"+k.ID, "", k.QuotaTokens)
	if err != nil {
		s.t.Fatal(err)
	}
	return u.Used
}

func chatReq(model string, max int, text string) openai.ChatCompletionRequest {
	return openai.ChatCompletionRequest{Model: model, MaxCompletionTokens: max, Messages: []openai.ChatCompletionMessage{
		{Role: openai.ChatMessageRoleSystem, Content: "You are a helpful assistant."},
		{Role: openai.ChatMessageRoleUser, Content: text},
	}}
}

func statusOf(err error) int {
	var ae *openai.APIError
	if errors.As(err, &ae) {
		return ae.HTTPStatusCode
	}
	var re *openai.RequestError
	if errors.As(err, &re) {
		return re.HTTPStatusCode
	}
	return 0
}

// TestGatewayEndToEnd drives the gateway on serve with go-openai against
// the fake provider: usage settles exactly (non-streaming and streaming,
// with and without the client's usage chunk), 50 concurrent requests of
// one key never overshoot its quota and its refusals are 403 with no
// upstream call, an unknown key is 401, and a request that cannot be
// admitted before its deadline is 429 with Retry-After, with no upstream
// call.
func TestGatewayEndToEnd(t *testing.T) {
	s := startStack(t, stackOpts{})
	ctx := context.Background()
	model := "gpt-4o-mini"
	upstream := func() int64 { return s.fakes.OpenAI.Stats()[model].Requests }

	chat, ck, _ := s.gatewayKey(gateway.Spec{Name: "triage-bot", Tier: "chat", QuotaTokens: 100000, QuotaPeriod: ratelimit.Day})
	// non-streaming: the quota holds exactly the provider's usage
	resp, err := chat.CreateChatCompletion(ctx, chatReq(model, 100, "Summarise this change in one line."))
	if err != nil {
		t.Fatalf("completion: %v", err)
	}
	if resp.Usage.TotalTokens <= 0 || len(resp.Choices) != 1 || resp.Choices[0].Message.Content == "" {
		t.Fatalf("completion reply: %+v", resp)
	}
	want := int64(resp.Usage.TotalTokens)
	if got := s.quotaUsed(ck); got != want {
		t.Fatalf("quota used %d after one call, want the provider's usage %d", got, want)
	}
	// streaming with the client's usage chunk
	req := chatReq(model, 100, "Stream me a short answer.")
	req.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
	text, u, chunks := readStream(t, chat, req)
	if u == nil || text == "" || chunks < 2 {
		t.Fatalf("stream: text %q usage %v in %d chunks", text, u, chunks)
	}
	want += int64(u.TotalTokens)
	if got := s.quotaUsed(ck); got != want {
		t.Fatalf("quota used %d after the stream, want %d", got, want)
	}
	// streaming without it: the gateway reads the usage chunk it asked
	// for, and the client gets none
	before := s.fakes.OpenAI.Stats()[model].CompletionTokens
	req.StreamOptions = nil
	text, u, _ = readStream(t, chat, req)
	if u != nil || text == "" {
		t.Fatalf("stream without usage asked: usage %v, text %q", u, text)
	}
	out := s.fakes.OpenAI.Stats()[model].CompletionTokens - before
	tk, _ := ratelimit.NewTokenizer(model)
	in, _ := tk.CountMessages(req.Messages[0].Content, req.Messages[1].Content)
	want += in + out
	if got := s.quotaUsed(ck); got != want {
		t.Fatalf("quota used %d after a stream without the client's usage, want %d (input %d + output %d)", got, want, in, out)
	}

	// 50 concurrent requests per key, three keys of three tiers, each
	// with a 1,000-token quota; half of them stream
	calls0 := upstream()
	type tally struct {
		ok, refused int
		used        int64
	}
	var mu sync.Mutex
	tallies := map[string]*tally{}
	var keys []gateway.Key
	var wg sync.WaitGroup
	for _, tier := range []string{"paid", "trial", "chat"} {
		agent, k, _ := s.gatewayKey(gateway.Spec{Name: tier + "-bot", Tier: tier, QuotaTokens: 1000, QuotaPeriod: ratelimit.Day})
		keys = append(keys, k)
		tl := &tally{}
		tallies[k.ID] = tl
		for i := 0; i < 50; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				req := chatReq(model, 500, fmt.Sprintf("Request %d: explain the diff.", i))
				var tokens int64
				var err error
				if i%2 == 0 {
					var r openai.ChatCompletionResponse
					r, err = agent.CreateChatCompletion(ctx, req)
					tokens = int64(r.Usage.TotalTokens)
				} else {
					req.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
					tokens, err = streamUsage(agent, req)
				}
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					tl.ok++
					tl.used += tokens
				case statusOf(err) == http.StatusForbidden:
					tl.refused++
					var ae *openai.APIError
					if errors.As(err, &ae) && (ae.Type != "insufficient_quota" || !strings.Contains(ae.Message, "resets at")) {
						t.Errorf("403 not in OpenAI's shape naming the quota and its reset: %+v", ae)
					}
				default:
					t.Errorf("request %d: %v", i, err)
				}
			}(i)
		}
	}
	wg.Wait()
	answered := 0
	for _, k := range keys {
		tl := tallies[k.ID]
		answered += tl.ok
		got := s.quotaUsed(k)
		t.Logf("%s: 50 concurrent requests, quota 1000: %d answered, %d refused (403); %d tokens used", k.Tier, tl.ok, tl.refused, got)
		if got > 1000 {
			t.Fatalf("%s: quota overshot: %d tokens used of 1000", k.Tier, got)
		}
		if got != tl.used {
			t.Fatalf("%s: quota used %d, the answers' usage sums to %d", k.Tier, got, tl.used)
		}
		if tl.refused == 0 || tl.ok == 0 {
			t.Fatalf("%s: %d answered, %d refused: want both (50 × 500 tokens asked of 1000)", k.Tier, tl.ok, tl.refused)
		}
	}
	if calls := upstream() - calls0; calls != int64(answered) {
		t.Fatalf("%d upstream calls for %d answered requests: refusals must send nothing", calls, answered)
	}

	// an unknown key
	bad := openai.DefaultConfig(gateway.KeyPrefix + "nope")
	bad.BaseURL = "http://" + s.app.ListenAddr() + "/v1"
	if _, err := openai.NewClientWithConfig(bad).CreateChatCompletion(ctx, chatReq(model, 10, "hi")); statusOf(err) != http.StatusUnauthorized {
		t.Fatalf("unknown key: %v, want 401", err)
	}

	// admission paused: the deadline passes, 429 with Retry-After, nothing sent
	_, _, secret := s.gatewayKey(gateway.Spec{Name: "ci-helper", Tier: "free"})
	if err := s.app.Scheduler().Pause(ctx, model, "test: hold admissions", time.Minute); err != nil {
		t.Fatal(err)
	}
	calls0 = upstream()
	body := `{"model":"gpt-4o-mini","max_tokens":50,"messages":[{"role":"user","content":"hello"}]}`
	hr, _ := http.NewRequest(http.MethodPost, "http://"+s.app.ListenAddr()+"/v1/chat/completions", strings.NewReader(body))
	hr.Header.Set("Authorization", "Bearer "+secret)
	hr.Header.Set(gateway.MaxWaitHeader, "0.3")
	res, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	var apiErr struct {
		Error struct{ Message, Type, Code string } `json:"error"`
	}
	json.Unmarshal(raw, &apiErr)
	if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") == "" || apiErr.Error.Code != "rate_limit_exceeded" {
		t.Fatalf("past the deadline: %d Retry-After %q body %s; want 429 with Retry-After in OpenAI's shape", res.StatusCode, res.Header.Get("Retry-After"), raw)
	}
	if calls := upstream() - calls0; calls != 0 {
		t.Fatalf("%d upstream calls for a request refused at its deadline", calls)
	}
	if err := s.app.Scheduler().Resume(ctx, model); err != nil {
		t.Fatal(err)
	}
	if st, err := s.app.Scheduler().Stats(ctx, model); err != nil || st.Backlog["free"] != 0 {
		t.Fatalf("the expired request left a ticket waiting: %v %v", st.Backlog, err)
	}

	// metrics per key, and the key never in the logs
	mr, _ := http.NewRequest(http.MethodGet, "http://"+s.app.ListenAddr()+"/metrics", nil)
	mres, err := http.DefaultClient.Do(mr)
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(mres.Body)
	mres.Body.Close()
	for _, series := range []string{`prq_gateway_refusals_total{key="` + keys[0].ID + `",reason="quota"}`, `prq_gateway_refusals_total{key=`, `prq_gateway_admission_wait_seconds_count{key="` + ck.ID + `"}`} {
		if !strings.Contains(string(metrics), series) {
			t.Errorf("/metrics lacks %s", series)
		}
	}
	if strings.Contains(s.logs.String(), secret) {
		t.Fatal("a virtual key reached the logs")
	}
}

// streamUsage reads a stream to its end and returns its usage chunk's
// total.
func streamUsage(c *openai.Client, req openai.ChatCompletionRequest) (int64, error) {
	st, err := c.CreateChatCompletionStream(context.Background(), req)
	if err != nil {
		return 0, err
	}
	defer st.Close()
	var total int64
	for {
		r, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return total, nil
		}
		if err != nil {
			return 0, err
		}
		if r.Usage != nil {
			total = int64(r.Usage.TotalTokens)
		}
	}
}

// readStream reads a whole stream: the text, the usage chunk if any, and
// how many chunks came.
func readStream(t *testing.T, c *openai.Client, req openai.ChatCompletionRequest) (string, *openai.Usage, int) {
	t.Helper()
	st, err := c.CreateChatCompletionStream(context.Background(), req)
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	defer st.Close()
	var text strings.Builder
	var u *openai.Usage
	n := 0
	for {
		r, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return text.String(), u, n
		}
		if err != nil {
			t.Fatalf("stream recv: %v", err)
		}
		n++
		if r.Usage != nil {
			u = r.Usage
		}
		for _, ch := range r.Choices {
			text.WriteString(ch.Delta.Content)
		}
	}
}

// TestGatewayAndPRJobsShareBucket: agents' requests through the gateway
// and PR jobs run at once on one model bucket held below the load; the
// provider never answers 429.
func TestGatewayAndPRJobsShareBucket(t *testing.T) {
	// the summary model's bucket made small, so both kinds of work queue on it
	s := startStack(t, stackOpts{tune: func(c *config.Config) {
		for i := range c.Models {
			if c.Models[i].Name == c.Jobs.SummaryModel {
				c.Models[i].TokensPerMinute = 8000
			}
		}
	}})
	ctx := context.Background()
	model := s.app.Config().Jobs.SummaryModel
	paid, _, _ := s.gatewayKey(gateway.Spec{Name: "agent-paid", Tier: "paid"})
	trial, _, _ := s.gatewayKey(gateway.Spec{Name: "agent-trial", Tier: "trial"})
	chat, _, _ := s.gatewayKey(gateway.Spec{Name: "agent-chat", Tier: "chat"})
	var prs []jobs.PR
	tiers := []jobs.Tier{jobs.TierPaid, jobs.TierTrial, jobs.TierFree}
	for i, p := range testPRs(t, 6) {
		prs = append(prs, s.openPR(int64(i%3+1), tiers[i%3], p))
	}
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	send := func(c *openai.Client, i int) {
		defer wg.Done()
		if _, err := c.CreateChatCompletion(ctx, chatReq(model, 300, fmt.Sprintf("Agent request %d.", i))); err != nil {
			errs <- err
		}
	}
	// batch agents fire at once; the chat agent asks now and then, as
	// people do (chat may use the share of the bucket batch keeps free)
	for i := 0; i < 40; i++ {
		for _, c := range []*openai.Client{paid, trial} {
			wg.Add(1)
			go send(c, i)
		}
	}
	for i := 0; i < 8; i++ {
		wg.Add(1)
		send(chat, i)
		time.Sleep(100 * time.Millisecond)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("gateway request: %v", err)
	}
	s.waitFor("every PR published", 90*time.Second, func() bool {
		for _, pr := range prs {
			if run, err := s.app.Store().GetRun(ctx, pr); err != nil || run.State != "done" {
				return false
			}
		}
		return true
	})
	for name, st := range s.fakes.OpenAI.Stats() {
		t.Logf("%s: %d requests, max window %d of %d TPM", name, st.Requests, st.MaxWindowTokens, st.TPM)
		if st.RateLimited != 0 {
			t.Errorf("%s: %d provider 429s with gateway traffic and PR jobs on one bucket; want 0", name, st.RateLimited)
		}
	}
}
