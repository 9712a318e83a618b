package webhook_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/prq-dev/prq/fake/traffic"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
	"github.com/prq-dev/prq/webhook"
)

// TestRepoSettings: the webhook follows what the planner recorded of a
// repository's .prq.yaml: chat off drops comments before anything is
// enqueued; drafts are planned where drafts are reviewed or nothing is
// known yet, ignored where they are not; converting to a draft cancels
// only where drafts are not reviewed.
func TestRepoSettings(t *testing.T) {
	st := store.New(redistest.Shared(t).Client(t), jobs.TierFree)
	rec := &recorder{}
	h, err := webhook.New(webhook.Config{Secret: secret, AppSlug: "prq-bot", Repos: st}, rec, rec, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	n := 0
	event := func(repo, action string, draft bool) string {
		n++
		w := send(h, "pull_request", fmt.Sprint("d-", n), traffic.PullRequestEvent(action, traffic.PR{Installation: 7, Owner: "acme", Repo: repo, Number: 1, Title: "t", Head: "h", Base: "b", Draft: draft}), nil)
		return w.Body.String()
	}
	set := func(repo string, rs jobs.RepoSettings) {
		if err := st.SetRepoSettings(ctx, jobs.PR{Installation: 7, Owner: "acme", Repo: repo, Number: 1}, rs); err != nil {
			t.Fatal(err)
		}
	}
	set("nodrafts", jobs.RepoSettings{})
	set("drafts", jobs.RepoSettings{Drafts: true})
	set("quiet", jobs.RepoSettings{ChatOff: true})
	for _, tc := range []struct {
		repo, action string
		draft        bool
		want         string
		plans        int
		cancels      int
	}{
		{"unknown", "opened", true, "enqueued", 1, 0},
		{"nodrafts", "opened", true, "ignored", 0, 0},
		{"drafts", "opened", true, "enqueued", 1, 0},
		{"drafts", "converted_to_draft", true, "ignored", 0, 0},
		{"nodrafts", "converted_to_draft", true, "cancelled", 0, 1},
		{"nodrafts", "opened", false, "enqueued", 1, 0},
	} {
		plans, cancels := len(rec.plans), len(rec.cancels)
		got := event(tc.repo, tc.action, tc.draft)
		if !contains(got, tc.want) || len(rec.plans)-plans != tc.plans || len(rec.cancels)-cancels != tc.cancels {
			t.Errorf("%s %s (draft %v): %s, %d plans, %d cancels; want %q, %d, %d", tc.repo, tc.action, tc.draft, got, len(rec.plans)-plans, len(rec.cancels)-cancels, tc.want, tc.plans, tc.cancels)
		}
	}
	for repo, want := range map[string]string{"quiet": "chat off by .prq.yaml", "drafts": "enqueued"} {
		c := traffic.Comment{Installation: 7, Owner: "acme", Repo: repo, Number: 1, ID: int64(len(repo)), Author: "dev", Body: "@prq-bot why?", PRAuthor: "dev"}
		w := send(h, "issue_comment", "c-"+repo, traffic.IssueCommentEvent(c), nil)
		if !contains(w.Body.String(), want) {
			t.Errorf("chat in %s: %s, want %q", repo, w.Body.String(), want)
		}
	}
	if len(rec.chats) != 1 {
		t.Errorf("%d chats enqueued, want 1 (chat off drops the other)", len(rec.chats))
	}
}
