package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
)

func TestLearningsAddedOnceBoundedAndForgotten(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Shared(t).Client(t)
	st := store.New(rdb, jobs.TierFree)
	repo := store.LearningScope{Installation: 7, Owner: "o", Repo: "learn-r"}
	other := store.LearningScope{Installation: 7, Owner: "o", Repo: "learn-other"}
	org := store.LearningScope{Installation: 7}
	for i := int64(1); i <= store.MaxLearnings; i++ {
		n, err := st.AddLearning(ctx, repo, store.Learning{ID: i, Text: "rule " + strings.Repeat("x", int(i)), Author: "maint"})
		if err != nil || n != int(i) {
			t.Fatalf("add %d: %d %v", i, n, err)
		}
	}
	// a retried add of the same comment adds nothing and tells its place
	if n, err := st.AddLearning(ctx, repo, store.Learning{ID: 3, Text: "again", Author: "maint"}); err != nil || n != 3 {
		t.Fatalf("retried add: %d %v", n, err)
	}
	if _, err := st.AddLearning(ctx, repo, store.Learning{ID: 999, Text: "one too many", Author: "maint"}); !errors.Is(err, store.ErrLearningsFull) {
		t.Fatalf("over the bound: %v", err)
	}
	if _, err := st.AddLearning(ctx, repo, store.Learning{ID: 1000, Text: strings.Repeat("é", store.MaxLearningChars+1)}); err == nil {
		t.Fatal("an over-long learning was taken")
	}
	if _, err := st.AddLearning(ctx, org, store.Learning{ID: 5000, Text: "org rule", Author: "owner"}); err != nil {
		t.Fatal(err)
	}
	got, err := st.Learnings(ctx, repo)
	if err != nil || len(got) != store.MaxLearnings || got[2].Text != "rule xxx" {
		t.Fatalf("repo learnings: %d %v", len(got), err)
	}
	if o, _ := st.Learnings(ctx, other); len(o) != 0 {
		t.Fatalf("another repository has %d learnings", len(o))
	}
	if o, _ := st.Learnings(ctx, org); len(o) != 1 || o[0].Text != "org rule" {
		t.Fatalf("org learnings: %+v", o)
	}
	if ok, err := st.RemoveLearning(ctx, repo, 2); err != nil || !ok {
		t.Fatalf("remove: %v %v", ok, err)
	}
	if ok, _ := st.RemoveLearning(ctx, repo, 2); ok {
		t.Fatal("removed twice")
	}
	got, _ = st.Learnings(ctx, repo)
	if len(got) != store.MaxLearnings-1 || got[1].ID != 3 {
		t.Fatalf("after remove: %d, second %d", len(got), got[1].ID)
	}
	for _, k := range []string{"prq:learnings:7:o/learn-r", "prq:learnings:7"} {
		if ttl := rdb.PTTL(ctx, k).Val(); ttl <= 0 {
			t.Fatalf("%s: ttl %v", k, ttl)
		}
	}
}
