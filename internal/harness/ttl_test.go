package harness

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prq-dev/prq/fake/traffic"
	"github.com/prq-dev/prq/jobs"
)

// TestEveryKeyHasATTL runs the pipeline through a pull request's life
// (opened, chat, a push, closed) and an installation's (uninstalled),
// then scans Redis: every key prq wrote expires, except the permanent
// ones docs/architecture.md ("What is in Redis") lists: plans and configuration,
// the shared counters, and admission's and the limiters' state per model
// and tenant (bounded by the configuration, not by traffic).
func TestEveryKeyHasATTL(t *testing.T) {
	s := startStack(t, stackOpts{})
	ctx := context.Background()
	prs := testPRs(t, 2)
	a := s.openPR(3, jobs.TierPaid, prs[0])
	b := s.openPR(4, jobs.TierFree, prs[1])
	for _, pr := range []jobs.PR{a, b} {
		s.waitFor("published", 60*time.Second, func() bool {
			r, err := s.app.Store().GetRun(ctx, pr)
			return err == nil && r.State == "done"
		})
	}
	// a chat comment, a push, then closed
	id := s.fakes.GitHub.AddComment(a.Owner, a.Repo, a.Number, "@prq-test what does this do?", "dev")
	chat := traffic.IssueCommentEvent(traffic.Comment{Installation: a.Installation, Owner: a.Owner, Repo: a.Repo, Number: a.Number, ID: id, Author: "dev", Body: "@prq-test what does this do?"})
	if code, err := s.sender.Send(ctx, "issue_comment", traffic.NewDelivery(), chat); err != nil || code != 202 {
		t.Fatalf("chat: %d %v", code, err)
	}
	s.waitFor("the reply", 60*time.Second, func() bool { n, _ := s.app.Store().Posted(ctx, a, "reply:"+itoa(id)); return n != 0 })
	// a maintainer's learnings, of the repository and of the organisation
	for _, body := range []string{"@prq-test learn Tabs, never spaces.", "@prq-test learn --org Errors are wrapped."} {
		lid := s.fakes.GitHub.AddComment(a.Owner, a.Repo, a.Number, body, "owner")
		ev := traffic.IssueCommentEvent(traffic.Comment{Installation: a.Installation, Owner: a.Owner, Repo: a.Repo, Number: a.Number, ID: lid, Author: "owner", Body: body, Association: "OWNER"})
		if code, err := s.sender.Send(ctx, "issue_comment", traffic.NewDelivery(), ev); err != nil || code != 202 {
			t.Fatalf("learn: %d %v", code, err)
		}
		s.waitFor("the learning", 60*time.Second, func() bool { rs := s.fakes.GitHub.Reactions(lid); return len(rs) > 0 && rs[len(rs)-1] == "rocket" })
	}
	newHead := RandomHex(40)
	if err := s.fakes.GitHub.Push(a.Owner, a.Repo, a.Number, newHead, prs[0].Files[:1]); err != nil {
		t.Fatal(err)
	}
	push := traffic.PullRequestEvent("synchronize", traffic.PR{Installation: a.Installation, Owner: a.Owner, Repo: a.Repo, Number: a.Number, Head: newHead, Before: prs[0].HeadSHA, Base: prs[0].BaseSHA})
	if code, err := s.sender.Send(ctx, "pull_request", traffic.NewDelivery(), push); err != nil || code != 202 {
		t.Fatalf("push: %d %v", code, err)
	}
	s.waitFor("the push published", 60*time.Second, func() bool {
		r, err := s.app.Store().GetRun(ctx, a)
		return err == nil && r.Head == newHead && r.State == "done"
	})
	closed := traffic.PullRequestEvent("closed", traffic.PR{Installation: a.Installation, Owner: a.Owner, Repo: a.Repo, Number: a.Number, Head: newHead})
	if code, err := s.sender.Send(ctx, "pull_request", traffic.NewDelivery(), closed); err != nil || code != 200 {
		t.Fatalf("closed: %d %v", code, err)
	}
	uninstalled := []byte(`{"action":"deleted","installation":{"id":4,"account":{"login":"tenant-4","id":40}}}`)
	if code, err := s.sender.Send(ctx, "installation", traffic.NewDelivery(), uninstalled); err != nil || code != 200 {
		t.Fatalf("uninstalled: %d %v", code, err)
	}
	missing, permanent, err := KeysWithoutTTL(ctx, s.app.Redis())
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Fatalf("%d keys without a TTL:\n%s", len(missing), strings.Join(missing, "\n"))
	}
	t.Logf("permanent keys (documented): %s", strings.Join(permanent, " "))
}

func itoa(n int64) string {
	return strconv.FormatInt(n, 10)
}
