package webhook_test

import (
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/prq-dev/prq/fake/traffic"
	"github.com/prq-dev/prq/webhook"
)

// TestChatOnlyFromAllowedAuthors: on a public repository anyone can
// comment; only the configured associations and the PR's author may
// spend the installation's tokens on chat.
func TestChatOnlyFromAllowedAuthors(t *testing.T) {
	base := traffic.Comment{Installation: 7, Owner: "acme", Repo: "api", Number: 3, ID: 11, Author: "stranger", Body: "@prq-bot why?", PRAuthor: "dev"}
	for _, tc := range []struct {
		name        string
		association string
		author      string
		allowed     []string // nil: the default
		chats       int
		result      string
	}{
		{"member", "MEMBER", "stranger", nil, 1, "enqueued"},
		{"owner", "OWNER", "stranger", nil, 1, "enqueued"},
		{"collaborator", "COLLABORATOR", "stranger", nil, 1, "enqueued"},
		{"drive-by commenter", "NONE", "stranger", nil, 0, "not allowed"},
		{"first-time contributor", "FIRST_TIME_CONTRIBUTOR", "stranger", nil, 0, "not allowed"},
		{"contributor by default", "CONTRIBUTOR", "stranger", nil, 0, "not allowed"},
		{"contributor when configured", "CONTRIBUTOR", "stranger", []string{"contributor"}, 1, "enqueued"},
		{"the PR's author", "NONE", "dev", nil, 1, "enqueued"},
	} {
		for _, kind := range []string{"issue_comment", "pull_request_review_comment"} {
			t.Run(tc.name+"/"+kind, func(t *testing.T) {
				rec := &recorder{}
				h, err := webhook.New(webhook.Config{Secret: secret, AppSlug: "prq-bot", ChatAssociations: tc.allowed}, rec, rec, slog.New(slog.NewTextHandler(io.Discard, nil)))
				if err != nil {
					t.Fatal(err)
				}
				c := base
				c.Association, c.Author = tc.association, tc.author
				body := traffic.IssueCommentEvent(c)
				if kind != "issue_comment" {
					body = traffic.ReviewCommentEvent(c)
				}
				w := send(h, kind, "d-"+strings.ReplaceAll(tc.name, " ", "-"), body, nil)
				if len(rec.chats) != tc.chats || !contains(w.Body.String(), tc.result) {
					t.Fatalf("%d %s: %d chats, want %d (%s)", w.Code, w.Body, len(rec.chats), tc.chats, tc.result)
				}
			})
		}
	}
	if _, err := webhook.New(webhook.Config{Secret: secret, ChatAssociations: []string{"EVERYONE"}}, &recorder{}, &recorder{}, nil); err == nil {
		t.Error("an unknown association was accepted")
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
