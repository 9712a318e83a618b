package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prq-dev/prq/fake/corpus"
	"github.com/prq-dev/prq/fake/traffic"
	"github.com/prq-dev/prq/jobs"
)

// TestFindingVotes: people's 👍 and 👎 on prq's findings are read back
// at the pull request's next finalize, or by the periodic pass when no
// push comes, and shown, by model and kind, in /metrics and the
// dashboard's API: each person once per comment, the
// App's own reactions and other contents left out, a vote taken back
// taken off at the read after; every key it keeps but the totals expires.
func TestFindingVotes(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{})
	ctx := context.Background()
	const inst, n = 6, 12
	owner, repo := fmt.Sprintf("tenant-%d", inst), "votes"
	heads := []string{RandomHex(40), RandomHex(40), RandomHex(40)}
	files := func(v int) []corpus.File {
		var fs []corpus.File
		for _, name := range []string{"alpha", "beta"} {
			ls := livingFile(name, 9, v)
			path := "pkg/" + name + ".go"
			s.fakes.GitHub.SetFile(inst, owner, repo, heads[v-1], path, strings.Join(ls, "\n")+"\n")
			fs = append(fs, corpus.File{Filename: path, Status: "added", Additions: len(ls), Changes: len(ls), Patch: addedPatch(ls)})
		}
		return fs
	}
	base := RandomHex(40)
	pr := s.openPR(inst, jobs.TierPaid, corpus.PR{Repo: owner + "/" + repo, Number: n, Title: "Steps", HeadSHA: heads[0], BaseSHA: base, Files: files(1)})
	done := func(head string) {
		s.waitFor("head "+head[:7]+" finalized", 120*time.Second, func() bool {
			r, err := s.app.Store().GetRun(ctx, pr)
			return err == nil && r.Head == head && r.State == "done"
		})
	}
	push := func(v int) {
		t.Helper()
		if err := s.fakes.GitHub.Push(owner, repo, n, heads[v-1], files(v)); err != nil {
			t.Fatal(err)
		}
		body := traffic.PullRequestEvent("synchronize", traffic.PR{Installation: inst, Owner: owner, Repo: repo, Number: n, Head: heads[v-1], Before: heads[v-2], Base: base})
		if code, err := s.sender.Send(ctx, "pull_request", traffic.NewDelivery(), body); err != nil || code != 202 {
			t.Fatalf("synchronize: %d %v", code, err)
		}
		done(heads[v-1])
	}
	done(heads[0])
	var findings []int64
	kindOf := map[int64]string{}
	for _, c := range s.fakes.GitHub.ReviewComments(owner, repo, n) {
		if c.Author == s.fakes.GitHub.Bot() && strings.Contains(c.Body, "<!-- prq:finding key=") {
			findings = append(findings, c.ID)
			kindOf[c.ID] = "prose"
			if _, ok := suggestionOf(c.Body); ok {
				kindOf[c.ID] = "suggestion"
			}
		}
	}
	if len(findings) < 2 {
		t.Fatalf("%d findings posted, want at least 2", len(findings))
	}
	a, b := findings[0], findings[1]
	gh := s.fakes.GitHub
	gh.AddReaction(a, "alice", "+1")
	gh.AddReaction(a, "bob", "+1")
	gh.AddReaction(a, "carol", "-1")
	gh.AddReaction(a, gh.Bot(), "+1") // the App's own: not a vote
	gh.AddReaction(b, "alice", "-1")
	gh.AddReaction(b, "bob", "heart") // not a vote
	push(2)
	want := map[string][2]float64{} // kind -> up, down
	add := func(id int64, up, down float64) {
		w := want[kindOf[id]]
		want[kindOf[id]] = [2]float64{w[0] + up, w[1] + down}
	}
	add(a, 2, 1)
	add(b, 0, 1)
	check := func(when string) {
		t.Helper()
		for kind, w := range want {
			got := func() [2]float64 {
				return [2]float64{s.metric("prq_review_finding_votes", map[string]string{"model": "gpt-4o", "kind": kind, "vote": "up"}),
					s.metric("prq_review_finding_votes", map[string]string{"model": "gpt-4o", "kind": kind, "vote": "down"})}
			}
			s.waitFor(when+": the votes in /metrics", 120*time.Second, func() bool { return got() == w })
			if r := s.metric("prq_review_acceptance_ratio", map[string]string{"model": "gpt-4o", "kind": kind}); w[0]+w[1] > 0 && r != w[0]/(w[0]+w[1]) {
				t.Errorf("%s: prq_review_acceptance_ratio{kind=%q} %v, want %v", when, kind, r, w[0]/(w[0]+w[1]))
			}
		}
		code, body := get(t, "http://"+s.app.ListenAddr()+"/api/dashboard", string(s.app.Config().Admin.Token))
		if code != 200 {
			t.Fatalf("/api/dashboard: %d", code)
		}
		var d struct {
			Acceptance []struct {
				Model, Kind string
				Up, Down    float64
				Rate        float64
			} `json:"acceptance"`
		}
		if err := json.Unmarshal([]byte(body), &d); err != nil {
			t.Fatal(err)
		}
		seen := 0
		for _, row := range d.Acceptance {
			w, ok := want[row.Kind]
			if !ok || row.Model != "gpt-4o" {
				continue
			}
			seen++
			if row.Up != w[0] || row.Down != w[1] || (w[0]+w[1] > 0 && row.Rate != w[0]/(w[0]+w[1])) {
				t.Errorf("%s: dashboard acceptance %+v, want %v", when, row, w)
			}
		}
		if seen != len(want) {
			t.Errorf("%s: dashboard acceptance %+v lacks a kind of %v", when, d.Acceptance, want)
		}
		_, metrics := get(t, "http://"+s.app.ListenAddr()+"/metrics", "")
		for _, l := range strings.Split(metrics, "\n") {
			if strings.HasPrefix(l, "prq_review_") {
				t.Logf("%s: %s", when, l)
			}
		}
		t.Logf("%s: /api/dashboard acceptance %+v", when, d.Acceptance)
	}
	check("after the second push")
	gh.RemoveReaction(a, "carol", "-1") // she takes hers back
	push(3)
	add(a, 0, -1)
	check("after the third push")
	// no push follows: the periodic pass reads it
	gh.AddReaction(b, "erin", "+1")
	add(b, 1, 0)
	check("with no push after it")
	// what the votes keep expires, but for the totals
	missing, permanent, err := KeysWithoutTTL(ctx, s.app.Redis())
	if err != nil || len(missing) > 0 || !slices.Contains(permanent, "{prq:acceptance}:totals") {
		t.Errorf("keys without a TTL %v (%v), permanent %v: want none but the documented ones, the totals among them", missing, err, permanent)
	}
}
