package bench

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/prq-dev/prq/fake/corpus"
	"github.com/prq-dev/prq/fake/fakegithub"
	"github.com/prq-dev/prq/jobs"
)

// Every pull request the ceiling sends is other work: a later pass over
// the corpus names its repositories apart, so no prompt repeats and no
// admitted job is answered from a kept result instead of a call.
func TestCeilingPullRequestsNeverRepeat(t *testing.T) {
	patch := "@@ -1 +1 @@\n-a\n+b\n"
	prs := []corpus.PR{
		{Repo: "acme/api", Number: 1, Title: "one", HeadSHA: "h", BaseSHA: "b", Files: []corpus.File{{Filename: "a.go", Status: "modified", Patch: &patch}}},
		{Repo: "acme/web", Number: 2, Title: "two", HeadSHA: "h", BaseSHA: "b", Files: []corpus.File{{Filename: "b.go", Status: "modified", Patch: &patch}}},
	}
	d := newCeilingDriver(nil, fakegithub.New(fakegithub.Config{}), nil, nil, prs, map[int64]jobs.Tier{1: jobs.TierPaid}, nil, 0, 0, 1)
	seen := map[string]bool{}
	for i := 0; i < 7; i++ {
		d.sendPR(context.Background())
		w := <-d.sends
		var ev struct {
			Repository struct {
				FullName string `json:"full_name"`
			} `json:"repository"`
		}
		if err := json.Unmarshal(w.body, &ev); err != nil {
			t.Fatal(err)
		}
		if seen[ev.Repository.FullName] {
			t.Fatalf("pull request %d: repository %s sent before (the corpus's %d pull requests repeat)", i+1, ev.Repository.FullName, len(prs))
		}
		seen[ev.Repository.FullName] = true
	}
}
