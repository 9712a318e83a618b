package harness

import (
	"context"
	"testing"
	"time"

	"github.com/prq-dev/prq/fake/traffic"
	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
)

// repeatRun opens n pull requests; a tenth get a push that changes no
// file 5 s (compressed) after opening, a third are closed and reopened
// at the same head once reviewed. It returns the provider's whole
// answers and how many of them repeated a prompt answered before.
func repeatRun(t *testing.T, reuse bool, n int) (answered, repeats int64) {
	s := startStack(t, stackOpts{tune: func(c *config.Config) { c.Jobs.ReuseResults = config.BoolPtr(reuse) }})
	ctx := context.Background()
	prs := testPRs(t, n)
	var opened []jobs.PR
	heads := map[jobs.PR]string{}
	for i, p := range prs {
		pr := s.openPR(1, jobs.TierPaid, p)
		opened = append(opened, pr)
		heads[pr] = p.HeadSHA
		if i%10 == 0 { // a push that leaves every file as it was, 5 s later
			time.Sleep(5 * time.Second / 30)
			head := RandomHex(40)
			if err := s.fakes.GitHub.Push(pr.Owner, pr.Repo, pr.Number, head, nil); err != nil {
				t.Fatal(err)
			}
			ev := traffic.PullRequestEvent("synchronize", traffic.PR{Installation: 1, Owner: pr.Owner, Repo: pr.Repo, Number: pr.Number, Head: head, Before: p.HeadSHA, Base: p.BaseSHA, Title: p.Title})
			if code, err := s.sender.Send(ctx, "pull_request", traffic.NewDelivery(), ev); err != nil || code != 202 {
				t.Fatalf("synchronize: %d %v", code, err)
			}
			heads[pr] = head
		}
	}
	done := func() bool {
		for _, pr := range opened {
			run, err := s.app.Store().GetRun(ctx, pr)
			if err != nil || run.Head != heads[pr] || run.State != store.StateDone {
				return false
			}
		}
		return true
	}
	s.waitFor("every pull request reviewed", 90*time.Second, done)
	for i, pr := range opened {
		if i%3 != 1 {
			continue
		}
		for _, action := range []string{"closed", "reopened"} {
			if action == "closed" {
				s.fakes.GitHub.SetState(pr.Owner, pr.Repo, pr.Number, "closed")
			} else {
				s.fakes.GitHub.SetState(pr.Owner, pr.Repo, pr.Number, "open")
			}
			ev := traffic.PullRequestEvent(action, traffic.PR{Installation: 1, Owner: pr.Owner, Repo: pr.Repo, Number: pr.Number, Head: heads[pr], Base: prs[i].BaseSHA, Title: prs[i].Title})
			if code, err := s.sender.Send(ctx, "pull_request", traffic.NewDelivery(), ev); err != nil || code >= 300 {
				t.Fatalf("%s: %d %v", action, code, err)
			}
		}
	}
	time.Sleep(500 * time.Millisecond)
	s.waitFor("every reopened pull request reviewed again", 90*time.Second, done)
	for _, st := range s.fakes.OpenAI.Stats() {
		answered += st.Answered
		repeats += st.Repeats
	}
	return answered, repeats
}

// TestNeverPayTwice: with pushes that change no file (a tenth of the
// pull requests, 5 s after opening) and close/reopen at the same head (a
// third), at most 1% of the provider's answers repeat a prompt answered
// before (the fake provider hashes each prompt); without reuse, many do.
func TestNeverPayTwice(t *testing.T) {
	t.Parallel()
	const n = 20
	answered, repeats := repeatRun(t, true, n)
	t.Logf("reuse on: %d answers, %d repeated a prompt answered before (%.1f%%)", answered, repeats, 100*float64(repeats)/float64(max(answered, 1)))
	if answered == 0 || repeats*100 > answered {
		t.Errorf("%d of %d answers repeat a prompt, want at most 1%%", repeats, answered)
	}
	offAnswered, offRepeats := repeatRun(t, false, n)
	t.Logf("reuse off: %d answers, %d repeated (%.1f%%)", offAnswered, offRepeats, 100*float64(offRepeats)/float64(max(offAnswered, 1)))
	if offRepeats <= repeats || offAnswered <= answered {
		t.Errorf("without reuse %d repeats of %d answers, with it %d of %d: reuse saved nothing", offRepeats, offAnswered, repeats, answered)
	}

}
