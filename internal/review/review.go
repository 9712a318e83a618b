// Package review owns the contract between prq and the model for a file
// review: what the model is asked for (the system prompt and, per model,
// structured output by JSON schema, a JSON object, or a delimited text
// block), how its reply is read (tolerant of form, strict about meaning:
// fields it does not use are ignored and named, but a reply without a
// review is an error, never "no findings"), the repair turn that
// shows the model its mistake, and where each finding lands on the diff
// (a line, a range inside one hunk, the deleted side, or the review body
// when it belongs on no line of the diff).
//
// It does not call the model, render markdown or talk to GitHub.
package review

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/prq-dev/prq/diff"
	"github.com/prq-dev/prq/llm"
)

// SchemaName names the schema in response_format.
const SchemaName = "file_review"

// Schema is the reply's JSON schema, strict: every property required,
// no others allowed (OpenAI's structured outputs need both); an optional
// value is null.
var Schema = json.RawMessage(`{
  "type": "object",
  "additionalProperties": false,
  "required": ["summary", "comments"],
  "properties": {
    "summary": {"type": "string", "description": "one sentence on the file"},
    "comments": {
      "type": "array",
      "items": {
        "type": "object",
        "additionalProperties": false,
        "required": ["line", "start_line", "side", "body", "replacement"],
        "properties": {
          "line": {"type": "integer", "description": "the line the problem is on (the last line of a range)"},
          "start_line": {"type": ["integer", "null"], "description": "the first line of a range in the same hunk, or null"},
          "side": {"type": "string", "enum": ["RIGHT", "LEFT"], "description": "RIGHT for a head line (numbered), LEFT for a deleted line (L-numbered)"},
          "body": {"type": "string", "description": "the problem and a fix"},
          "replacement": {"type": ["string", "null"], "description": "the new text of the RIGHT lines start_line..line when the fix is to replace them, or null"}
        }
      }
    }
  }
}`)

// Begin and End delimit the review in text mode.
const (
	Begin = "BEGIN REVIEW"
	End   = "END REVIEW"
)

// Guide is what a review is asked for: the problems worth a comment,
// what is not, how a comment is written and placed, and the reply's
// format (format: the model's output format). It is part of every
// prompt's system message, for the review model and the others alike, so
// it is the same text for every pull request: the part of each prompt a
// provider's prompt cache serves to all of them.
func Guide(format llm.FormatType) string {
	return guide + "\n" + answerIn(format)
}

const guide = `## Reviews
Report only real problems: bugs, missing error handling, leaked resources, races, security holes, broken callers, untested behaviour; not style or taste. Comment only on lines of the task's diff, each problem once with its fix, on the line it is about: "side" is RIGHT for a numbered head line and LEFT for an L-numbered deleted line; for a problem spanning several lines of one hunk, give the first as "start_line" and the last as "line", else "start_line" is null. When the fix is to replace those head lines, "replacement" is their exact new text (all of them, indented as in the file), else null. Use an empty list when the file is fine.`

// answerIn is how a review's reply is written, by output format.
func answerIn(t llm.FormatType) string {
	switch t {
	case llm.FormatJSONSchema:
		return "Answer a review task in the JSON format given."
	case llm.FormatJSONObject:
		return "Answer a review task with one JSON object only, in this shape: " + jsonShape
	}
	return "Answer a review task with the JSON object below and nothing else, on its own lines between a line " + Begin + " and a line " + End + ":\n" + Begin + "\n" + jsonShape + "\n" + End
}

const jsonShape = `{"summary": "<one sentence>", "comments": [{"line": <line number>, "start_line": <first line or null>, "side": "RIGHT" or "LEFT", "body": "<the problem and a fix>", "replacement": "<new text of the lines>" or null}]}`

// Format returns the response_format of a format type.
func Format(t llm.FormatType) llm.Format {
	if t == llm.FormatJSONSchema {
		return llm.Format{Type: t, Name: SchemaName, Schema: Schema}
	}
	return llm.Format{Type: t}
}

// DefaultFormat is the output format for a model by its family: strict
// structured outputs for OpenAI models that have them, a JSON object for
// older OpenAI models and for other OpenAI-compatible servers (vLLM,
// Ollama, LM Studio and most gateways take it), text for Claude models.
func DefaultFormat(model string) llm.FormatType {
	m := strings.ToLower(model)
	if i := strings.LastIndex(m, "/"); i >= 0 {
		m = m[i+1:] // "openai/gpt-4o" as routers name it
	}
	switch {
	case strings.HasPrefix(m, "gpt-4o"), strings.HasPrefix(m, "gpt-4.1"), strings.HasPrefix(m, "gpt-5"),
		strings.HasPrefix(m, "o1"), strings.HasPrefix(m, "o3"), strings.HasPrefix(m, "o4"), strings.HasPrefix(m, "chatgpt-4o"):
		if m == "gpt-4o-2024-05-13" || m == "o1-preview" || m == "o1-mini" {
			return llm.FormatJSONObject // before structured outputs
		}
		return llm.FormatJSONSchema
	case strings.HasPrefix(m, "claude"):
		return llm.FormatText
	}
	return llm.FormatJSONObject
}

