package harness

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prq-dev/prq/fake/corpus"
	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/jobs"
)

// walkthroughPR is a pull request of the files named, each a new file of
// a few lines.
func walkthroughPR(repo string, number int, paths ...string) corpus.PR {
	p := corpus.PR{Repo: repo, Number: number, Title: "Walk " + repo, HeadSHA: RandomHex(40), BaseSHA: RandomHex(40)}
	for _, path := range paths {
		ls := []string{"package x", "", fmt.Sprintf("func f() int { return %d }", len(path))}
		p.Files = append(p.Files, corpus.File{Filename: path, Status: "added", Additions: len(ls), Changes: len(ls), Patch: addedPatch(ls)})
	}
	return p
}

// TestWalkthrough: the summary of a pull request of several files opens
// with its walkthrough, from exactly one call on the summary model,
// inert as the rest of the summary (the model's text here carries
// mentions, images and prq's own marker); a pull request of one file
// gets none and makes no call for it, and neither does a repository
// whose .prq.yaml says reviews.walkthrough: false.
func TestWalkthrough(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{record: true})
	s.fakes.OpenAI.SetReplies(fakeopenai.ReplyInject)
	const inst = 7
	owner := fmt.Sprintf("tenant-%d", inst)
	many := walkthroughPR(owner+"/walk", 1, "pkg/a.go", "pkg/a_test.go", "pkg/b.go", "cmd/main.go")
	one := walkthroughPR(owner+"/single", 2, "pkg/a.go")
	off := walkthroughPR(owner+"/off", 3, "pkg/a.go", "pkg/b.go")
	s.fakes.GitHub.SetFile(inst, owner, off.Name(), "", ".prq.yaml", "reviews:\n  walkthrough: false\n")
	var prs []jobs.PR
	for _, p := range []corpus.PR{many, one, off} {
		prs = append(prs, s.openPR(inst, jobs.TierPaid, p))
	}
	s.waitDone(prs, 90*time.Second)
	calls := map[string]int{} // title -> walkthrough calls
	for _, c := range s.fakes.OpenAI.Calls() {
		if c.Kind == "walkthrough" && c.Status == 200 {
			calls[c.Title]++
			if c.Model != s.app.Config().Jobs.SummaryModel {
				t.Errorf("%s: the walkthrough was asked of %s, want the summary model", c.Title, c.Model)
			}
		}
	}
	if calls[many.Title] != 1 || calls[one.Title] != 0 || calls[off.Title] != 0 {
		t.Fatalf("walkthrough calls %v, want one for %q alone", calls, many.Title)
	}
	text := s.published(prs[0]).summaryText()
	head, rest, ok := strings.Cut(text, "### Walkthrough\n\n")
	if !ok || !strings.Contains(head, "4 files at") || strings.Contains(head, "| File |") {
		t.Fatalf("the summary does not open with the walkthrough:\n%s", text)
	}
	walk, _, _ := strings.Cut(rest, "\n\n| File |")
	t.Logf("the summary's opening:\n%s### Walkthrough\n\n%s", head, walk)
	for _, want := range []string{"This pull request changes 4 files in 3 themes.", "- **`pkg/`** (+6 -0): `pkg/a.go`, `pkg/b.go`", "- **Tests** (+3 -0): `pkg/a_test.go`", "- **`cmd/`** (+3 -0): `cmd/main.go`", "security-team"} {
		if !strings.Contains(walk, want) {
			t.Errorf("the walkthrough lacks %q:\n%s", want, walk)
		}
	}
	if strings.Contains(walk, "<!-- prq:") || strings.Contains(walk, "<img") {
		t.Errorf("the model's text in the walkthrough is live:\n%s", walk)
	}
	for _, pr := range prs[1:] {
		if txt := s.published(pr).summaryText(); strings.Contains(txt, "Walkthrough") {
			t.Errorf("%s: a walkthrough where none was asked for:\n%s", pr, txt)
		}
	}
	if p := s.published(prs[0]); p.check.Title == "" || strings.Contains(p.check.Summary, "of 5 files") {
		t.Errorf("the check run counts the walkthrough as a file: %q %q", p.check.Title, p.check.Summary)
	}
}
