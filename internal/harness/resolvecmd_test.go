package harness

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prq-dev/prq/fake/corpus"
	"github.com/prq-dev/prq/jobs"
)

// TestCommandResolveEndToEnd: `@prq-test resolve`, through prq serve and
// its workers against the fake GitHub, resolves every open thread of
// prq's findings on the pull request but the one a person answered in;
// the comment delivered twice resolves and answers once, acknowledged
// with eyes then rocket.
func TestCommandResolveEndToEnd(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{})
	r := &cmdRig{s: s, t: t, inst: 5}
	gh := s.fakes.GitHub
	const inst, n = 5, 12
	owner, repo := fmt.Sprintf("tenant-%d", inst), "resolving"
	head := RandomHex(40)
	var files []corpus.File
	for _, name := range []string{"alpha", "beta"} {
		ls := livingFile(name, 12, 1)
		path := "pkg/" + name + ".go"
		gh.SetFile(inst, owner, repo, head, path, strings.Join(ls, "\n")+"\n")
		files = append(files, corpus.File{Filename: path, Status: "added", Additions: len(ls), Changes: len(ls), Patch: addedPatch(ls)})
	}
	pr := s.openPR(inst, jobs.TierPaid, corpus.PR{Repo: owner + "/" + repo, Number: n, Title: "Steps", HeadSHA: head, BaseSHA: RandomHex(40), Files: files})
	r.waitDone(pr, head)
	var roots []int64
	for _, c := range gh.ReviewComments(owner, repo, n) {
		if c.InReplyTo == 0 && c.Author == gh.Bot() {
			roots = append(roots, c.ID)
		}
	}
	if len(roots) < 2 {
		t.Fatalf("%d findings posted, want at least 2 to resolve", len(roots))
	}
	answered := roots[0]
	gh.AddReply(owner, repo, n, answered, "This one is on purpose.", "dev")

	gh.RecordRequests()
	id := r.command(pr, "octocat", "maintainer", "MEMBER", "@prq-test resolve", 2)
	r.done(id, "rocket")
	if got := gh.Reactions(id); !reflect.DeepEqual(got, []string{"eyes", "rocket"}) {
		t.Errorf("reactions %v, want eyes then rocket", got)
	}
	for _, root := range roots {
		if want := root != answered; gh.Resolved(root) != want {
			t.Errorf("thread %d resolved: %v, want %v", root, !want, want)
		}
	}
	time.Sleep(500 * time.Millisecond) // the second delivery, if it ran again, would answer again
	want := fmt.Sprintf("Resolved %d of my review threads. 1 thread a person answered in stays open", len(roots)-1)
	if a := r.answers(pr, id); len(a) != 1 || !strings.Contains(a[0], want) {
		t.Errorf("answers %q, want one saying %q", a, want)
	}
	var mutations int
	for _, q := range gh.Requests() {
		if strings.Contains(string(q.Body), "resolveReviewThread") {
			mutations++
		}
	}
	if mutations != len(roots)-1 {
		t.Errorf("%d resolveReviewThread mutations, want %d: one per thread", mutations, len(roots)-1)
	}
}
