package gateway_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/openai/openai-go/v3"

	"github.com/prq-dev/prq/internal/gateway"
)

// TestEmbeddings: the official openai SDK's embeddings through the
// gateway (float, base64 as its other SDKs ask, token arrays): the
// input is counted exactly, so the key's quota holds the provider's
// usage, no more, to the quota's last token; a key whose quota cannot pay for the input is refused
// with 403 and nothing sent; bad input is a 400 before anything.
func TestEmbeddings(t *testing.T) {
	t.Parallel()
	r := newRig(t, 0)
	secret, k := r.key(t, gateway.Spec{Name: "retriever", Tier: "paid", QuotaTokens: 200})
	c := r.sdk(secret)
	ctx := context.Background()
	var usage int64
	for _, p := range []openai.EmbeddingNewParams{
		{Model: r.model, Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("What does the retry do?")}},
		{Model: r.model, EncodingFormat: openai.EmbeddingNewParamsEncodingFormatBase64, Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"one chunk", "another chunk of the design"}}},
		{Model: r.model, Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfTokenArrays: [][]int64{{10, 20, 30}, {40}}}},
	} {
		resp, err := c.Embeddings.New(ctx, p)
		if err != nil {
			var ae *openai.Error
			if errors.As(err, &ae) {
				t.Fatalf("%v: %s", err, ae.RawJSON())
			}
			t.Fatal(err)
		}
		if len(resp.Data) == 0 || len(resp.Data[0].Embedding) == 0 || resp.Usage.PromptTokens <= 0 {
			t.Fatalf("reply %+v", resp)
		}
		usage += resp.Usage.PromptTokens
		if got := r.used(t, k); got != usage {
			t.Fatalf("quota used %d, the provider's usage %d", got, usage)
		}
	}
	calls := r.fake.Stats()[r.model].Requests
	// more input than the key has left: 403, nothing sent
	_, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: r.model, Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfTokenArrays: [][]int64{make([]int64, 300)}}})
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusForbidden {
		t.Fatalf("past the quota: %v, want 403", err)
	}
	for _, body := range []string{`{"model":"` + r.model + `","input":""}`, `{"model":"` + r.model + `"}`, `{"model":"` + r.model + `","input":[[-1]]}`, `{"model":"` + r.model + `","input":"x","encoding_format":"int8"}`} {
		res, err := r.postTo(ctx, "/v1/embeddings", secret, body)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", body, res.StatusCode)
		}
	}
	if n := r.fake.Stats()[r.model].Requests; n != calls {
		t.Fatalf("%d upstream calls for refused requests", n-calls)
	}
	// an embeddings request asks for no output, so it may spend the
	// quota to the last token: no minimum output is kept spare
	last := make([]int64, 200-usage)
	for i := range last {
		last[i] = 7
	}
	if _, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: r.model, Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfTokenArrays: [][]int64{last}}}); err != nil {
		t.Fatalf("the last %d tokens of the quota: %v", len(last), err)
	}
	if got := r.used(t, k); got != 200 {
		t.Fatalf("quota used %d after spending the rest, want 200", got)
	}
	// spent to the last token: the next is refused before it is read
	if _, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: r.model, Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("x")}}); !errors.As(err, &ae) || ae.StatusCode != http.StatusForbidden {
		t.Fatalf("a spent quota: %v, want 403", err)
	}
}
