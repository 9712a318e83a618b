package webhook_test

import (
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

// TestCommands: a line that is the bot's mention and a command is a
// command, once per comment; anything else that mentions the bot is
// chat; a command from someone who may not chat is enqueued refused (to
// be acknowledged), not dropped, and not run.
func TestCommands(t *testing.T) {
	rec := &recorder{}
	h, err := webhook.New(webhook.Config{Secret: secret, AppSlug: "prq-bot"}, rec, rec, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	id := int64(0)
	issue := func(body, author, assoc string) string {
		id++
		c := traffic.Comment{Installation: 5, Owner: "acme", Repo: "api", Number: 2, ID: id, Author: author, Body: body, PRAuthor: "dev", Association: assoc}
		return send(h, "issue_comment", fmt.Sprint("i-", id), traffic.IssueCommentEvent(c), nil).Body.String()
	}
	for body, want := range map[string]string{
		"@prq-bot review":                       jobs.CommandReview,
		"@PRQ-bot   Full   Review!":             jobs.CommandFullReview,
		"Looks odd.\n@prq-bot pause\nthanks":    jobs.CommandPause,
		"@prq-bot resume.":                      jobs.CommandResume,
		"@prq-bot ignore":                       jobs.CommandIgnore,
		"@prq-bot status":                       jobs.CommandStatus,
		"@prq-bot summary":                      jobs.CommandSummary,
		"@prq-bot config":                       jobs.CommandConfig,
		"@prq-bot help":                         jobs.CommandHelp,
		"@prq-bot review please":                "",
		"@prq-bot why is this safe?":            "",
		"please @prq-bot review":                "",
		"@prq-botreview":                        "-",
		"@prq-bot-other review":                 "-",
		"@prq-bot\treview":                      jobs.CommandReview,
		"@prq-bot review\n@prq-bot full review": jobs.CommandReview,
	} {
		commands, chats := len(rec.commands), len(rec.chats)
		got := issue(body, "dev", "NONE")
		switch want {
		case "":
			if len(rec.chats) != chats+1 || len(rec.commands) != commands {
				t.Errorf("%q: %s; want chat", body, got)
			}
		case "-":
			if len(rec.chats) != chats || len(rec.commands) != commands {
				t.Errorf("%q: %s; want nothing (not a mention of the bot)", body, got)
			}
		default:
			if len(rec.commands) != commands+1 || rec.commands[commands].Name != want || rec.commands[commands].Refused != "" {
				t.Errorf("%q: %s, %+v; want command %q", body, got, rec.commands[commands:], want)
			}
		}
	}
	// someone who may not chat: refused, acknowledged; their chat is not allowed
	n := len(rec.commands)
	if got := issue("@prq-bot review", "stranger", "NONE"); !contains(got, "command refused") || len(rec.commands) != n+1 || rec.commands[n].Refused == "" {
		t.Errorf("a stranger's command: %s %+v", got, rec.commands[n:])
	}
	if got := issue("@prq-bot why?", "stranger", "NONE"); !contains(got, "not allowed") {
		t.Errorf("a stranger's chat: %s", got)
	}
	// a redelivered comment: one command
	c := traffic.Comment{Installation: 5, Owner: "acme", Repo: "api", Number: 2, ID: 777, Author: "dev", Body: "@prq-bot pause", PRAuthor: "dev"}
	for k := range 3 {
		send(h, "issue_comment", fmt.Sprint("again-", k), traffic.IssueCommentEvent(c), nil)
	}
	count := 0
	for _, k := range rec.commands {
		if k.CommentID == 777 {
			count++
		}
	}
	if count != 1 {
		t.Errorf("a comment delivered three times: %d commands", count)
	}
	// in a review thread
	rc := traffic.Comment{Installation: 5, Owner: "acme", Repo: "api", Number: 2, ID: 888, Author: "dev", Body: "@prq-bot full review", PRAuthor: "dev", Path: "a.go", Line: 1}
	send(h, "pull_request_review_comment", "rc-1", traffic.ReviewCommentEvent(rc), nil)
	last := rec.commands[len(rec.commands)-1]
	if last.CommentID != 888 || !last.Review || last.Name != jobs.CommandFullReview {
		t.Errorf("a review comment's command: %+v", last)
	}
}

// TestStrangerCommandsLimited: a stranger's refused commands count
// against the chat limits like anyone's: past them one more is
// acknowledged and the rest are dropped before anything is enqueued.
func TestStrangerCommandsLimited(t *testing.T) {
	lim, err := store.NewChatLimiter(redistest.Shared(t).Client(t), store.ChatLimits{PerUser: 2, PerPR: 100})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	h, err := webhook.New(webhook.Config{Secret: secret, AppSlug: "prq-bot", ChatLimiter: lim}, rec, rec, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	for id := int64(1); id <= 6; id++ {
		c := traffic.Comment{Installation: 9, Owner: "acme", Repo: "limits", Number: 1, ID: id, Author: "stranger", Body: "@prq-bot full review", PRAuthor: "dev", Association: "NONE"}
		send(h, "issue_comment", fmt.Sprint("s-", id), traffic.IssueCommentEvent(c), nil)
	}
	if len(rec.commands) != 3 {
		t.Fatalf("%d commands enqueued for six, want 3 (two within the limit, one refusal past it)", len(rec.commands))
	}
	for _, c := range rec.commands {
		if c.Refused == "" {
			t.Errorf("a stranger's command was not refused: %+v", c)
		}
	}
}
