package llm_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"time"

	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/llm"
)

// A batch's life against the fake provider on a stepped clock: submit
// (a task id made a custom_id; OpenAI counts nothing while it validates),
// poll until it is over, read the results.
func ExampleBatcher() {
	clk := newClock()
	fake := fakeopenai.New(fakeopenai.Config{Models: []fakeopenai.Model{{Name: "gpt-4o-mini", RPM: 10, TPM: 10000, BatchLatency: time.Minute}},
		Now: clk.Now})
	srv := httptest.NewServer(fake)
	defer srv.Close()
	ctx := context.Background()
	var b llm.Batcher = llm.New("sk-test", srv.URL+"/v1", 5*time.Second, nil)
	id := llm.CustomID("review-1.acme.web.7-0")
	batch, err := b.SubmitBatch(ctx, []llm.BatchItem{{ID: id, Request: llm.Request{Model: "gpt-4o-mini",
		System: "Summarize the change.", User: "File: a.go\n   1 +package a", MaxOutput: 100}}})
	if err != nil {
		fmt.Println(err)
		return
	}
	for !batch.State.Over() {
		fmt.Println(batch.State, batch.Done, "of", batch.Total)
		clk.Step(30 * time.Second)
		if batch, err = b.Batch(ctx, batch.ID); err != nil {
			fmt.Println(err)
			return
		}
	}
	fmt.Println(batch.State, batch.Done, "of", batch.Total)
	results, err := b.BatchResults(ctx, batch.ID)
	for _, r := range results {
		fmt.Println(r.ID == id, r.Err, r.Response.FinishReason, r.Response.PromptTokens > 0)
	}
	fmt.Println(err)
	// Output:
	// in_progress 0 of 0
	// in_progress 0 of 1
	// ended 1 of 1
	// true <nil> stop true
	// <nil>
}
