package llm_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/llm"
)

// TestFirstByteLimit: a provider that takes a call and sends nothing (the
// fake's hang fault) is abandoned at the first-byte limit, a transient
// failure, long before the call timeout; on both clients. A reply whose
// headers came in time is not cut, however long its body takes.
func TestFirstByteLimit(t *testing.T) {
	fake := fakeopenai.New(fakeopenai.Config{Models: []fakeopenai.Model{{Name: "m", RPM: 1000, TPM: 1000000, Flex: true}}, Keys: []string{"good"}})
	// the hang outlasts the test: only the first-byte limit ends the call
	fake.SetFaults(fakeopenai.Faults{Timeout: 1, TimeoutAfter: "1h"})
	srv := httptest.NewServer(fake)
	defer srv.Close()
	req := llm.Request{Model: "m", System: "Summarize.", User: "File: a.go\n   1 +x := 1", MaxOutput: 100, FirstByte: 200 * time.Millisecond}
	for name, c := range map[string]llm.Completer{
		"openai":    llm.New("good", srv.URL+"/v1", time.Hour, nil),
		"anthropic": llm.NewAnthropic("good", srv.URL, time.Hour, nil),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := c.Complete(context.Background(), req)
			var e *llm.Error
			if !errors.Is(err, llm.ErrTransient) || !errors.As(err, &e) || e.Code != "first_byte_timeout" {
				t.Fatalf("a call the provider never answers: %v, want a transient first_byte_timeout", err)
			}
		})
	}

	// a flex call queues before it answers: no first-byte limit (the
	// fake's hang, shortened, ends it with its 504)
	fake.SetFaults(fakeopenai.Faults{Timeout: 1, TimeoutAfter: "600ms"})
	flex := req
	flex.ServiceTier = llm.ServiceTierFlex
	_, err := llm.New("good", srv.URL+"/v1", time.Hour, nil).Complete(context.Background(), flex)
	if e := (*llm.Error)(nil); !errors.As(err, &e) || e.Code == llm.CodeFirstByte || e.Status != http.StatusGatewayTimeout {
		t.Fatalf("a flex call the provider answers late: %v, want the provider's 504, not the first-byte limit", err)
	}

	// headers at once, the body later: not cut
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		time.Sleep(600 * time.Millisecond) // past the limit, a body still coming
		io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"done"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`)
	}))
	defer slow.Close()
	resp, err := llm.New("good", slow.URL+"/v1", time.Hour, nil).Complete(context.Background(), req)
	if err != nil || resp.Text != "done" {
		t.Fatalf("a reply begun within the limit: %+v %v, want it whole", resp, err)
	}
}
