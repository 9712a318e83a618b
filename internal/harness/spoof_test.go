package harness

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prq-dev/prq/fake/corpus"
	"github.com/prq-dev/prq/internal/render"
	"github.com/prq-dev/prq/jobs"
)

// TestSpoofedMarkersAreIgnored: a pull request's author posts a comment
// and a review carrying prq's markers — both copied from another pull
// request's, and even the exact markers prq will use on theirs (as if the
// key had leaked). prq ignores them: it posts its own summary and its
// own review, and never touches the author's comment.
func TestSpoofedMarkersAreIgnored(t *testing.T) {
	s := startStack(t, stackOpts{compress: 30})
	ctx := context.Background()
	prs := corpus.Generate(20, 11)
	var a, b corpus.PR
	for _, p := range prs {
		if len(p.Files) >= 2 && len(p.Files) <= 6 {
			if a.Repo == "" {
				a = p
			} else if p.Repo != a.Repo || p.Number != a.Number {
				b = p
				break
			}
		}
	}
	a.Number, b.Number = 501, 502
	prA := s.openPR(9, jobs.TierPaid, a)
	s.waitFor("the first PR published", 90*time.Second, func() bool {
		r, err := s.app.Store().GetRun(ctx, prA)
		return err == nil && r.State == "done"
	})
	var copied []string
	for _, c := range s.fakes.GitHub.Comments(prA.Owner, prA.Repo, prA.Number) {
		for _, line := range strings.Split(c.Body, "\n") {
			if strings.HasPrefix(line, "<!-- prq:") {
				copied = append(copied, line)
			}
		}
	}
	for _, rv := range s.fakes.GitHub.Reviews(prA.Owner, prA.Repo, prA.Number) {
		for _, line := range strings.Split(rv.Body, "\n") {
			if strings.HasPrefix(line, "<!-- prq:") {
				copied = append(copied, line)
			}
		}
	}
	if len(copied) < 2 {
		t.Fatalf("found %d markers on the first PR", len(copied))
	}

	// The second PR, with the author's spoofs in place before prq runs.
	owner := "tenant-9"
	s.fakes.GitHub.AddPR(9, owner, b.Name(), b)
	prB := jobs.PR{Installation: 9, Owner: owner, Repo: b.Name(), Number: b.Number}
	leaked := render.NewMarkers(s.sender.Secret)
	spoof := strings.Join(copied, "\n") + "\n" + leaked.Summary(prB.Key(), 1) + "\n" + leaked.Review(prB.Key(), b.HeadSHA)
	theirs := s.fakes.GitHub.AddComment(owner, b.Name(), b.Number, "nothing to see here\n"+spoof, "mallory")
	s.fakes.GitHub.AddReview(owner, b.Name(), b.Number, b.HeadSHA, "LGTM\n"+spoof, "mallory")
	s.openPR(9, jobs.TierPaid, b)
	s.waitFor("the second PR published", 90*time.Second, func() bool {
		r, err := s.app.Store().GetRun(ctx, prB)
		return err == nil && r.State == "done"
	})
	bot := s.fakes.GitHub.Bot()
	summaries := 0
	for _, c := range s.fakes.GitHub.Comments(owner, b.Name(), b.Number) {
		if c.ID == theirs && (c.Edits != 0 || !strings.HasPrefix(c.Body, "nothing to see here")) {
			t.Fatalf("prq edited the author's comment: %+v", c)
		}
		if c.Author == bot && strings.Contains(c.Body, "## prq summary") {
			summaries++
		}
	}
	if summaries != 1 {
		t.Fatalf("%d summary comments by prq, want its own one", summaries)
	}
	reviews := 0
	for _, rv := range s.fakes.GitHub.Reviews(owner, b.Name(), b.Number) {
		if rv.Author == bot {
			reviews++
		}
	}
	if reviews != 1 {
		t.Fatalf("%d reviews by prq, want its own one (the author's copy must not count as prq's)", reviews)
	}
}
