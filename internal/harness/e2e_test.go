package harness

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/fake/traffic"
	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/jobs"
)

type e2eCase struct {
	prs   []jobs.PR
	tiers []jobs.Tier
	chats []jobs.PR
}

// runE2E opens PRs across tiers plus chat comments and waits until every
// PR has its one summary comment (and review where its tier reviews) and
// every chat has its reply; then it checks nothing was posted twice.
func runE2E(t *testing.T, s *stack, n int) e2eCase {
	t.Helper()
	var c e2eCase
	tiers := []jobs.Tier{jobs.TierPaid, jobs.TierTrial, jobs.TierFree}
	for i, p := range testPRs(t, n) {
		tier := tiers[i%3]
		c.prs = append(c.prs, s.openPR(int64(i%3+1), tier, p))
		c.tiers = append(c.tiers, tier)
	}
	ctx := context.Background()
	// a conversation comment and a diff comment that talk to the bot
	for i, pr := range c.prs[:2] {
		var body []byte
		event := "issue_comment"
		cm := traffic.Comment{Installation: pr.Installation, Owner: pr.Owner, Repo: pr.Repo, Number: pr.Number, ID: int64(900 + i), Author: "dev", Body: "@prq-test why is this safe?"}
		if i == 0 {
			body = traffic.IssueCommentEvent(cm)
		} else {
			event = "pull_request_review_comment"
			cm.ID = s.fakes.GitHub.AddReviewComment(pr.Owner, pr.Repo, pr.Number, "x.go", 1, cm.Body, "dev")
			cm.Path, cm.Line, cm.DiffHunk = "x.go", 1, "@@ -1 +1 @@\n-a\n+b"
			body = traffic.ReviewCommentEvent(cm)
		}
		for k := 0; k < 3; k++ { // redelivered: still one reply
			code, err := s.sender.Send(ctx, event, fmt.Sprintf("chat-delivery-%d-%d", i, k), body)
			if err != nil || (code != 202 && code != 200) {
				t.Fatalf("chat webhook: %d %v", code, err)
			}
		}
		c.chats = append(c.chats, pr)
	}
	s.waitFor("every PR published and every chat answered", 90*time.Second, func() bool {
		for _, pr := range c.prs {
			if run, err := s.app.Store().GetRun(ctx, pr); err != nil || run.State != "done" {
				return false
			}
		}
		for i, pr := range c.chats {
			st := s.fakes.GitHub.Stats(pr.Owner, pr.Repo, pr.Number)
			if (i == 0 && st.CommentsCreated < 2) || (i == 1 && st.Replies < 1) {
				return false
			}
		}
		return true
	})
	time.Sleep(300 * time.Millisecond) // let any duplicate show itself
	reviews := 0
	for i, pr := range c.prs {
		st := s.fakes.GitHub.Stats(pr.Owner, pr.Repo, pr.Number)
		if got := s.summaryComments(pr); got != 1 {
			t.Errorf("%s: %d summary comments, want exactly 1", pr, got)
		}
		if st.Duplicates != 0 || st.Reviews > 1 || st.Rejected != 0 {
			t.Errorf("%s: %+v: want no duplicates, at most one review, no 422", pr, st)
		}
		if c.tiers[i] == jobs.TierFree && st.Reviews != 0 {
			t.Errorf("%s: a free-tier PR got a review", pr)
		}
		reviews += st.Reviews
		for _, rc := range s.fakes.GitHub.ReviewComments(pr.Owner, pr.Repo, pr.Number) {
			if rc.Line <= 0 {
				t.Errorf("%s: review comment without a line: %+v", pr, rc)
			}
		}
	}
	if reviews == 0 {
		t.Errorf("no review was posted at all")
	}
	if st := s.fakes.GitHub.Stats(c.chats[0].Owner, c.chats[0].Repo, c.chats[0].Number); st.CommentsCreated != 2 {
		t.Errorf("conversation chat: %d comments (summary + reply), want 2", st.CommentsCreated)
	}
	if st := s.fakes.GitHub.Stats(c.chats[1].Owner, c.chats[1].Repo, c.chats[1].Number); st.Replies != 1 {
		t.Errorf("diff chat: %d replies, want 1", st.Replies)
	}
	return c
}

func TestEndToEnd(t *testing.T) {
	s := startStack(t, stackOpts{})
	runE2E(t, s, 9)
	for model, st := range s.fakes.OpenAI.Stats() {
		if st.RateLimited != 0 {
			t.Errorf("%s: %d provider 429s; prq must keep the provider at its limit, never over", model, st.RateLimited)
		}
	}
	if err := s.stop(); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	logs := s.logs.String()
	for name, secret := range map[string]string{"webhook secret": string(s.app.Config().GitHub.WebhookSecret), "API key": string(s.app.Config().OpenAI.APIKey),
		"admin token": string(s.app.Config().Admin.Token), "private key": strings.Split(string(s.app.Config().GitHub.PrivateKey), "\n")[1]} {
		if strings.Contains(logs, secret) {
			t.Fatalf("the %s reached the logs", name)
		}
	}
}

func TestEndToEndWithFaults(t *testing.T) {
	s := startStack(t, stackOpts{tune: func(c *config.Config) {}})
	s.fakes.OpenAI.SetFaults(fakeopenai.Faults{TooMany: 0.15, ServerError: 0.1, Truncated: 0.05, Empty: 0.05})
	s.fakes.GitHub.FailNext("/comments", 502)
	c := runE2E(t, s, 6)
	st := s.fakes.OpenAI.Stats()
	calls, faults := int64(0), int64(0)
	for _, m := range st {
		calls += m.Requests
		faults += m.Faults
	}
	jobs := 0
	for _, pr := range c.prs {
		r, _ := s.app.Store().GetRun(context.Background(), pr)
		jobs += r.SummaryTotal + r.ReviewTotal
	}
	jobs += len(c.chats)
	t.Logf("provider calls %d for %d LLM jobs (%.2f per job), injected faults %d", calls, jobs, float64(calls)/float64(jobs), faults)
	if faults == 0 {
		t.Fatal("no fault was injected: the test proved nothing")
	}
	// about a third of calls fail; retries go back through admission with
	// backoff, so calls per job stay bounded (no tight retry loop)
	if float64(calls) > 3*float64(jobs) {
		t.Fatalf("%d provider calls for %d jobs: retries are not bounded", calls, jobs)
	}
}
