package fakeopenai_test

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/tiktoken-go/tokenizer"

	"github.com/prq-dev/prq/fake/fakeopenai"
)

// TestEmbeddings drives the fake's embeddings with the official openai
// SDK: float and base64 vectors are the same deterministic unit vectors,
// usage counts cl100k_base tokens (token arrays their length), a request
// past the model's tokens per minute is a 429 with retry headers, bad
// input a 400, and Azure's deployment path serves them too.
func TestEmbeddings(t *testing.T) {
	const model = "text-embedding-3-small"
	fake := fakeopenai.New(fakeopenai.Config{Models: []fakeopenai.Model{{Name: model, RPM: 1000, TPM: 60}}, Keys: []string{"sk-e"}})
	srv := httptest.NewServer(fake)
	defer srv.Close()
	c := openai.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("sk-e"), option.WithMaxRetries(0))
	ctx := context.Background()
	texts := []string{"The change adds a retry.", "Review this file, please."}
	var vectors [2][][]float64
	for i, format := range []openai.EmbeddingNewParamsEncodingFormat{openai.EmbeddingNewParamsEncodingFormatFloat, openai.EmbeddingNewParamsEncodingFormatBase64} {
		resp, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: model, EncodingFormat: format,
			Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: texts}})
		if err != nil {
			t.Fatal(err)
		}
		cl, _ := tokenizer.Get(tokenizer.Cl100kBase)
		want := 0
		for _, s := range texts {
			n, _ := cl.Count(s)
			want += n
		}
		if resp.Usage.PromptTokens != int64(want) || resp.Usage.TotalTokens != int64(want) || len(resp.Data) != 2 {
			t.Fatalf("%s: usage %+v, %d vectors; want %d cl100k tokens, 2 vectors", format, resp.Usage, len(resp.Data), want)
		}
		for _, d := range resp.Data {
			var norm float64
			for _, x := range d.Embedding {
				norm += x * x
			}
			if len(d.Embedding) != 1536 || math.Abs(norm-1) > 1e-3 {
				t.Fatalf("%s: %d dimensions, norm %v", format, len(d.Embedding), norm)
			}
			vectors[i] = append(vectors[i], d.Embedding)
		}
	}
	for j := range 2 {
		for k := range vectors[0][j] {
			if math.Abs(vectors[0][j][k]-vectors[1][j][k]) > 1e-6 {
				t.Fatalf("float and base64 vectors differ at %d/%d", j, k)
			}
		}
	}
	resp, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: model, Dimensions: openai.Int(8),
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfTokenArrays: [][]int64{{1, 2, 3}, {4, 5}}}})
	if err != nil || resp.Usage.PromptTokens != 5 || len(resp.Data[0].Embedding) != 8 {
		t.Fatalf("token arrays: %+v %v", resp, err)
	}
	// the minute's 60 tokens are spent: 429 with retry headers
	_, err = c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: model, Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String(strings.Repeat("word ", 50))}})
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusTooManyRequests || ae.Response.Header.Get("retry-after-ms") == "" {
		t.Fatalf("past the TPM: %v", err)
	}
	for _, body := range []string{`{"model":"` + model + `","input":""}`, `{"model":"` + model + `","input":[]}`, `{"model":"` + model + `","input":"x","encoding_format":"int8"}`} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/embeddings", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer sk-e")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", body, res.StatusCode)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/openai/deployments/"+model+"/embeddings?api-version=2024-10-21", strings.NewReader(`{"input":[1]}`))
	req.Header.Set("api-key", "sk-e")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("azure embeddings: %d", res.StatusCode)
	}
}
