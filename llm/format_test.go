package llm_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/llm"
)

const reviewSchema = `{"type":"object","additionalProperties":false,"required":["summary","comments"],
"properties":{"summary":{"type":"string"},"comments":{"type":"array","items":{"type":"object","additionalProperties":false,
"required":["line","body"],"properties":{"line":{"type":"integer"},"body":{"type":"string"}}}}}}`

// TestFormatsAgainstReplyStyles: a loosely following model answers in
// prose or fences unless the request asks for JSON with response_format.
func TestFormatsAgainstReplyStyles(t *testing.T) {
	ctx := context.Background()
	base := llm.Request{Model: "m", MaxOutput: 300,
		System: `Review the file. Answer with JSON only: {"summary": "...", "comments": [{"line": 1, "body": "..."}]}`,
		User:   "File: a.go (modified, +2 -0)\n\n@@ -1,0 +1,2 @@\n   1 +x := f()\n   2 +y := g(x)\n"}
	for _, tc := range []struct {
		style   fakeopenai.ReplyStyle
		format  llm.FormatType
		objects int // JSON objects found in the reply
	}{
		{fakeopenai.ReplyJSON, "", 1},
		{fakeopenai.ReplyProse, "", 0},
		{fakeopenai.ReplyProse, llm.FormatJSONObject, 1},
		{fakeopenai.ReplyProse, llm.FormatJSONSchema, 1},
		{fakeopenai.ReplyFenced, "", 1}, // the fenced review wins over the quoted `{}`
		{fakeopenai.ReplyFenced, llm.FormatJSONSchema, 1},
		// A cut reply holds only an inner comment object: a strict decode
		// of the review rejects it.
		{fakeopenai.ReplyCut, llm.FormatJSONSchema, 1},
	} {
		t.Run(string(tc.style)+"/"+string(tc.format), func(t *testing.T) {
			fake := fakeopenai.New(fakeopenai.Config{Models: []fakeopenai.Model{{Name: "m", RPM: 1000, TPM: 1000000}}, Replies: tc.style})
			srv := httptest.NewServer(fake)
			defer srv.Close()
			c := llm.New("k", srv.URL+"/v1", 5*time.Second, nil)
			req := base
			req.Format = llm.Format{Type: tc.format, Name: "review", Schema: json.RawMessage(reviewSchema)}
			resp, err := c.Complete(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if got := len(llm.JSONObjects(resp.Text)); got != tc.objects {
				t.Fatalf("reply %q: %d JSON objects, want %d", resp.Text, got, tc.objects)
			}
			if tc.style == fakeopenai.ReplyCut && resp.FinishReason != "length" {
				t.Fatalf("cut reply finished %q, want length", resp.FinishReason)
			}
		})
	}
}

func TestFormatRefusedLikeOpenAI(t *testing.T) {
	fake := fakeopenai.New(fakeopenai.Config{Models: []fakeopenai.Model{{Name: "m", RPM: 1000, TPM: 1000000}}})
	srv := httptest.NewServer(fake)
	defer srv.Close()
	c := llm.New("k", srv.URL+"/v1", 5*time.Second, nil)
	for name, req := range map[string]llm.Request{
		"json_object without the word": {Model: "m", System: "Review.", User: "x", MaxOutput: 10, Format: llm.Format{Type: llm.FormatJSONObject}},
		"json_schema without a schema": {Model: "m", System: "Review.", User: "x", MaxOutput: 10, Format: llm.Format{Type: llm.FormatJSONSchema, Name: "r", Schema: json.RawMessage(`{"type":"string"}`)}},
	} {
		_, err := c.Complete(context.Background(), req)
		if !errors.Is(err, llm.ErrPermanent) {
			t.Errorf("%s: %v, want a permanent 400", name, err)
		}
	}
	if _, err := llm.ParseFormatType("yaml"); err == nil {
		t.Error("ParseFormatType accepted yaml")
	}
}
