package webhook_test

import (
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prq-dev/prq/fake/traffic"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/store"
	"github.com/prq-dev/prq/webhook"
)

// TestChatLimitOneRefusalPerWindow: past the per-user limit, the first
// comment becomes one polite refusal job and later ones are dropped
// before anything is enqueued; so is the PR's limit across users.
func TestChatLimitOneRefusalPerWindow(t *testing.T) {
	now := time.Unix(1_900_000_000, 0)
	lim, err := store.NewChatLimiter(redistest.Shared(t).Client(t), store.ChatLimits{PerUser: 2, PerPR: 4, NowFunc: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	h, err := webhook.New(webhook.Config{Secret: secret, AppSlug: "prq-bot", ChatLimiter: lim}, rec, rec, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	inst := time.Now().UnixNano() % 1e9
	comment := func(id int64, author string) string {
		c := traffic.Comment{Installation: inst, Owner: "acme", Repo: "api", Number: 3, ID: id, Author: author, Body: "@prq-bot again?", PRAuthor: "dev"}
		w := send(h, "issue_comment", fmt.Sprint("d-", id), traffic.IssueCommentEvent(c), nil)
		return fmt.Sprintf("%d %s", w.Code, w.Body.String())
	}
	first := now
	var got []string
	for id := int64(1); id <= 5; id++ {
		got = append(got, comment(id, "spammer"))
		now = now.Add(time.Minute)
	}
	t.Logf("five comments by one user (limit 2 an hour): %q", got)
	for i, want := range []string{"enqueued", "enqueued", "refusal enqueued", "dropped", "dropped"} {
		if !contains(got[i], want) {
			t.Fatalf("comment %d: %s, want %q", i+1, got[i], want)
		}
	}
	if len(rec.chats) != 3 || rec.chats[0].Refusal || rec.chats[1].Refusal || !rec.chats[2].Refusal {
		t.Fatalf("enqueued %+v, want two answers and one refusal", rec.chats)
	}
	if at := time.UnixMilli(rec.chats[2].RetryAt); !at.Equal(first.Add(time.Hour)) {
		t.Fatalf("refusal says retry at %s, want %s (an hour after the first comment)", at, first.Add(time.Hour))
	}
	// the PR's limit (4) across users: two more fit, then one refusal
	for id, want := range map[int64]string{6: "enqueued", 7: "enqueued"} {
		if r := comment(id, fmt.Sprint("user", id)); !contains(r, want) {
			t.Fatalf("comment %d: %s, want %q", id, r, want)
		}
	}
	if r := comment(8, "user8"); !contains(r, "refusal enqueued") {
		t.Fatalf("the PR's fifth comment: %s, want a refusal", r)
	}
	if r := comment(9, "user9"); !contains(r, "dropped") {
		t.Fatalf("the PR's sixth comment: %s, want it dropped", r)
	}
}
