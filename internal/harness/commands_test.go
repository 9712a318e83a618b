package harness

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prq-dev/prq/fake/corpus"
	"github.com/prq-dev/prq/fake/fakegithub"
	"github.com/prq-dev/prq/fake/traffic"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
)

// cmdRig drives commands through the webhook against the fake GitHub.
type cmdRig struct {
	s    *stack
	t    *testing.T
	inst int64
	n    int
}

// command posts a comment on pr as author (association assoc) in the
// fake, and delivers its webhook times times; it returns the comment's id.
func (r *cmdRig) command(pr jobs.PR, prAuthor, author, assoc, body string, times int) int64 {
	r.t.Helper()
	id := r.s.fakes.GitHub.AddComment(pr.Owner, pr.Repo, pr.Number, body, author)
	ev := traffic.IssueCommentEvent(traffic.Comment{Installation: pr.Installation, Owner: pr.Owner, Repo: pr.Repo, Number: pr.Number, ID: id,
		Author: author, Body: body, Association: assoc, PRAuthor: prAuthor})
	for range times {
		r.n++
		if code, err := r.s.sender.Send(context.Background(), "issue_comment", fmt.Sprintf("cmd-delivery-%d", r.n), ev); err != nil || (code != 202 && code != 200) {
			r.t.Fatalf("%q: webhook %d %v", body, code, err)
		}
	}
	return id
}

// done waits for the command's last reaction, the rocket (or confused).
func (r *cmdRig) done(id int64, last string) {
	r.t.Helper()
	r.s.waitFor("the command's "+last+" reaction", 60*time.Second, func() bool {
		rs := r.s.fakes.GitHub.Reactions(id)
		return len(rs) > 0 && rs[len(rs)-1] == last
	})
}

// answers returns the App's comments on pr answering comment id.
func (r *cmdRig) answers(pr jobs.PR, id int64) []string {
	var out []string
	for _, c := range r.s.fakes.GitHub.Comments(pr.Owner, pr.Repo, pr.Number) {
		if c.Author == r.s.fakes.GitHub.Bot() && strings.Contains(c.Body, fmt.Sprintf("prq:reply to=%d ", id)) {
			out = append(out, c.Body)
		}
	}
	return out
}

func (r *cmdRig) push(pr jobs.PR, p corpus.PR, from string, changed []corpus.File) string {
	r.t.Helper()
	head := RandomHex(40)
	if err := r.s.fakes.GitHub.Push(pr.Owner, pr.Repo, pr.Number, head, changed); err != nil {
		r.t.Fatal(err)
	}
	body := traffic.PullRequestEvent("synchronize", traffic.PR{Installation: pr.Installation, Owner: pr.Owner, Repo: pr.Repo, Number: pr.Number, Head: head, Before: from, Base: p.BaseSHA})
	if code, err := r.s.sender.Send(context.Background(), "pull_request", traffic.NewDelivery(), body); err != nil || code != 202 {
		r.t.Fatalf("synchronize: %d %v", code, err)
	}
	return head
}

func (r *cmdRig) run(pr jobs.PR) store.Run {
	run, err := r.s.app.Store().GetRun(context.Background(), pr)
	if err != nil {
		r.t.Fatalf("%s: %v", pr, err)
	}
	return run
}

func (r *cmdRig) waitDone(pr jobs.PR, head string) store.Run {
	r.t.Helper()
	r.s.waitFor(fmt.Sprintf("%s at %.7s reviewed", pr, head), 60*time.Second, func() bool {
		run, err := r.s.app.Store().GetRun(context.Background(), pr)
		return err == nil && run.Head == head && run.State == store.StateDone
	})
	return r.run(pr)
}

