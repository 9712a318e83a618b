package fakeopenai_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/prq-dev/prq/fake/fakeopenai"
)

// TestStream: the fake streams as OpenAI does — chunks of the answer,
// then, only with stream_options.include_usage, a last chunk with no
// choices and the usage; stream_options without stream is refused; a
// verbose model answers up to the cap.
func TestStream(t *testing.T) {
	fake := fakeopenai.New(fakeopenai.Config{Models: []fakeopenai.Model{{Name: "m", RPM: 1000, TPM: 100000}}, Verbose: true})
	srv := httptest.NewServer(fake)
	defer srv.Close()
	c := newClient(srv.URL, "sk-test")
	read := func(usage bool) (text string, u *openai.Usage, emptyChoices int) {
		req := openai.ChatCompletionRequest{Model: "m", MaxCompletionTokens: 40, Stream: true,
			Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "Tell me about the change."}}}
		if usage {
			req.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
		}
		st, err := c.CreateChatCompletionStream(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		var b strings.Builder
		for {
			r, err := st.Recv()
			if errors.Is(err, io.EOF) {
				return b.String(), u, emptyChoices
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.Usage != nil {
				u = r.Usage
			}
			if len(r.Choices) == 0 {
				emptyChoices++
			}
			for _, ch := range r.Choices {
				b.WriteString(ch.Delta.Content)
			}
		}
	}
	text, u, empty := read(true)
	if u == nil || u.CompletionTokens != 40 || u.PromptTokens <= 0 || empty != 1 || text == "" {
		t.Fatalf("with include_usage: usage %+v, %d chunks without choices, text %q; want the full 40-token answer and one usage chunk", u, empty, text)
	}
	if _, u, empty := read(false); u != nil || empty != 0 {
		t.Fatalf("without include_usage: usage %+v, %d chunks without choices; want none", u, empty)
	}
	if got := fake.Stats()["m"].CompletionTokens; got != 80 {
		t.Fatalf("the fake counted %d completion tokens, want 80", got)
	}
	res, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no key: %d", res.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m","stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Authorization", "Bearer sk-test")
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusBadRequest {
		t.Fatalf("stream_options without stream: %d, want 400", res.StatusCode)
	}
}
