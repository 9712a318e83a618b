package fakeopenai_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	anthropic "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/prq-dev/prq/fake/fakeopenai"
)

// The Anthropic mode's prompt cache, checked through the official SDK.

const antKey = "sk-ant"

// antClient is the SDK pointed at the fake, retries off.
func antClient(url string) anthropic.Client {
	return anthropic.NewClient(option.WithoutEnvironmentDefaults(), option.WithBaseURL(url+"/"),
		option.WithHeader("x-api-key", antKey), option.WithMaxRetries(0))
}

// stepClock is the fake's clock, moved by the test.
type stepClock struct {
	mu sync.Mutex
	t  time.Time
}

func newStepClock() *stepClock { return &stepClock{t: time.Unix(1_900_000_000, 0)} }

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *stepClock) Step(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// prose is n sentences of review guidance, distinct by tag: about 16
// tokens and 80 characters a sentence.
func prose(tag string, n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%s rule %d: check that each change keeps its error handling and its tests. ", tag, i)
	}
	return b.String()
}

// marked is a text block with a cache breakpoint of ttl ("": the default).
func marked(text, ttl string) anthropic.TextBlockParam {
	cc := anthropic.NewCacheControlEphemeralParam()
	cc.TTL = anthropic.CacheControlEphemeralTTL(ttl)
	return anthropic.TextBlockParam{Text: text, CacheControl: cc}
}

// userOf is a user message of text blocks.
func userOf(blocks ...anthropic.TextBlockParam) anthropic.MessageParam {
	content := make([]anthropic.ContentBlockParamUnion, len(blocks))
	for i := range blocks {
		content[i] = anthropic.ContentBlockParamUnion{OfText: &blocks[i]}
	}
	return anthropic.NewUserMessage(content...)
}

// send makes one call and returns its usage.
func send(t *testing.T, c anthropic.Client, model string, system []anthropic.TextBlockParam, msgs ...anthropic.MessageParam) anthropic.Usage {
	t.Helper()
	msg, err := c.Messages.New(context.Background(), anthropic.MessageNewParams{Model: anthropic.Model(model), MaxTokens: 50, System: system, Messages: msgs})
	if err != nil {
		t.Fatal(err)
	}
	return msg.Usage
}

// whole is a prompt's input tokens as a request without breakpoints
// reports them: all of it.
func whole(t *testing.T, c anthropic.Client, model string, system []anthropic.TextBlockParam, msgs ...anthropic.MessageParam) int64 {
	t.Helper()
	u := send(t, c, model, system, msgs...)
	if u.CacheCreationInputTokens != 0 || u.CacheReadInputTokens != 0 {
		t.Fatalf("a request without cache_control used the cache: %+v", u)
	}
	return u.InputTokens
}

func plain(text string) anthropic.TextBlockParam { return anthropic.TextBlockParam{Text: text} }

// TestAnthropicCacheMinimum: a prefix shorter than the model's minimum
// cacheable length is never cached, without an error; the same prefix is
// cached on a model whose minimum it reaches. The minimums default by
// model name and can be set.
func TestAnthropicCacheMinimum(t *testing.T) {
	models := []fakeopenai.Model{{Name: "claude-opus-5"}, {Name: "claude-sonnet-4-5"}, {Name: "claude-3-5-haiku-20241022"},
		{Name: "claude-haiku-4-5"}, {Name: "claude-own", CacheMinTokens: 3000}}
	for i := range models {
		models[i].RPM, models[i].TPM = 1000, 10_000_000
	}
	srv := httptest.NewServer(fakeopenai.New(fakeopenai.Config{Models: models, Keys: []string{antKey}}))
	defer srv.Close()
	c := antClient(srv.URL)
	sys := []anthropic.TextBlockParam{marked(prose("system", 95), "")}
	user := userOf(plain("File: a.go\n  3 +x := 1"))
	// the prefix's size, as the model with the smallest minimum writes it
	prefix := send(t, c, "claude-opus-5", sys, user).CacheCreationInputTokens
	if prefix < 1024 || prefix >= 2048 {
		t.Fatalf("the system prompt is %d tokens: the test needs one between 1,024 and 2,048", prefix)
	}
	for _, tc := range []struct {
		model  string
		cached bool
	}{
		{"claude-sonnet-4-5", true},          // 1,024
		{"claude-3-5-haiku-20241022", false}, // 2,048
		{"claude-haiku-4-5", false},          // 4,096
		{"claude-own", false},                // set to 3,000
	} {
		t.Run(tc.model, func(t *testing.T) {
			all := whole(t, c, tc.model, []anthropic.TextBlockParam{plain(sys[0].Text)}, user)
			first, second := send(t, c, tc.model, sys, user), send(t, c, tc.model, sys, user)
			if !tc.cached {
				for _, u := range []anthropic.Usage{first, second} {
					if u.CacheCreationInputTokens != 0 || u.CacheReadInputTokens != 0 || u.InputTokens != all {
						t.Fatalf("a %d-token prefix below the minimum: %+v, want all %d tokens as input", prefix, u, all)
					}
				}
				return
			}
			if first.CacheCreationInputTokens != prefix || first.CacheReadInputTokens != 0 || second.CacheReadInputTokens != prefix || second.CacheCreationInputTokens != 0 {
				t.Fatalf("write then read %d: %+v, %+v", prefix, first, second)
			}
		})
	}
}

