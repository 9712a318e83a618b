package llm_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/llm"
)

// wire records the Messages requests the fake receives and the usage it
// answers with.
type wire struct {
	mu     sync.Mutex
	bodies []map[string]any
	usages []map[string]any
}

func (wr *wire) serve(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		var reply bytes.Buffer
		next.ServeHTTP(tee{w, &reply}, r)
		var req, resp map[string]any
		json.Unmarshal(body, &req)
		json.Unmarshal(reply.Bytes(), &resp)
		usage, _ := resp["usage"].(map[string]any)
		wr.mu.Lock()
		wr.bodies, wr.usages = append(wr.bodies, req), append(wr.usages, usage)
		wr.mu.Unlock()
	})
}

// last is the latest request and the usage answered.
func (wr *wire) last() (map[string]any, map[string]any) {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	return wr.bodies[len(wr.bodies)-1], wr.usages[len(wr.usages)-1]
}

type tee struct {
	http.ResponseWriter
	copy *bytes.Buffer
}

func (t tee) Write(b []byte) (int, error) {
	t.copy.Write(b)
	return t.ResponseWriter.Write(b)
}

// TestAnthropicCacheBreakpoints: System and Context go with a cache
// breakpoint each (ephemeral; ttl 1h with CacheLong), Context as the
// first text block of the first user message and User as the next
// without one; a request without them sends no cache_control. The
// reply's usage maps to the Response: cache reads to CachedTokens,
// writes to CacheWriteTokens, and PromptTokens is all three input counts.
func TestAnthropicCacheBreakpoints(t *testing.T) {
	rec := &wire{}
	fake := fakeopenai.New(fakeopenai.Config{Models: []fakeopenai.Model{{Name: "claude-sonnet-4-5", RPM: 1000, TPM: 10_000_000}}, Keys: []string{"sk-ant"}})
	srv := httptest.NewServer(rec.serve(fake))
	defer srv.Close()
	c := llm.NewAnthropic("sk-ant", srv.URL, 5*time.Second, nil)
	rules := strings.Repeat("Review the file for errors that are dropped and tests that are missing. ", 120)
	pr := strings.Repeat("Pull request: limiter fixes. It changes how the bucket refills after a restart. ", 60)
	text := func(s string, cache map[string]any) map[string]any {
		b := map[string]any{"type": "text", "text": s}
		if cache != nil {
			b["cache_control"] = cache
		}
		return b
	}
	short, long := map[string]any{"type": "ephemeral"}, map[string]any{"type": "ephemeral", "ttl": "1h"}
	cases := []struct {
		name       string
		req        llm.Request
		system     []any // nil: none sent
		firstUser  []any
		cacheWrite bool
	}{
		{"system and context", llm.Request{System: rules, Context: pr}, []any{text(rules, short)}, []any{text(pr, short), text("File: %s", nil)}, true},
		{"cache long", llm.Request{System: rules + " (batch)", Context: pr, CacheLong: true}, []any{text(rules+" (batch)", long)}, []any{text(pr, long), text("File: %s", nil)}, true},
		{"system only", llm.Request{System: rules + " (summary)"}, []any{text(rules+" (summary)", short)}, []any{text("File: %s", nil)}, true},
		{"neither", llm.Request{}, nil, []any{text("File: %s", nil)}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var first llm.Response
			for i, file := range []string{"a.go", "b.go"} {
				r := tc.req
				r.Model, r.User, r.MaxOutput = "claude-sonnet-4-5", "File: "+file, 100
				resp, err := c.Complete(context.Background(), r)
				if err != nil {
					t.Fatal(err)
				}
				body, usage := rec.last()
				user := append([]any(nil), tc.firstUser...)
				user[len(user)-1] = text(fmt.Sprintf("File: %s", file), nil)
				if got := body["system"]; !reflect.DeepEqual(got, tc.system) && (tc.system != nil || got != nil) {
					t.Fatalf("system sent %v, want %v", got, tc.system)
				}
				if got := body["messages"].([]any)[0].(map[string]any)["content"]; !reflect.DeepEqual(got, user) {
					t.Fatalf("first user message sent %v, want %v", got, user)
				}
				if raw, _ := json.Marshal(body); tc.system == nil && strings.Contains(string(raw), "cache_control") {
					t.Fatalf("a request without System or Context sent a breakpoint: %s", raw)
				}
				in, read, write := usage["input_tokens"].(float64), usage["cache_read_input_tokens"].(float64), usage["cache_creation_input_tokens"].(float64)
				if resp.PromptTokens != int64(in+read+write) || resp.CachedTokens != int64(read) || resp.CacheWriteTokens != int64(write) {
					t.Fatalf("response %+v from usage %v", resp, usage)
				}
				switch {
				case !tc.cacheWrite && (read != 0 || write != 0):
					t.Fatalf("nothing to cache, yet usage %v", usage)
				case tc.cacheWrite && i == 0 && (write == 0 || read != 0):
					t.Fatalf("the first call writes its prefix: %v", usage)
				case tc.cacheWrite && i == 1 && (resp.CachedTokens != first.CacheWriteTokens || write != 0):
					t.Fatalf("the second call reads what the first wrote (%d): %v", first.CacheWriteTokens, usage)
				}
				if byTTL, _ := usage["cache_creation"].(map[string]any); tc.req.CacheLong && byTTL["ephemeral_1h_input_tokens"] != write {
					t.Fatalf("CacheLong writes 1h entries: %v", usage)
				}
				first = resp
			}
		})
	}
}
