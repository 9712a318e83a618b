package workers

import (
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"strings"

	"github.com/prq-dev/prq/diff"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/ratelimit"
	"github.com/prq-dev/prq/store"
)

const (
	summarySystem = "You summarise one file of a pull request for its reviewers. Write two or three plain sentences: what changed and why it matters. No preamble."
	reviewSystem  = `You review one file of a pull request. The diff shows each head-side line with its line number. Report only real problems (bugs, missing error handling, races, security). Answer with JSON only: {"summary": "<one sentence>", "comments": [{"line": <head line number from the diff>, "body": "<the problem and a fix>"}]}. Use an empty list when the file is fine.`
	chatSystem    = "You are prq, a code review assistant. Reply to the developer's comment on their pull request: brief, specific and kind. Use the diff hunk when one is given."
)

// prompt is a built LLM request with its estimate.
type prompt struct {
	system, user string
	estimate     int64 // the provider's admission rule
	input        int64 // exact prompt tokens
	truncated    int   // hunks left out to fit the model
}

// buildFilePrompt renders a file's prompt for kind, keeping whole hunks
// while the prompt fits the model's context with room for the output.
func buildFilePrompt(kind jobs.Kind, title string, f store.FileData, m Model, tok *ratelimit.Tokenizer) (prompt, error) {
	sys := summarySystem
	if kind == jobs.KindReview {
		sys = reviewSystem
	}
	d, err := diff.Parse(f.Patch)
	if err != nil {
		return prompt{}, err
	}
	head := fmt.Sprintf("Pull request: %s\nFile: %s (%s, +%d -%d)\n\n", title, f.Path, f.Status, f.Additions, f.Deletions)
	budget := m.ContextTokens - m.MaxOutput - 64
	hunks := d.Hunks
	var user string
	left := 0
	for {
		user = head + (&diff.Patch{Hunks: hunks}).Annotate()
		if left > 0 {
			user += fmt.Sprintf("\n(%d more hunks were left out to fit the model.)\n", left)
		}
		n, err := tok.CountMessages(sys, user)
		if err != nil {
			return prompt{}, err
		}
		if n <= budget || len(hunks) <= 1 {
			if n > budget {
				return prompt{}, errTooLarge
			}
			return prompt{system: sys, user: user, input: n, truncated: left,
				estimate: ratelimit.EstimateOpenAI([]string{sys, user}, m.MaxOutput)}, nil
		}
		cut := max(1, len(hunks)/4)
		hunks = hunks[:len(hunks)-cut]
		left += cut
	}
}

var errTooLarge = fmt.Errorf("file too large for the model")

// buildChatPrompt renders a chat reply's prompt.
func buildChatPrompt(c jobs.Chat, m Model, tok *ratelimit.Tokenizer) (prompt, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "Pull request: %s\n", c.PR)
	if c.Path != "" {
		fmt.Fprintf(&b, "File: %s line %d\n", c.Path, c.Line)
	}
	if c.DiffHunk != "" {
		hunk := c.DiffHunk
		if len(hunk) > 8000 {
			hunk = hunk[len(hunk)-8000:]
		}
		fmt.Fprintf(&b, "Diff hunk:\n%s\n", hunk)
	}
	body := c.Body
	if len(body) > 8000 {
		body = body[:8000]
	}
	fmt.Fprintf(&b, "\n@%s wrote:\n%s\n", c.Author, body)
	user := b.String()
	n, err := tok.CountMessages(chatSystem, user)
	if err != nil {
		return prompt{}, err
	}
	return prompt{system: chatSystem, user: user, input: n, estimate: ratelimit.EstimateOpenAI([]string{chatSystem, user}, m.MaxOutput)}, nil
}

// EstimateChat returns a chat job's estimated cost (for the webhook).
func EstimateChat(c jobs.Chat, m Model) int64 {
	tok, err := ratelimit.NewTokenizer(m.Name)
	if err != nil {
		return ratelimit.EstimateOpenAI([]string{chatSystem, c.Body, c.DiffHunk}, m.MaxOutput)
	}
	p, err := buildChatPrompt(c, m, tok)
	if err != nil {
		return ratelimit.EstimateOpenAI([]string{chatSystem, c.Body, c.DiffHunk}, m.MaxOutput)
	}
	return p.estimate
}

var jsonObject = regexp.MustCompile(`(?s)\{.*\}`)

// parseReview reads the model's JSON review and keeps comments on lines
// the diff has, moving one that misses to the nearest commentable line
// of its hunk side. Malformed output yields an error (the model misbehaved).
func parseReview(text string, f store.FileData) (summary string, out []store.Comment, err error) {
	raw := jsonObject.FindString(text)
	var r struct {
		Summary  string `json:"summary"`
		Comments []struct {
			Line int    `json:"line"`
			Body string `json:"body"`
		} `json:"comments"`
	}
	if raw == "" || json.Unmarshal([]byte(raw), &r) != nil {
		return "", nil, fmt.Errorf("review reply is not the JSON asked for")
	}
	d, perr := diff.Parse(f.Patch)
	if perr != nil {
		return r.Summary, nil, nil
	}
	seen := map[int]bool{}
	for _, c := range r.Comments {
		body := strings.TrimSpace(c.Body)
		if body == "" {
			continue
		}
		line := c.Line
		if !d.Has(diff.Right, line) {
			n, ok := d.Nearest(diff.Right, line)
			if !ok {
				continue
			}
			body = fmt.Sprintf("(about line %d) %s", c.Line, body)
			line = n
		}
		if seen[line] {
			continue
		}
		seen[line] = true
		out = append(out, store.Comment{Path: f.Path, Line: line, Side: string(diff.Right), Body: body})
	}
	return r.Summary, out, nil
}

// Excluded reports whether a path matches an exclude glob, and which.
func Excluded(p string, globs []string) (string, bool) { return excluded(p, globs) }

// excluded reports whether a path matches an exclude glob. A glob without
// a slash matches the base name; "dir/**" matches everything below dir.
func excluded(p string, globs []string) (string, bool) {
	for _, g := range globs {
		if prefix, ok := strings.CutSuffix(g, "/**"); ok {
			if strings.HasPrefix(p, prefix+"/") || strings.Contains(p, "/"+prefix+"/") {
				return g, true
			}
			continue
		}
		target := p
		if !strings.Contains(g, "/") {
			target = path.Base(p)
		}
		if ok, _ := path.Match(g, target); ok { // NewPlanner rejects malformed globs
			return g, true
		}
	}
	return "", false
}