// TestAnthropicCacheLifetime: the first call writes the prefix up to its
// breakpoint and reports the rest as input; a call within the TTL reads
// it and refreshes it; the entry expires a TTL after its last use on the
// fake's clock; a 1h entry outlives a 5m one; the three input counts sum
// to the whole prompt.
func TestAnthropicCacheLifetime(t *testing.T) {
	clock := newStepClock()
	srv := httptest.NewServer(fakeopenai.New(fakeopenai.Config{Models: []fakeopenai.Model{{Name: "claude-sonnet-4-5", RPM: 1000, TPM: 10_000_000}},
		Keys: []string{antKey}, Now: clock.Now}))
	defer srv.Close()
	c := antClient(srv.URL)
	const model = "claude-sonnet-4-5"
	text := prose("system", 95)
	sys := []anthropic.TextBlockParam{marked(text, "")}
	u1, u2 := userOf(plain("File: a.go\n  3 +x := 1")), userOf(plain("File: b.go\n  7 +y := 2\n  8 +z := 3"))
	all1, all2 := whole(t, c, model, []anthropic.TextBlockParam{plain(text)}, u1), whole(t, c, model, []anthropic.TextBlockParam{plain(text)}, u2)

	w := send(t, c, model, sys, u1)
	p := w.CacheCreationInputTokens
	if p == 0 || w.CacheReadInputTokens != 0 || w.CacheCreation.Ephemeral5mInputTokens != p || w.CacheCreation.Ephemeral1hInputTokens != 0 || p+w.InputTokens != all1 {
		t.Fatalf("the first call writes the prefix: %+v (whole prompt %d)", w, all1)
	}
	read := func(step time.Duration, want int64) {
		t.Helper()
		clock.Step(step)
		u := send(t, c, model, sys, u2)
		if u.CacheReadInputTokens != want || u.CacheCreationInputTokens != p-want || u.InputTokens+u.CacheReadInputTokens+u.CacheCreationInputTokens != all2 {
			t.Fatalf("after %v: %+v, want %d read of the %d-token prefix (whole prompt %d)", step, u, want, p, all2)
		}
	}
	read(time.Minute, p)               // within the TTL: read, and refreshed
	read(5*time.Minute-time.Second, p) // 5m59s after the write, 4m59s after the read
	read(5*time.Minute, 0)             // a whole TTL after its last use: gone, written again
	read(time.Second, p)

	// a 1h entry lives past 5 minutes; a 5m one written with it does not
	long := []anthropic.TextBlockParam{marked(prose("hour", 95), "1h")}
	short := []anthropic.TextBlockParam{marked(prose("minutes", 95), "5m")}
	if u := send(t, c, model, long, u1); u.CacheCreation.Ephemeral1hInputTokens == 0 || u.CacheCreation.Ephemeral5mInputTokens != 0 {
		t.Fatalf("a 1h write: %+v", u)
	}
	send(t, c, model, short, u1)
	clock.Step(6 * time.Minute)
	if u := send(t, c, model, short, u1); u.CacheReadInputTokens != 0 || u.CacheCreationInputTokens == 0 {
		t.Fatalf("a 5m entry after 6 minutes: %+v, want a miss", u)
	}
	for _, step := range []time.Duration{0, 59 * time.Minute} {
		clock.Step(step)
		if u := send(t, c, model, long, u1); u.CacheReadInputTokens == 0 || u.CacheCreationInputTokens != 0 {
			t.Fatalf("a 1h entry %v after its last use: %+v, want a read", 6*time.Minute+step, u)
		}
	}
	clock.Step(time.Hour)
	if u := send(t, c, model, long, u1); u.CacheReadInputTokens != 0 {
		t.Fatalf("a 1h entry an hour after its last use: %+v, want a miss", u)
	}
}

