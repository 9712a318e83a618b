package harness

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prq-dev/prq/fake/corpus"
	"github.com/prq-dev/prq/fake/fakegithub"
	"github.com/prq-dev/prq/fake/traffic"
	"github.com/prq-dev/prq/jobs"
)

// livingFile is a Go file of n lines; version v (1, 2, 3) rewrites the
// lines i with i%3 == v-2 (a third of them per push) and, from version 2
// on, has two lines more at the top (every line below moves).
func livingFile(name string, n, v int) []string {
	var ls []string
	if v >= 2 {
		ls = append(ls, "// Package "+name+" is reviewed on every push.", "")
	}
	for i := 0; i < n; i++ {
		l := fmt.Sprintf("\tv%d, err := step%s%d(ctx, v%d)", i+1, name, i, i)
		for w := 2; w <= v; w++ {
			if i%3 == w-2 {
				l = fmt.Sprintf("\tv%d, err := step%s%d(ctx, v%d, %d) // push %d", i+1, name, i, i, w, w)
			}
		}
		ls = append(ls, l)
	}
	return ls
}

// addedPatch is GitHub's patch of a new file.
func addedPatch(ls []string) *string {
	p := fmt.Sprintf("@@ -0,0 +1,%d @@\n+%s", len(ls), strings.Join(ls, "\n+"))
	return &p
}

var (
	suggestionOpen = regexp.MustCompile("^(`{3,})suggestion$")
	codeSpanOf     = regexp.MustCompile("`([^`\n]+)`")
	stillOpenIn    = regexp.MustCompile(`(\d+) findings? of (?:an )?earlier reviews? (?:is|are) still open`)
)

// suggestionOf returns the suggestion block of a comment body, if any.
func suggestionOf(body string) ([]string, bool) {
	lines := strings.Split(body, "\n")
	for i, l := range lines {
		m := suggestionOpen.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		for j := i + 1; j < len(lines); j++ {
			if lines[j] == m[1] {
				return lines[i+1 : j], true
			}
		}
	}
	return nil, false
}