// TestCommandsEndToEnd: commands given in comments, through prq serve
// and its workers against the fake GitHub: pause keeps a push from
// review, resume reviews it (what changed only); full review reviews
// every file again and posts a new review; ignore in the description
// keeps a pull request from automatic review and review still reviews
// it, then only what changed after a push; a stranger's command is
// refused with a reaction and costs nothing; a redelivered command runs
// once; help, status and config answer.
func TestCommandsEndToEnd(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{record: true})
	r := &cmdRig{s: s, t: t, inst: 1}
	gh := s.fakes.GitHub
	prs := repoPRs(t, 2)
	p, q := prs[0], prs[1]
	const author = "octocat" // the fake's pull requests are octocat's
	calls := func() int64 { return s.fakes.LLMCalls() }

	// P: reviewed on opening; paused (the comment delivered three times)
	pr := s.openPR(1, jobs.TierPaid, p)
	first := r.waitDone(pr, p.HeadSHA)
	pause := r.command(pr, author, "maintainer", "MEMBER", "@prq-test pause", 3)
	r.done(pause, "rocket")
	if got := gh.Reactions(pause); !reflect.DeepEqual(got, []string{"eyes", "rocket"}) {
		t.Errorf("pause: reactions %v, want eyes then rocket", got)
	}
	if a := r.answers(pr, pause); len(a) != 1 || !strings.Contains(a[0], "paused") || !strings.HasPrefix(a[0], "@maintainer ") {
		t.Errorf("pause delivered three times: %d answers %q, want one", len(a), a)
	}
	before := calls()
	changed := []corpus.File{p.Files[0]}
	head2 := r.push(pr, p, p.HeadSHA, changed)
	time.Sleep(2 * time.Second) // a paused pull request's push plans nothing
	if run := r.run(pr); run.Head != p.HeadSHA || calls() != before {
		t.Fatalf("paused: the push was planned (head %.7s, %d calls)", run.Head, calls()-before)
	}
	// resume: the push is reviewed, only what changed
	resume := r.command(pr, author, author, "NONE", "@prq-test resume", 1) // the author may
	r.done(resume, "rocket")
	run := r.waitDone(pr, head2)
	if _, files := run.FileSummaries(); files != 1 || run.ReviewTotal != 1 {
		t.Errorf("resume: %d summaries and %d reviews planned, want the changed file only", files, run.ReviewTotal)
	}
	// full review: every file again, a new review on the same head
	reviews := len(gh.Reviews(pr.Owner, pr.Repo, pr.Number))
	before = calls()
	full := r.command(pr, author, "maintainer", "MEMBER", "@prq-test full review", 1)
	r.done(full, "rocket")
	s.waitFor("the full review posted", 60*time.Second, func() bool { return len(gh.Reviews(pr.Owner, pr.Repo, pr.Number)) == reviews+1 })
	run = r.waitDone(pr, head2)
	if run.SummaryTotal != first.SummaryTotal || run.ReviewTotal != first.ReviewTotal || run.Round == "" {
		t.Errorf("full review: %d summaries and %d reviews (round %q), want every file: %d and %d", run.SummaryTotal, run.ReviewTotal, run.Round, first.SummaryTotal, first.ReviewTotal)
	}
	if got, want := calls()-before, int64(first.SummaryTotal+first.ReviewTotal); got < want {
		t.Errorf("full review: %d calls, want at least %d: new work, not results reused", got, want)
	}
	// review on a head reviewed already: refused, costs nothing
	before = calls()
	again := r.command(pr, author, "maintainer", "MEMBER", "@prq-test review", 1)
	r.done(again, "confused")
	if a := r.answers(pr, again); len(a) != 1 || !strings.Contains(a[0], "reviewed already") || calls() != before {
		t.Errorf("review of a reviewed head: %q, %d calls", a, calls()-before)
	}

	// a stranger: refused with a reaction, no answer, nothing spent
	before = calls()
	stranger := r.command(pr, author, "stranger", "NONE", "@prq-test full review", 1)
	r.done(stranger, "confused")
	time.Sleep(500 * time.Millisecond)
	if got := gh.Reactions(stranger); !reflect.DeepEqual(got, []string{"confused"}) || len(r.answers(pr, stranger)) != 0 || calls() != before {
		t.Errorf("a stranger's command: reactions %v, %d answers, %d calls; want confused alone", got, len(r.answers(pr, stranger)), calls()-before)
	}

	// Q: "@prq-test ignore" in its description: not reviewed until asked
	q.Body += "\n\n@prq-test ignore\n"
	gh.SetFile(1, "tenant-1", q.Name(), "", ".prq.yaml", "language: ja\n")
	qr := s.openPR(1, jobs.TierPaid, q)
	time.Sleep(2 * time.Second)
	if _, err := s.app.Store().GetRun(context.Background(), qr); err == nil {
		t.Fatalf("an ignored pull request was planned")
	}
	review := r.command(qr, author, "maintainer", "OWNER", "@prq-test review", 1)
	r.done(review, "rocket")
	qrun := r.waitDone(qr, q.HeadSHA)
	if qrun.SummaryTotal == 0 {
		t.Fatalf("review of an ignored pull request planned nothing")
	}
	qhead := r.push(qr, q, q.HeadSHA, []corpus.File{q.Files[1]})
	time.Sleep(2 * time.Second)
	if r.run(qr).Head != q.HeadSHA {
		t.Fatalf("an ignored pull request's push was planned")
	}
	review2 := r.command(qr, author, "maintainer", "OWNER", "@prq-test review", 1)
	r.done(review2, "rocket")
	qrun = r.waitDone(qr, qhead)
	if _, files := qrun.FileSummaries(); files != 1 || qrun.ReviewTotal != 1 {
		t.Errorf("review after a push: %d summaries and %d reviews, want the changed file only", files, qrun.ReviewTotal)
	}
	if a := r.answers(qr, review2); len(a) != 1 || !strings.Contains(a[0], "Reviewing what changed from "+q.HeadSHA[:7]+" to "+qhead[:7]) {
		t.Errorf("review's answer: %q", a)
	}

	// reactions failing (an API a proxy lacks) hold back no answer
	gh.FailFamily(fakegithub.FamilyReactions, 404)
	st := r.command(qr, author, "maintainer", "OWNER", "@prq-test status", 1)
	s.waitFor("status answered with reactions failing", 60*time.Second, func() bool { return len(r.answers(qr, st)) == 1 })
	gh.FailFamily(fakegithub.FamilyReactions, 0)

	// an answer GitHub will never take: confused, not retried for good
	gh.FailFamily(fakegithub.FamilyIssueComments, 422)
	refusedAnswer := r.command(qr, author, "maintainer", "OWNER", "@prq-test help", 1)
	r.done(refusedAnswer, "confused")
	gh.FailFamily(fakegithub.FamilyIssueComments, 0)

	// help, status, config, summary
	for body, want := range map[string]string{
		"@prq-test help":   "`full review`: review every file again",
		"@prq-test status": qhead[:7] + " is reviewed",
		"@prq-test config": "language: ja",
		// the summary again, from the kept results: nothing is called
		"@prq-test summary": "The summary of " + qhead[:7] + ", as in the summary comment",
	} {
		id := r.command(qr, author, "maintainer", "OWNER", body, 1)
		r.done(id, "rocket")
		if a := r.answers(qr, id); len(a) != 1 || !strings.Contains(a[0], want) {
			t.Errorf("%s: %q, want %q in it", body, a, want)
		}
	}
}