// TestAnthropicCacheStreamUsage: a streamed reply's message_start usage
// is the whole reply's: a write, then reads equal to a non-streamed
// call's.
func TestAnthropicCacheStreamUsage(t *testing.T) {
	srv := httptest.NewServer(fakeopenai.New(fakeopenai.Config{Models: []fakeopenai.Model{{Name: "claude-sonnet-4-5", RPM: 1000, TPM: 10_000_000}}, Keys: []string{antKey}}))
	defer srv.Close()
	c := antClient(srv.URL)
	params := anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 50, System: []anthropic.TextBlockParam{marked(prose("system", 95), "")},
		Messages: []anthropic.MessageParam{userOf(plain("File: a.go\n  3 +x := 1"))}}
	stream := func() anthropic.Usage {
		t.Helper()
		st := c.Messages.NewStreaming(context.Background(), params)
		var start anthropic.Usage
		var msg anthropic.Message
		for st.Next() {
			ev := st.Current()
			if ev.Type == "message_start" {
				start = ev.Message.Usage
			}
			if err := msg.Accumulate(ev); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.Err(); err != nil {
			t.Fatal(err)
		}
		if msg.Usage.InputTokens != start.InputTokens || msg.Usage.CacheReadInputTokens != start.CacheReadInputTokens || msg.Usage.OutputTokens == 0 {
			t.Fatalf("accumulated usage %+v, message_start's %+v", msg.Usage, start)
		}
		return start
	}
	first := stream()
	if first.CacheCreationInputTokens == 0 || first.CacheReadInputTokens != 0 || first.CacheCreation.Ephemeral5mInputTokens != first.CacheCreationInputTokens {
		t.Fatalf("a streamed write: %+v", first)
	}
	msg, err := c.Messages.New(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	second := stream()
	for _, u := range []anthropic.Usage{msg.Usage, second} {
		if u.CacheReadInputTokens != first.CacheCreationInputTokens || u.CacheCreationInputTokens != 0 || u.InputTokens != first.InputTokens {
			t.Fatalf("a read after the write %+v: %+v", first, u)
		}
	}
}

// TestAnthropicCacheLongestPrefix: prq's layout, a breakpoint on the
// instructions and one on a pull request's context. Another pull
// request's call reads the instructions and writes its own context;
// a call of the first pull request reads both.
func TestAnthropicCacheLongestPrefix(t *testing.T) {
	srv := httptest.NewServer(fakeopenai.New(fakeopenai.Config{Models: []fakeopenai.Model{{Name: "claude-sonnet-4-5", RPM: 1000, TPM: 10_000_000}}, Keys: []string{antKey}}))
	defer srv.Close()
	c := antClient(srv.URL)
	const model = "claude-sonnet-4-5"
	sys := []anthropic.TextBlockParam{marked(prose("system", 95), "")}
	call := func(pr, file string) (anthropic.Usage, int64) {
		ctx, user := prose(pr, 40), "File: "+file+"\n  3 +x := 1"
		all := whole(t, c, model, []anthropic.TextBlockParam{plain(sys[0].Text)}, userOf(plain(ctx), plain(user)))
		return send(t, c, model, sys, userOf(marked(ctx, ""), plain(user))), all
	}
	a, allA := call("pr-1", "a.go")
	b, allB := call("pr-2", "b.go")
	c1, allC := call("pr-1", "c.go")
	switch {
	case a.CacheReadInputTokens != 0 || a.CacheCreationInputTokens+a.InputTokens != allA:
		t.Fatalf("the first call writes instructions and context: %+v (whole %d)", a, allA)
	case b.CacheReadInputTokens == 0 || b.CacheReadInputTokens >= a.CacheCreationInputTokens || b.CacheReadInputTokens+b.CacheCreationInputTokens+b.InputTokens != allB:
		t.Fatalf("another pull request reads the instructions only: %+v after %+v (whole %d)", b, a, allB)
	case c1.CacheReadInputTokens != a.CacheCreationInputTokens || c1.CacheCreationInputTokens != 0 || c1.CacheReadInputTokens+c1.InputTokens != allC:
		t.Fatalf("the same pull request reads instructions and context: %+v after %+v (whole %d)", c1, a, allC)
	}
}

// TestAnthropicCacheLookback: a breakpoint finds an earlier request's
// entry at most 20 blocks back (itself the first), and not further.
func TestAnthropicCacheLookback(t *testing.T) {
	srv := httptest.NewServer(fakeopenai.New(fakeopenai.Config{Models: []fakeopenai.Model{{Name: "claude-sonnet-4-5", RPM: 1000, TPM: 10_000_000}}, Keys: []string{antKey}}))
	defer srv.Close()
	c := antClient(srv.URL)
	texts := make([]string, 50)
	for i := range texts {
		texts[i] = prose(fmt.Sprintf("block-%d", i), 8)
	}
	// the conversation up to block n, with its breakpoint on block n
	upTo := func(n int) anthropic.Usage {
		blocks := make([]anthropic.TextBlockParam, n+1)
		for i := range blocks {
			blocks[i] = plain(texts[i])
		}
		blocks[n] = marked(texts[n], "")
		return send(t, c, "claude-sonnet-4-5", nil, userOf(blocks...))
	}
	r1 := upTo(11)
	r2 := upTo(26) // 15 blocks on: finds block 11's entry
	r3 := upTo(46) // 20 on from 26: looks at 46 down to 27
	r4 := upTo(45) // looks at 45 down to 26
	switch {
	case r1.CacheCreationInputTokens == 0 || r1.CacheReadInputTokens != 0:
		t.Fatalf("block 11 written: %+v", r1)
	case r2.CacheReadInputTokens != r1.CacheCreationInputTokens || r2.CacheCreationInputTokens == 0:
		t.Fatalf("block 26 reads block 11's entry and writes its own: %+v after %+v", r2, r1)
	case r3.CacheReadInputTokens != 0:
		t.Fatalf("block 46 is 20 blocks past block 26's entry: %+v, want a miss", r3)
	case r4.CacheReadInputTokens != r2.CacheReadInputTokens+r2.CacheCreationInputTokens:
		t.Fatalf("block 45 reads block 26's entry: %+v after %+v", r4, r2)
	}
}

// TestAnthropicCacheBreakpoints: at most 4 breakpoints (tools, system
// and messages, and the top-level one of automatic caching, count);
// a 1h breakpoint may not follow a 5m one; ttl and type take
// Anthropic's values. Refusals are 400 invalid_request_error.
func TestAnthropicCacheBreakpoints(t *testing.T) {
	fake := fakeopenai.New(fakeopenai.Config{Models: []fakeopenai.Model{{Name: "claude-sonnet-4-5", RPM: 1000, TPM: 10_000_000}}, Keys: []string{antKey}})
	srv := httptest.NewServer(fake)
	defer srv.Close()
	c := antClient(srv.URL)
	tool := func(ttl string) anthropic.ToolUnionParam {
		cc := anthropic.NewCacheControlEphemeralParam()
		cc.TTL = anthropic.CacheControlEphemeralTTL(ttl)
		return anthropic.ToolUnionParam{OfTool: &anthropic.ToolParam{Name: "lookup", InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"q": map[string]any{"type": "string"}}}, CacheControl: cc}}
	}
	cases := []struct {
		name   string
		params anthropic.MessageNewParams
		want   string // "" for 200, else the 400's message
	}{
		{"four", anthropic.MessageNewParams{Tools: []anthropic.ToolUnionParam{tool("")}, System: []anthropic.TextBlockParam{marked("rules", "")},
			Messages: []anthropic.MessageParam{userOf(marked("context", ""), marked("file", ""))}}, ""},
		{"five", anthropic.MessageNewParams{Tools: []anthropic.ToolUnionParam{tool("")}, System: []anthropic.TextBlockParam{marked("rules", ""), marked("more", "")},
			Messages: []anthropic.MessageParam{userOf(marked("context", ""), marked("file", ""))}}, "A maximum of 4 blocks with cache_control may be provided. Found 5."},
		{"four and automatic", anthropic.MessageNewParams{CacheControl: anthropic.NewCacheControlEphemeralParam(), System: []anthropic.TextBlockParam{marked("rules", ""), marked("more", "")},
			Messages: []anthropic.MessageParam{userOf(marked("context", ""), marked("file", ""), plain("question"))}}, "A maximum of 4 blocks with cache_control may be provided. Found 5."},
		{"automatic on an explicit one", anthropic.MessageNewParams{CacheControl: anthropic.NewCacheControlEphemeralParam(), System: []anthropic.TextBlockParam{marked("rules", ""), marked("more", "")},
			Messages: []anthropic.MessageParam{userOf(marked("context", ""), marked("file", ""))}}, ""},
		{"1h after 5m", anthropic.MessageNewParams{System: []anthropic.TextBlockParam{marked("rules", "5m")},
			Messages: []anthropic.MessageParam{userOf(marked("context", "1h"))}}, "A ttl='1h' cache_control block must not come after a ttl='5m' cache_control block. Note that blocks are processed in the following order: `tools`, `system`, `messages`."},
		{"1h tool before a 5m system", anthropic.MessageNewParams{Tools: []anthropic.ToolUnionParam{tool("1h")}, System: []anthropic.TextBlockParam{marked("rules", "5m")},
			Messages: []anthropic.MessageParam{userOf(plain("context"))}}, ""},
		{"5m tool before a 1h system", anthropic.MessageNewParams{Tools: []anthropic.ToolUnionParam{tool("")}, System: []anthropic.TextBlockParam{marked("rules", "1h")},
			Messages: []anthropic.MessageParam{userOf(plain("context"))}}, "A ttl='1h' cache_control block must not come after a ttl='5m' cache_control block. Note that blocks are processed in the following order: `tools`, `system`, `messages`."},
		{"ttl 10m", anthropic.MessageNewParams{System: []anthropic.TextBlockParam{marked("rules", "10m")},
			Messages: []anthropic.MessageParam{userOf(plain("context"))}}, "system.0.cache_control.ttl: Input should be '5m' or '1h'"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.params.Model, tc.params.MaxTokens = "claude-sonnet-4-5", 20
			_, err := c.Messages.New(context.Background(), tc.params)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var ae *anthropic.Error
			if !errors.As(err, &ae) || ae.StatusCode != http.StatusBadRequest || ae.Type() != "invalid_request_error" || ae.Message != tc.want {
				t.Fatalf("got %v, want 400 invalid_request_error %q", err, tc.want)
			}
		})
	}
	// the type the SDK cannot misspell
	resp, body := post(t, srv.URL+"/v1/messages", map[string]string{"x-api-key": antKey, "anthropic-version": "2023-06-01"},
		`{"model":"claude-sonnet-4-5","max_tokens":20,"messages":[{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"persistent"}}]}]}`)
	if resp.StatusCode != http.StatusBadRequest || errorType(body) != "invalid_request_error" {
		t.Fatalf("cache_control type persistent: %d %v", resp.StatusCode, body)
	}
}

