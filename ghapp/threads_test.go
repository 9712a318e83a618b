package ghapp_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prq-dev/prq/fake/corpus"
	"github.com/prq-dev/prq/fake/fakegithub"
	"github.com/prq-dev/prq/ghapp"
)

// TestReviewThreads: a pull request's threads through GitHub's GraphQL
// API, every page of them, each with its comments and who wrote them; a
// thread resolved stays resolved; a repository the installation cannot
// see is ErrNotFound.
func TestReviewThreads(t *testing.T) {
	t.Parallel()
	f := setup(t, fakegithub.Config{}, []corpus.File{file("main.go", patch)})
	ctx := context.Background()
	if _, err := f.client.CreateReview(ctx, "acme", "api", 7, strings.Repeat("a", 40), "review", []ghapp.ReviewComment{
		{Path: "main.go", Line: 2, Side: "RIGHT", Body: "ours, alone"},
		{Path: "main.go", Line: 3, Side: "RIGHT", Body: "ours, answered"},
	}); err != nil {
		t.Fatal(err)
	}
	rcs := f.fake.ReviewComments("acme", "api", 7)
	f.fake.AddReply("acme", "api", 7, rcs[1].ID, "We want it this way.", "dev")
	for i := 0; i < 55; i++ { // past one page of 50
		f.fake.AddReviewComment("acme", "api", 7, "main.go", 2, "a person's note", "dev")
	}
	ts, err := f.client.ReviewThreads(ctx, "acme", "api", 7)
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 57 {
		t.Fatalf("%d threads, want 57", len(ts))
	}
	a, b := ts[0], ts[1]
	if len(a.Comments) != 1 || !a.Comments[0].Ours || a.Comments[0].ID != rcs[0].ID || a.Comments[0].Body != "ours, alone" || a.Resolved {
		t.Fatalf("thread 1: %+v", a)
	}
	if len(b.Comments) != 2 || !b.Comments[0].Ours || b.Comments[1].Ours {
		t.Fatalf("thread 2: %+v, want ours then a person's", b)
	}
	if ts[2].Comments[0].Ours {
		t.Fatalf("a person's comment taken for ours: %+v", ts[2])
	}
	if err := f.client.ResolveThread(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if !f.fake.Resolved(rcs[0].ID) || f.fake.Resolved(rcs[1].ID) {
		t.Fatal("the wrong thread was resolved")
	}
	if ts, err = f.client.ReviewThreads(ctx, "acme", "api", 7); err != nil || !ts[0].Resolved || ts[1].Resolved {
		t.Fatalf("after resolving: %v", err)
	}
	if err := f.client.ResolveThread(ctx, "PRRT_nonsense"); !errors.Is(err, ghapp.ErrNotFound) {
		t.Fatalf("resolving an unknown thread: %v, want ErrNotFound", err)
	}
	if _, err := f.client.ReviewThreads(ctx, "acme", "other", 7); !errors.Is(err, ghapp.ErrNotFound) {
		t.Fatalf("another repository: %v, want ErrNotFound", err)
	}
}
