package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
)

// PostedEach reads several posted marks at once: 0 where none.
func TestPostedEach(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := store.New(redistest.Shared(t).Client(t), jobs.TierFree)
	pr := jobs.PR{Installation: 1, Owner: "o", Repo: "posted-each", Number: int(time.Now().UnixNano() % 1_000_000)}
	if err := st.SetPosted(ctx, pr, "b", 7); err != nil {
		t.Fatal(err)
	}
	got, err := st.PostedEach(ctx, pr, "a", "b")
	if err != nil || len(got) != 2 || got[0] != 0 || got[1] != 7 {
		t.Fatalf("PostedEach = %v (%v), want [0 7]", got, err)
	}
}

// PostedDraft reads a reply's posted id and its kept draft at once, each
// apart from the other's and from other replies'.
func TestPostedDraft(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := store.New(redistest.Shared(t).Client(t), jobs.TierFree)
	pr := jobs.PR{Installation: 1, Owner: "o", Repo: "posted-draft", Number: 1}
	check := func(step, what string, wantID int64, wantDraft string) {
		t.Helper()
		id, draft, err := st.PostedDraft(ctx, pr, what)
		if err != nil || id != wantID || draft != wantDraft {
			t.Fatalf("%s: %s = %d %q (%v), want %d %q", step, what, id, draft, err, wantID, wantDraft)
		}
	}
	check("nothing yet", "reply:1", 0, "")
	if err := st.SetDraft(ctx, pr, "reply:1", "Because."); err != nil {
		t.Fatal(err)
	}
	check("drafted", "reply:1", 0, "Because.")
	check("another reply", "reply:2", 0, "")
	if err := st.SetPosted(ctx, pr, "reply:1", 91); err != nil {
		t.Fatal(err)
	}
	check("posted", "reply:1", 91, "Because.")
}

// SetPostedEach records several marks in one write, each under its own
// name, the hash kept RunTTL; names and ids must pair up.
func TestSetPostedEach(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Shared(t).Client(t)
	st := store.New(rdb, jobs.TierFree)
	pr := jobs.PR{Installation: 1, Owner: "o", Repo: "set-posted-each", Number: 1}
	if err := st.SetPostedEach(ctx, pr, []string{"summary:1", "summary:1:sum"}, []int64{71, 1234}); err != nil {
		t.Fatal(err)
	}
	got, err := st.PostedEach(ctx, pr, "summary:1", "summary:1:sum")
	if err != nil || len(got) != 2 || got[0] != 71 || got[1] != 1234 {
		t.Fatalf("PostedEach = %v (%v), want [71 1234]", got, err)
	}
	if ttl := rdb.PTTL(ctx, "{prq:pr:"+pr.Key()+"}:posted").Val(); ttl <= 0 {
		t.Fatalf("the posted hash has no TTL (%v)", ttl)
	}
	if err := st.SetPostedEach(ctx, pr, []string{"a", "b"}, []int64{1}); err == nil {
		t.Fatal("names and ids that do not pair up were recorded")
	}
}

// AddPostedFindings records each finding once (the review it was first
// posted in stays), the posted hash kept RunTTL.
func TestAddPostedFindings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redistest.Shared(t).Client(t)
	st := store.New(rdb, jobs.TierFree)
	pr := jobs.PR{Installation: 1, Owner: "o", Repo: "posted-findings", Number: 1}
	first := map[string]store.PostedFinding{"k1": {What: "review:h1", Path: "a.go"}, "k2": {What: "review:h1", Path: "b.go"}}
	if err := st.AddPostedFindings(ctx, pr, first); err != nil {
		t.Fatal(err)
	}
	if err := st.AddPostedFindings(ctx, pr, map[string]store.PostedFinding{"k2": {What: "review:h2", Path: "b.go"}, "k3": {What: "review:h2", Path: "c.go"}}); err != nil {
		t.Fatal(err)
	}
	got, err := st.PostedFindings(ctx, pr)
	if err != nil || len(got) != 3 || got["k2"].What != "review:h1" || got["k3"].What != "review:h2" {
		t.Fatalf("PostedFindings = %+v (%v), want k1, k2 (of h1) and k3", got, err)
	}
	if ttl := rdb.PTTL(ctx, "{prq:pr:"+pr.Key()+"}:posted").Val(); ttl <= 0 {
		t.Fatalf("the posted hash has no TTL (%v)", ttl)
	}
}