// TestAnthropicCacheAutomatic: a top-level cache_control puts the
// breakpoint on the last block, so a growing conversation reads what
// its previous turn wrote.
func TestAnthropicCacheAutomatic(t *testing.T) {
	srv := httptest.NewServer(fakeopenai.New(fakeopenai.Config{Models: []fakeopenai.Model{{Name: "claude-sonnet-4-5", RPM: 1000, TPM: 10_000_000}}, Keys: []string{antKey}}))
	defer srv.Close()
	c := antClient(srv.URL)
	turns := []anthropic.MessageParam{userOf(plain(prose("question", 95)))}
	ask := func() anthropic.Usage {
		t.Helper()
		msg, err := c.Messages.New(context.Background(), anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 50,
			CacheControl: anthropic.NewCacheControlEphemeralParam(), Messages: turns})
		if err != nil {
			t.Fatal(err)
		}
		turns = append(turns, anthropic.NewAssistantMessage(anthropic.NewTextBlock(msg.Content[0].Text)), userOf(plain("And the next file?")))
		return msg.Usage
	}
	first, second := ask(), ask()
	if first.CacheCreationInputTokens == 0 || first.InputTokens != 0 || second.CacheReadInputTokens != first.CacheCreationInputTokens || second.CacheCreationInputTokens == 0 {
		t.Fatalf("automatic caching: %+v then %+v", first, second)
	}
}
