package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
)

func TestChatLimiterOneRefusalPerWindow(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_900_000_000, 0)
	l, err := store.NewChatLimiter(redistest.Shared(t).Client(t), store.ChatLimits{PerUser: 3, PerPR: 5, NowFunc: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pr := jobs.PR{Installation: time.Now().UnixNano() % 1e9, Owner: "o", Repo: "r", Number: 1}
	type verdict struct {
		allowed, refuse bool
		retry           time.Time
	}
	ask := func(user string, id int64) verdict {
		t.Helper()
		a, r, at, err := l.AllowChat(ctx, pr, user, id)
		if err != nil {
			t.Fatal(err)
		}
		return verdict{a, r, at}
	}
	first := now
	for id := int64(1); id <= 3; id++ {
		if v := ask("Spammer", id); !v.allowed {
			t.Fatalf("comment %d within the limit refused: %+v", id, v)
		}
		now = now.Add(time.Minute)
	}
	if v := ask("spammer", 2); !v.allowed {
		t.Fatal("a redelivered comment was refused (counted twice)")
	}
	want := verdict{false, true, first.Add(time.Hour)}
	if got := ask("spammer", 4); got != want {
		t.Fatalf("first comment over the limit: got %+v, want %+v (a polite refusal)", got, want)
	}
	if got := ask("spammer", 5); got.allowed || got.refuse {
		t.Fatalf("second comment over the limit: %+v, want dropped silently", got)
	}
	if got := ask("spammer", 4); got != want {
		t.Fatalf("the refused comment delivered again: got %+v, want the refusal again", got)
	}
	// the PR's limit (5) counts everyone
	for id := int64(6); id <= 7; id++ {
		if v := ask("other", id); !v.allowed {
			t.Fatalf("another user's comment %d refused: %+v", id, v)
		}
	}
	if got := ask("third", 8); got.allowed || !got.refuse {
		t.Fatalf("the PR's sixth comment: %+v, want a polite refusal", got)
	}
	if got := ask("fourth", 9); got.allowed || got.refuse {
		t.Fatalf("the PR's seventh comment: %+v, want dropped silently", got)
	}
	// an hour after the first, one slot frees: one more, then one more refusal
	now = first.Add(time.Hour)
	if v := ask("spammer", 10); !v.allowed {
		t.Fatalf("after the window slid: %+v", v)
	}
	if v := ask("spammer", 11); v.allowed || !v.refuse {
		t.Fatalf("over again in a new stretch: %+v, want one more polite refusal", v)
	}
}

func TestChatLimiterRefusesBadLimits(t *testing.T) {
	t.Parallel()
	rdb := redistest.Shared(t).Client(t)
	for name, c := range map[string]store.ChatLimits{"user": {PerUser: -1}, "pr": {PerPR: -1}, "window": {Window: -time.Second}} {
		if _, err := store.NewChatLimiter(rdb, c); err == nil {
			t.Errorf("%s: accepted %+v", name, c)
		}
	}
}