// Finding is one problem as the model reported it.
type Finding struct {
	Line      int    `json:"line"`
	StartLine *int   `json:"start_line"`
	Side      string `json:"side"`
	Body      string `json:"body"`
	// Replacement, when set, is the new text the model proposes for the
	// head lines StartLine..Line (a committable suggestion once Place
	// has checked it against the diff).
	Replacement *string `json:"replacement"`
}

// Reply is a model's review of one file.
type Reply struct {
	Summary  string    `json:"summary"`
	Comments []Finding `json:"comments"`
	// Ignored names the fields the reply carried that prq does not use
	// ("verdict", "comments[].severity"), sorted, each once: a model
	// drifting from the shape asked for shows in a metric before it
	// shows in reviews.
	Ignored []string `json:"-"`
}

// ErrUnusable is a reply that does not hold a review in the schema.
var ErrUnusable = errors.New("review: the model's reply could not be read")

// commentAliases are other names models give the list of comments.
var commentAliases = []string{"findings"}

// Parse reads a reply: tolerant of its form, strict about its meaning.
// It accepts what real models send: the JSON alone, inside a code fence,
// between the text-mode delimiters, or with prose around it; fields
// prq does not use (listed in Reply.Ignored), line numbers as strings
// ("12") and "findings" for "comments". Exactly one object must hold a
// review: "summary" a string, "comments" a list, every comment on a
// positive line with a body and, if it names one, a side of RIGHT or
// LEFT. Anything else is ErrUnusable with the reason, never an empty
// review.
func Parse(text string) (Reply, error) {
	if text = strings.TrimSpace(text); text == "" {
		return Reply{}, fmt.Errorf("%w: empty reply", ErrUnusable)
	}
	candidates := llm.JSONObjects(text)
	if _, after, ok := strings.Cut(text, Begin); ok {
		inner, _, ok := strings.Cut(after, End)
		if !ok {
			return Reply{}, fmt.Errorf("%w: %s without %s (cut off?)", ErrUnusable, Begin, End)
		}
		candidates = llm.JSONObjects(inner)
	}
	var found []Reply
	var firstErr error
	for _, c := range candidates {
		r, err := decode(c)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		found = append(found, r)
	}
	switch {
	case len(found) == 1:
		return found[0], nil
	case len(found) > 1:
		return Reply{}, fmt.Errorf("%w: %d review objects in one reply", ErrUnusable, len(found))
	case firstErr != nil:
		return Reply{}, fmt.Errorf("%w: %v", ErrUnusable, firstErr)
	}
	return Reply{}, fmt.Errorf("%w: no JSON object in the reply", ErrUnusable)
}

// decode reads one JSON object as a review, or says why it is not one.
func decode(b []byte) (Reply, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		return Reply{}, err
	}
	var r Reply
	ignored := map[string]bool{}
	raw, ok := top["summary"]
	if !ok {
		return Reply{}, errors.New(`"summary" is missing`)
	}
	if err := json.Unmarshal(raw, &r.Summary); err != nil {
		return Reply{}, fmt.Errorf(`"summary" is not a string: %s`, clip(raw))
	}
	key := "comments"
	list, ok := top[key]
	for _, a := range commentAliases {
		if ok {
			break
		}
		list, ok = top[a]
		key = a
	}
	if !ok {
		return Reply{}, errors.New(`"comments" is missing`)
	}
	for k := range top {
		if k != "summary" && k != key {
			ignored[k] = true
		}
	}
	var items []json.RawMessage
	if err := json.Unmarshal(list, &items); err != nil || items == nil {
		return Reply{}, fmt.Errorf(`%q must be a list, not %s`, key, clip(list))
	}
	r.Comments = make([]Finding, 0, len(items))
	for i, it := range items {
		c, err := decodeFinding(it, ignored)
		if err != nil {
			return Reply{}, fmt.Errorf("comment %d: %v", i+1, err)
		}
		r.Comments = append(r.Comments, c)
	}
	for k := range ignored {
		r.Ignored = append(r.Ignored, k)
	}
	sort.Strings(r.Ignored)
	return r, nil
}

