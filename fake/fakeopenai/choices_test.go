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

// TestChoices: n choices come back, streamed or not, and the usage counts
// them all, as OpenAI's does.
func TestChoices(t *testing.T) {
	srv := httptest.NewServer(fakeopenai.New(fakeopenai.Config{Models: []fakeopenai.Model{{Name: "m", RPM: 1000, TPM: 100000}}}))
	defer srv.Close()
	c := newClient(srv.URL, "sk-test")
	req := openai.ChatCompletionRequest{Model: "m", MaxCompletionTokens: 50, Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "hello"}}}
	one, err := c.CreateChatCompletion(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	req.N = 3
	three, err := c.CreateChatCompletion(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if len(three.Choices) != 3 || three.Choices[2].Index != 2 || three.Usage.CompletionTokens != 3*one.Usage.CompletionTokens || one.Usage.CompletionTokens == 0 {
		t.Fatalf("n=3: %d choices, %d completion tokens; one choice had %d", len(three.Choices), three.Usage.CompletionTokens, one.Usage.CompletionTokens)
	}
	req.Stream, req.StreamOptions = true, &openai.StreamOptions{IncludeUsage: true}
	st, err := c.CreateChatCompletionStream(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	seen, completion := map[int]bool{}, 0
	for {
		chunk, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, ch := range chunk.Choices {
			seen[ch.Index] = true
		}
		if chunk.Usage != nil {
			completion = chunk.Usage.CompletionTokens
		}
	}
	if len(seen) != 3 || completion != three.Usage.CompletionTokens {
		t.Fatalf("streamed n=3: choices %v, %d completion tokens, want 3 and %d", seen, completion, three.Usage.CompletionTokens)
	}
}

// TestUnrecognizedArguments: a top-level argument OpenAI does not take,
// a case variant of one included, is refused with its 400.
func TestUnrecognizedArguments(t *testing.T) {
	srv := httptest.NewServer(fakeopenai.New(fakeopenai.Config{Models: []fakeopenai.Model{{Name: "m", RPM: 1000, TPM: 100000}}}))
	defer srv.Close()
	for _, body := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"frobnicate":true}`,
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"Messages":[]}`,
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"n":129}`,
	} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer sk-test")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "invalid_request_error") {
			t.Errorf("%s: %d %s, want 400", body, res.StatusCode, b)
		}
	}
	if !strings.Contains(func() string {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}],"Model":"m"}`))
		req.Header.Set("Authorization", "Bearer sk-test")
		res, _ := http.DefaultClient.Do(req)
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		return string(b)
	}(), "Unrecognized request argument supplied: Model") {
		t.Error("a case variant is not named as unrecognized")
	}
}