// TestLivingReview: a pull request pushed three times, a third of each
// file's lines rewritten per push and every line moved by the second: no
// finding is posted twice on lines that did not change (each repeat is
// counted as still open instead), the findings of rewritten lines are
// posted, and every suggestion block applies to the file at the head it
// was posted on.
func TestLivingReview(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{})
	ctx := context.Background()
	const inst, n = 4, 49
	names := []string{"alpha", "beta", "gamma", "delta"}
	owner, repo := fmt.Sprintf("tenant-%d", inst), "living"
	heads := []string{RandomHex(40), RandomHex(40), RandomHex(40)}
	content := map[string]map[string][]string{} // head -> path -> lines
	files := func(v int) []corpus.File {
		var fs []corpus.File
		content[heads[v-1]] = map[string][]string{}
		for _, name := range names {
			ls := livingFile(name, 15, v)
			path := "pkg/" + name + ".go"
			content[heads[v-1]][path] = ls
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
	done(heads[0])
	// a person answers one finding whose line the next push rewrites:
	// that thread is theirs, never resolved by prq
	var answered int64
	for _, c := range s.fakes.GitHub.ReviewComments(owner, repo, n) {
		if ls := content[heads[0]][c.Path]; answered == 0 && !slices.Contains(livingFile(strings.TrimSuffix(strings.TrimPrefix(c.Path, "pkg/"), ".go"), 15, 2), ls[c.Line-1]) {
			answered = c.ID
			s.fakes.GitHub.AddReply(owner, repo, n, c.ID, "I would rather keep it.", "dev")
		}
	}
	for v := 2; v <= 3; v++ {
		if v == 3 {
			s.fakes.OpenAI.SetWording(1) // the same findings in other words
		}
		if err := s.fakes.GitHub.Push(owner, repo, n, heads[v-1], files(v)); err != nil {
			t.Fatal(err)
		}
		body := traffic.PullRequestEvent("synchronize", traffic.PR{Installation: inst, Owner: owner, Repo: repo, Number: n, Head: heads[v-1], Before: heads[v-2], Base: base})
		if code, err := s.sender.Send(ctx, "pull_request", traffic.NewDelivery(), body); err != nil || code != 202 {
			t.Fatalf("synchronize: %d %v", code, err)
		}
		done(heads[v-1])
	}
	reviews := s.fakes.GitHub.Reviews(owner, repo, n)
	headOf := map[int64]string{}
	stillOpen := 0
	for _, r := range reviews {
		headOf[r.ID] = r.CommitID
		if m := stillOpenIn.FindStringSubmatch(r.Body); m != nil {
			k, _ := strconv.Atoi(m[1])
			stillOpen += k
		}
	}
	if len(reviews) != 3 {
		t.Fatalf("%d reviews, want one per head", len(reviews))
	}
	resolved, kept := checkThreads(t, s, owner, repo, n, content, heads[2], answered)
	type identity struct{ path, lines, code string }
	first := map[identity]string{} // the head a finding was first posted at
	perHead := map[string]int{}
	suggestions := 0
	for _, c := range s.fakes.GitHub.ReviewComments(owner, repo, n) {
		if c.InReplyTo != 0 {
			continue
		}
		head := headOf[c.ReviewID]
		ls := content[head][c.Path]
		from := c.Line
		if c.StartLine > 0 {
			from = c.StartLine
		}
		if head == "" || from < 1 || c.Line > len(ls) {
			t.Fatalf("comment %d on %s:%d-%d of head %q is not on the file", c.ID, c.Path, from, c.Line, head)
		}
		perHead[head]++
		about := ls[from-1 : c.Line]
		var code []string
		for _, m := range codeSpanOf.FindAllStringSubmatch(c.Body, -1) {
			code = append(code, m[1])
		}
		id := identity{c.Path, strings.TrimSpace(strings.Join(about, "\n")), strings.Join(code, "\x00")}
		if at, dup := first[id]; dup {
			t.Errorf("%s: the finding on %q, posted at %s, is posted again at %s:\n%s", c.Path, id.lines, at[:7], head[:7], c.Body)
		}
		first[id] = head
		block, ok := suggestionOf(c.Body)
		if !ok {
			continue
		}
		suggestions++
		// apply it to the file as GitHub holds it at that head
		file, ok := s.fakes.GitHub.File(owner, repo, head, c.Path)
		if !ok {
			t.Fatalf("no %s at %s", c.Path, head[:7])
		}
		lines := strings.Split(strings.TrimSuffix(file, "\n"), "\n")
		applied := append(append(append([]string(nil), lines[:from-1]...), block...), lines[c.Line:]...)
		want := append([]string(nil), lines...)
		want[c.Line-1] = strings.TrimRight(lines[c.Line-1], " \t") + " // TODO: handle the error" // what the fake proposed
		if strings.Join(applied, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s:%d at %s: the suggestion %q does not apply to the head's file as proposed", c.Path, c.Line, head[:7], block)
		}
	}
	if perHead[heads[1]] == 0 || perHead[heads[2]] == 0 || stillOpen == 0 || suggestions == 0 {
		t.Fatalf("comments per head %d, %d, %d; %d findings still open, %d suggestions: want new findings on every push, repeats left out and some suggestions",
			perHead[heads[0]], perHead[heads[1]], perHead[heads[2]], stillOpen, suggestions)
	}
	if resolved == 0 {
		t.Fatal("no thread was resolved")
	}
	t.Logf("3 heads: %d, %d and %d line comments, %d repeats left out as still open, %d suggestions, each applying to its head; %d threads of addressed findings resolved, %d on lines still there left open, 1 a person answered left open",
		perHead[heads[0]], perHead[heads[1]], perHead[heads[2]], stillOpen, suggestions, resolved, kept)
	// the example in docs/reviews.md: the first two pushes
	rootOf := map[int64]fakegithub.ReviewComment{}
	for _, c := range s.fakes.GitHub.ReviewComments(owner, repo, n) {
		rootOf[c.ID] = c
	}
	for i, r := range reviews[:2] {
		t.Logf("--- review of push %d (%s) ---\n%s", i+1, r.CommitID[:7], r.Body)
		for _, c := range s.fakes.GitHub.ReviewComments(owner, repo, n) {
			if c.ReviewID == r.ID {
				t.Logf("- line comment on %s:%d\n%s", c.Path, c.Line, c.Body)
			}
			if i == 1 && c.InReplyTo != 0 && strings.HasPrefix(c.Body, "Addressed in `"+r.CommitID[:7]) {
				root := rootOf[c.InReplyTo]
				t.Logf("- reply in the thread of %s:%d (%s), then resolved\n%s", root.Path, root.Line, root.Body[:strings.Index(root.Body, "`,")+2], c.Body)
			}
		}
	}
}

// checkThreads checks the App's threads at the last head (content: each
// head's files): a thread whose lines are gone from the file is resolved with
// one "Addressed in" reply, unless a person answered it (answered); one
// whose lines are still there is open and has no such reply. It returns
// how many were resolved and kept open.
func checkThreads(t *testing.T, s *stack, owner, repo string, n int, content map[string]map[string][]string, last string, answered int64) (resolved, kept int) {
	t.Helper()
	all := s.fakes.GitHub.ReviewComments(owner, repo, n)
	replies := map[int64]int{}
	for _, c := range all {
		if c.InReplyTo != 0 && strings.HasPrefix(c.Body, "Addressed in `") {
			replies[c.InReplyTo]++
		}
	}
	reviews := map[int64]string{}
	for _, r := range s.fakes.GitHub.Reviews(owner, repo, n) {
		reviews[r.ID] = r.CommitID
	}
	for _, c := range all {
		if c.InReplyTo != 0 || c.Author != s.fakes.GitHub.Bot() {
			continue
		}
		there := slices.Contains(content[last][c.Path], content[reviews[c.ReviewID]][c.Path][c.Line-1])
		done := s.fakes.GitHub.Resolved(c.ID)
		switch {
		case c.ID == answered:
			if done || replies[c.ID] != 0 {
				t.Errorf("comment %d: a thread a person answered was resolved (%v) or replied to (%d)", c.ID, done, replies[c.ID])
			}
		case there:
			kept++
			if done || replies[c.ID] != 0 {
				t.Errorf("%s:%d: the finding's line is still there, yet its thread is resolved (%v) or replied to (%d)", c.Path, c.Line, done, replies[c.ID])
			}
		default:
			resolved++
			if !done || replies[c.ID] != 1 {
				t.Errorf("%s:%d (%s): the finding's line is gone, its thread resolved %v with %d replies, want resolved with 1", c.Path, c.Line, reviews[c.ReviewID][:7], done, replies[c.ID])
			}
		}
	}
	return resolved, kept
}