// decodeFinding reads one comment; the fields it does not use are added
// to ignored as "comments[].<name>".
func decodeFinding(b json.RawMessage, ignored map[string]bool) (Finding, error) {
	var f map[string]json.RawMessage
	if err := json.Unmarshal(b, &f); err != nil || f == nil {
		return Finding{}, fmt.Errorf("not an object: %s", clip(b))
	}
	var c Finding
	for k, v := range f {
		var err error
		switch k {
		case "line":
			c.Line, err = lineNumber(v)
			if err == nil && c.Line < 1 {
				err = fmt.Errorf("line %d is not a line number", c.Line)
			}
		case "start_line":
			if isNull(v) {
				continue
			}
			var n int
			if n, err = lineNumber(v); err == nil {
				c.StartLine = &n
			}
		case "side":
			if isNull(v) {
				continue
			}
			if err = json.Unmarshal(v, &c.Side); err == nil {
				c.Side = strings.ToUpper(strings.TrimSpace(c.Side))
				if c.Side != string(diff.Right) && c.Side != string(diff.Left) {
					err = fmt.Errorf("side %q is not RIGHT or LEFT", c.Side)
				}
			} else {
				err = fmt.Errorf("side is not a string: %s", clip(v))
			}
		case "body":
			if json.Unmarshal(v, &c.Body) != nil {
				err = fmt.Errorf("body is not a string: %s", clip(v))
			}
		case "replacement":
			// optional: a model that omits it or sends something else
			// still gives a review, in prose
			var r string
			if isNull(v) {
				continue
			}
			if json.Unmarshal(v, &r) != nil {
				ignored["comments[].replacement"] = true
				continue
			}
			c.Replacement = &r
		default:
			ignored["comments[]."+k] = true
		}
		if err != nil {
			return Finding{}, err
		}
	}
	switch {
	case c.Line == 0:
		return Finding{}, errors.New("no line number")
	case strings.TrimSpace(c.Body) == "":
		return Finding{}, errors.New("empty body")
	}
	return c, nil
}

// lineNumber reads a line number sent as a JSON integer or as a string
// of digits ("12").
func lineNumber(v json.RawMessage) (int, error) {
	var n int
	if err := json.Unmarshal(v, &n); err == nil {
		return n, nil
	}
	var s string
	if err := json.Unmarshal(v, &s); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(s)); err == nil {
			return n, nil
		}
	}
	return 0, fmt.Errorf("line %s is not a line number", clip(v))
}

func isNull(v json.RawMessage) bool { return string(bytes.TrimSpace(v)) == "null" }

// clip shortens a JSON value for an error message.
func clip(v json.RawMessage) string {
	s := string(bytes.TrimSpace(v))
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return s
}

// RepairTurns are the turns that follow a reply that could not be read:
// the reply itself and what was wrong with it.
func RepairTurns(reply string, err error) []llm.Message {
	if len(reply) > 4000 {
		reply = reply[:4000]
	}
	return []llm.Message{
		{Role: "assistant", Content: reply},
		{Role: "user", Content: "That reply could not be read (" + err.Error() + "). Answer again with only the review JSON in the format asked for."},
	}
}

// Near is how far from the line it names a finding may move to reach a
// commentable line of the same hunk.
const Near = 3

// Comment is a finding placed on the diff, ready for GitHub.
type Comment struct {
	Line, StartLine int // StartLine 0: a single line
	Side            diff.Side
	Body            string
	Moved           bool // placed near, not on, the line the model named
	// Lines is the content of the lines the comment sits on (StartLine
	// to Line, on Side), as the diff shows them: with the path and the
	// body, what identifies the finding across pushes (Key).
	Lines []string
	// Suggestion, when set, is a replacement for exactly Lines that
	// differs from them: the model proposed it for a range of head lines
	// inside one hunk, so it applies to the head as a committable
	// suggestion.
	Suggestion *string
}

// Note is a finding that sits on no line of the diff: it goes into the
// review body under the file's name.
type Note struct {
	Line int
	Side diff.Side
	Body string
}

