package store_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
)

// TestVotesCountEachCommentsLatest: the totals by model and kind are the
// sum of each comment's latest votes: a comment read again (a retry, the
// next head's finalize) adds nothing, a vote taken back is taken off, and
// the tracked findings of a pull request keep their first record.
func TestVotesCountEachCommentsLatest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Shared(t).Client(t)
	st := store.New(rdb, jobs.TierFree)
	pr := jobs.PR{Installation: 9, Owner: "o", Repo: "votes", Number: 1}
	posted := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC).Unix()
	sug := store.TrackedFinding{Model: "gpt-4o", Kind: store.FindingSuggestion, Posted: posted}
	prose := store.TrackedFinding{Model: "gpt-4o", Kind: store.FindingProse, Posted: posted}
	if err := st.TrackFindings(ctx, pr, map[string]store.TrackedFinding{"a": sug, "b": prose}); err != nil {
		t.Fatal(err)
	}
	if err := st.TrackFindings(ctx, pr, map[string]store.TrackedFinding{"a": {Model: "other", Kind: store.FindingProse, Posted: posted}}); err != nil {
		t.Fatal(err)
	}
	tracked, err := st.TrackedFindings(ctx, pr)
	if err != nil || len(tracked) != 2 || tracked["a"] != sug || tracked["b"] != prose {
		t.Fatalf("tracked %+v, %v", tracked, err)
	}
	for _, step := range []struct {
		comment  int64
		f        store.TrackedFinding
		up, down int
	}{
		{1, sug, 2, 1},
		{1, sug, 2, 1}, // read again: nothing twice
		{2, sug, 1, 0},
		{3, prose, 0, 2},
		{3, prose, 0, 1}, // one taken back
	} {
		if err := st.SetVotes(ctx, pr.Installation, step.comment, step.f, step.up, step.down); err != nil {
			t.Fatal(err)
		}
	}
	got, err := store.ReadAcceptance(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	want := []store.Acceptance{{Model: "gpt-4o", Kind: store.FindingProse, Up: 0, Down: 1}, {Model: "gpt-4o", Kind: store.FindingSuggestion, Up: 3, Down: 1}}
	if !slices.Equal(got, want) {
		t.Fatalf("acceptance %+v, want %+v", got, want)
	}
	if r := got[1].Rate(); r != 0.75 {
		t.Fatalf("suggestion rate %v, want 0.75", r)
	}
	if r := (store.Acceptance{}).Rate(); r != 0 {
		t.Fatalf("rate without votes %v, want 0", r)
	}
}
