package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
)

// A prompt's result, once kept, serves its twins; the claim on the
// prompt stands until it expires, so a twin that read no result just
// before the save waits for it rather than taking the claim and paying.
func TestReusableAfterSaveClaimStands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := store.New(redistest.Shared(t).Client(t), jobs.TierFree)
	key := fmt.Sprintf("m:%d", time.Now().UnixNano())
	if mine, err := st.ClaimReuse(ctx, key, "job-1"); err != nil || !mine {
		t.Fatalf("first claim: %v (%v), want job-1's", mine, err)
	}
	if _, ok, err := st.Reusable(ctx, key); err != nil || ok {
		t.Fatalf("before the save: reusable %v (%v), want none", ok, err)
	}
	if err := st.SaveReusable(ctx, key, store.Result{Kind: jobs.KindSummary, Text: "Adds b."}); err != nil {
		t.Fatal(err)
	}
	if r, ok, err := st.Reusable(ctx, key); err != nil || !ok || r.Text != "Adds b." {
		t.Fatalf("after the save: %+v %v (%v), want the kept summary", r, ok, err)
	}
	if mine, err := st.ClaimReuse(ctx, key, "job-2"); err != nil || mine {
		t.Errorf("a twin's claim after the save: %v (%v), want job-1's claim to stand", mine, err)
	}
}