// Place puts findings on the diff. A finding on a commentable line stays
// there; a range stays a range when both ends are in one hunk on one
// side; a finding a few lines off moves to the nearest line of the hunk
// it is next to (and says so); anything else becomes a Note. Two
// findings on the same line are merged into one comment (without
// suggestions: neither applies alone). A replacement becomes a
// Suggestion only on the head side, on the lines the model named, when it
// differs from them.
func Place(r Reply, d *diff.Patch) (comments []Comment, notes []Note) {
	at := map[string]int{}
	for _, f := range r.Comments {
		side := diff.Side(f.Side)
		if side == "" {
			side = diff.Right
		}
		body := strings.TrimSpace(f.Body)
		c := Comment{Line: f.Line, Side: side, Body: body}
		if !d.Has(side, f.Line) {
			n, ok := nearInHunk(d, side, f.Line)
			if !ok {
				notes = append(notes, Note{Line: f.Line, Side: side, Body: body})
				continue
			}
			c.Line, c.Moved = n, true
			c.Body = fmt.Sprintf("(about line %d) %s", f.Line, body)
		} else if f.StartLine != nil && *f.StartLine > 0 && *f.StartLine < f.Line &&
			d.Has(side, *f.StartLine) && d.HunkOf(side, *f.StartLine) == d.HunkOf(side, f.Line) {
			c.StartLine = *f.StartLine
		}
		c.Lines = linesOf(d, side, c.StartLine, c.Line)
		named := f.StartLine == nil || *f.StartLine == f.Line || *f.StartLine == c.StartLine // the range placed is the one the model named
		if !c.Moved && named && side == diff.Right && f.Replacement != nil && len(c.Lines) == lineCount(c) {
			c.Suggestion = suggestion(*f.Replacement, c.Lines)
		}
		k := fmt.Sprintf("%s:%d", c.Side, c.Line)
		if i, dup := at[k]; dup {
			m := &comments[i]
			m.Body += "\n\n" + c.Body
			m.Suggestion = nil
			if m.StartLine != c.StartLine {
				m.StartLine = 0 // different ranges: keep the line they share
				m.Lines = linesOf(d, side, 0, m.Line)
			}
			continue
		}
		at[k] = len(comments)
		comments = append(comments, c)
	}
	return comments, notes
}

// lineCount is how many lines a comment spans.
func lineCount(c Comment) int {
	if c.StartLine == 0 {
		return 1
	}
	return c.Line - c.StartLine + 1
}

// linesOf returns the text of lines from..to (from 0: to alone) on side,
// in order; every one is in the diff (Place checked the ends, and a
// hunk's lines on one side are consecutive).
func linesOf(d *diff.Patch, side diff.Side, from, to int) []string {
	if from == 0 {
		from = to
	}
	var out []string
	for _, h := range d.Hunks {
		for _, l := range h.Lines {
			n := l.New
			if side == diff.Left {
				n = l.Old
			}
			if n >= from && n <= to && (l.Op == ' ' || (side == diff.Right) == (l.Op == '+')) {
				out = append(out, l.Text)
			}
		}
	}
	return out
}

// suggestion returns the replacement as a suggestion for lines, or nil
// when it would change nothing or the lines are not all known.
func suggestion(replacement string, lines []string) *string {
	if len(lines) == 0 {
		return nil
	}
	s := strings.TrimSuffix(strings.ReplaceAll(replacement, "\r\n", "\n"), "\n")
	if strings.ContainsRune(s, '\r') || s == strings.Join(lines, "\n") {
		return nil
	}
	return &s
}

// Key identifies a finding across the heads of a pull request: its file,
// its side, the content of the lines it is about (not their numbers,
// which a push above them shifts; surrounding spaces ignored) and its
// substance. The substance is the set of code spans its body quotes (the
// identifiers and expressions a rewording keeps), or, in a body without
// any, the set of its words of four letters or more, numbers left out.
func Key(path string, side diff.Side, lines []string, body string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00", path, side)
	for _, l := range lines {
		h.Write([]byte(strings.TrimSpace(l) + "\n"))
	}
	h.Write([]byte{0})
	for _, w := range substance(body) {
		h.Write([]byte(w + "\x00"))
	}
	return hex.EncodeToString(h.Sum(nil))[:24]
}

var (
	codeSpan = regexp.MustCompile("`([^`\n]+)`")
	word     = regexp.MustCompile(`[\p{L}_][\p{L}\p{N}_]{3,}`)
)

// substance is a body's code spans, or its long words, lower-cased,
// sorted and each once.
func substance(body string) []string {
	var ws []string
	for _, m := range codeSpan.FindAllStringSubmatch(body, -1) {
		ws = append(ws, strings.TrimSpace(m[1]))
	}
	if len(ws) == 0 {
		ws = word.FindAllString(strings.ToLower(body), -1)
	}
	sort.Strings(ws)
	return slices.Compact(ws)
}

// nearInHunk returns the commentable line of side closest to line within
// Near lines, if one exists.
func nearInHunk(d *diff.Patch, side diff.Side, line int) (int, bool) {
	for dist := 1; dist <= Near; dist++ {
		for _, n := range []int{line - dist, line + dist} {
			if d.Has(side, n) {
				return n, true
			}
		}
	}
	return 0, false
}
