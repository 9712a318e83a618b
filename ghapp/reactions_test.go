package ghapp_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/prq-dev/prq/fake/corpus"
	"github.com/prq-dev/prq/fake/fakegithub"
	"github.com/prq-dev/prq/ghapp"
)

// TestCommentVotes: the 👍 and 👎 on the App's diff comments, each
// person once, the App's own reactions and other contents left out,
// every page, a person who put both counted for neither; a person's
// diff comment is not the App's.
func TestCommentVotes(t *testing.T) {
	t.Parallel()
	f := setup(t, fakegithub.Config{}, []corpus.File{file("main.go", patch)})
	ctx := context.Background()
	if _, err := f.client.CreateReview(ctx, "acme", "api", 7, strings.Repeat("a", 40), "review", []ghapp.ReviewComment{
		{Path: "main.go", Line: 2, Side: "RIGHT", Body: "finding one"},
	}); err != nil {
		t.Fatal(err)
	}
	f.fake.AddReviewComment("acme", "api", 7, "main.go", 2, "a person's note", "dev")
	own, err := f.client.OwnReviewComments(ctx, "acme", "api", 7)
	if err != nil || len(own) != 1 || own[0].Body != "finding one" {
		t.Fatalf("own comments: %+v, %v; want the finding alone", own, err)
	}
	id := own[0].ID
	for i := range 120 { // past a page of 100
		f.fake.AddReaction(id, "dev"+strings.Repeat("x", i%2)+string(rune('a'+i%26))+string(rune('a'+i/26)), "+1")
	}
	f.fake.AddReaction(id, "carol", "-1")
	f.fake.AddReaction(id, "carol", "heart")
	f.fake.AddReaction(id, "dave", "+1") // both: no vote
	f.fake.AddReaction(id, "dave", "-1")
	f.fake.AddReaction(id, f.fake.Bot(), "+1")
	f.fake.AddReaction(id, f.fake.Bot(), "-1")
	v, err := f.client.CommentVotes(ctx, "acme", "api", id)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Up) != 120 || !slices.Equal(v.Down, []string{"carol"}) {
		t.Fatalf("%d up, down %v; want 120 and carol", len(v.Up), v.Down)
	}
	f.fake.RemoveReaction(id, "carol", "-1")
	if v, err = f.client.CommentVotes(ctx, "acme", "api", id); err != nil || len(v.Down) != 0 {
		t.Fatalf("after carol took hers back: %v, %v", v.Down, err)
	}
	if _, err := f.client.CommentVotes(ctx, "acme", "api", 999999); !errors.Is(err, ghapp.ErrNotFound) {
		t.Fatalf("a comment that is not there: %v, want ErrNotFound", err)
	}
}
