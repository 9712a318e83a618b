// Package diff parses the unified-diff patches GitHub returns per file:
// hunks with old and new line numbers, which lines a review comment may
// sit on, and the annotated form prompts show the model. It does not
// fetch patches or talk to GitHub.
package diff

import (
	"fmt"
	"strconv"
	"strings"
)

// Side is the side of a diff a line lives on, as GitHub names it.
type Side string

// Sides.
const (
	Left  Side = "LEFT"  // the base: deleted and context lines
	Right Side = "RIGHT" // the head: added and context lines
)

// Line is one line of a hunk. Old or New is 0 where the line does not
// exist on that side.
type Line struct {
	Op   byte // ' ', '+' or '-'
	Old  int
	New  int
	Text string
}

// Hunk is one @@ section.
type Hunk struct {
	OldStart, OldLines int
	NewStart, NewLines int
	Section            string // text after the closing @@
	Lines              []Line
}

// Patch is a parsed file patch.
type Patch struct {
	Hunks []Hunk
}

// ParseError reports a malformed patch.
type ParseError struct {
	Line int
	Msg  string
}

func (e *ParseError) Error() string { return fmt.Sprintf("diff: line %d: %s", e.Line, e.Msg) }

// Parse parses a GitHub file patch. Hunk headers may omit counts
// ("@@ -5 +5 @@" means one line each). "\ No newline at end of file"
// markers are skipped. Lines before the first hunk header are an error.
func Parse(patch string) (*Patch, error) {
	p := &Patch{}
	if patch == "" {
		return p, nil
	}
	lines := strings.Split(strings.TrimSuffix(patch, "\n"), "\n")
	var h *Hunk
	var oldN, newN, oldLeft, newLeft int
	for i, l := range lines {
		if strings.HasPrefix(l, "@@") {
			hh, err := parseHeader(l)
			if err != nil {
				return nil, &ParseError{Line: i + 1, Msg: err.Error()}
			}
			p.Hunks = append(p.Hunks, hh)
			h = &p.Hunks[len(p.Hunks)-1]
			oldN, newN = hh.OldStart, hh.NewStart
			oldLeft, newLeft = hh.OldLines, hh.NewLines
			continue
		}
		if h == nil {
			return nil, &ParseError{Line: i + 1, Msg: "content before the first hunk header"}
		}
		if strings.HasPrefix(l, `\`) {
			continue // \ No newline at end of file
		}
		op := byte(' ')
		text := l
		if len(l) > 0 {
			op, text = l[0], l[1:]
		}
		switch op {
		case ' ':
			if oldLeft <= 0 || newLeft <= 0 {
				return nil, &ParseError{Line: i + 1, Msg: "more context lines than the hunk header counts"}
			}
			h.Lines = append(h.Lines, Line{Op: ' ', Old: oldN, New: newN, Text: text})
			oldN, newN, oldLeft, newLeft = oldN+1, newN+1, oldLeft-1, newLeft-1
		case '+':
			if newLeft <= 0 {
				return nil, &ParseError{Line: i + 1, Msg: "more added lines than the hunk header counts"}
			}
			h.Lines = append(h.Lines, Line{Op: '+', New: newN, Text: text})
			newN, newLeft = newN+1, newLeft-1
		case '-':
			if oldLeft <= 0 {
				return nil, &ParseError{Line: i + 1, Msg: "more deleted lines than the hunk header counts"}
			}
			h.Lines = append(h.Lines, Line{Op: '-', Old: oldN, Text: text})
			oldN, oldLeft = oldN+1, oldLeft-1
		default:
			return nil, &ParseError{Line: i + 1, Msg: fmt.Sprintf("unexpected line prefix %q", op)}
		}
	}
	return p, nil
}

// parseHeader parses "@@ -a[,b] +c[,d] @@ section".
func parseHeader(l string) (Hunk, error) {
	rest, ok := strings.CutPrefix(l, "@@ ")
	if !ok {
		return Hunk{}, fmt.Errorf("malformed hunk header %q", trunc(l))
	}
	spec, section, ok := strings.Cut(rest, " @@")
	if !ok {
		return Hunk{}, fmt.Errorf("hunk header without closing @@: %q", trunc(l))
	}
	parts := strings.Fields(spec)
	if len(parts) != 2 || !strings.HasPrefix(parts[0], "-") || !strings.HasPrefix(parts[1], "+") {
		return Hunk{}, fmt.Errorf("malformed hunk ranges %q", trunc(spec))
	}
	var h Hunk
	var err error
	if h.OldStart, h.OldLines, err = parseRange(parts[0][1:]); err != nil {
		return Hunk{}, err
	}
	if h.NewStart, h.NewLines, err = parseRange(parts[1][1:]); err != nil {
		return Hunk{}, err
	}
	h.Section = strings.TrimSpace(section)
	return h, nil
}

func parseRange(s string) (start, count int, err error) {
	a, b, hasCount := strings.Cut(s, ",")
	start, err = strconv.Atoi(a)
	if err != nil || start < 0 || start > 1e9 {
		return 0, 0, fmt.Errorf("bad hunk start %q", trunc(s))
	}
	count = 1
	if hasCount {
		if count, err = strconv.Atoi(b); err != nil || count < 0 || count > 1e9 {
			return 0, 0, fmt.Errorf("bad hunk count %q", trunc(s))
		}
	}
	return start, count, nil
}

func trunc(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}

// Has reports whether a comment may sit on line of side: the line is
// inside a hunk on that side (GitHub answers 422 otherwise).
func (p *Patch) Has(side Side, line int) bool {
	if line <= 0 {
		return false
	}
	for _, h := range p.Hunks {
		for _, l := range h.Lines {
			if (side == Right && l.New == line) || (side == Left && l.Old == line) {
				return true
			}
		}
	}
	return false
}

// HunkOf returns the index of the hunk holding line on side, or -1.
func (p *Patch) HunkOf(side Side, line int) int {
	for i, h := range p.Hunks {
		for _, l := range h.Lines {
			if (side == Right && l.New == line) || (side == Left && l.Old == line) {
				return i
			}
		}
	}
	return -1
}

// Nearest returns the commentable line on side closest to line, and false
// when the side has no lines at all.
func (p *Patch) Nearest(side Side, line int) (int, bool) {
	best, dist := 0, -1
	for _, h := range p.Hunks {
		for _, l := range h.Lines {
			n := l.New
			if side == Left {
				n = l.Old
			}
			if n == 0 {
				continue
			}
			d := n - line
			if d < 0 {
				d = -d
			}
			if dist < 0 || d < dist {
				best, dist = n, d
			}
		}
	}
	return best, dist >= 0
}

// Added returns the new-side numbers of added lines.
func (p *Patch) Added() []int {
	var out []int
	for _, h := range p.Hunks {
		for _, l := range h.Lines {
			if l.Op == '+' {
				out = append(out, l.New)
			}
		}
	}
	return out
}

// Annotate renders the patch for a prompt: every line of the head side
// prefixed with its new-file line number, deletions with L and their
// base-file line number, so the model can cite real lines on either side.
func (p *Patch) Annotate() string {
	var b strings.Builder
	for _, h := range p.Hunks {
		fmt.Fprintf(&b, "@@ -%d,%d +%d,%d @@ %s\n", h.OldStart, h.OldLines, h.NewStart, h.NewLines, h.Section)
		for _, l := range h.Lines {
			if l.Op == '-' {
				fmt.Fprintf(&b, "%4s -%s\n", "L"+strconv.Itoa(l.Old), l.Text)
				continue
			}
			fmt.Fprintf(&b, "%4d %c%s\n", l.New, l.Op, l.Text)
		}
	}
	return b.String()
}

// Split divides the patch into parts for which fits reports true, so a
// file too large for one model call can be reviewed in several: whole
// hunks grouped in order while they fit; a hunk that does not fit alone
// is cut into runs of consecutive lines (each a valid hunk with its own
// header, keeping real line numbers), each led by up to three context
// lines from before it. fits must be monotone: a part that fits still
// fits with lines taken away. A single line that does not fit is
// returned alone; the caller decides what to do with it.
func (p *Patch) Split(fits func(*Patch) bool) []*Patch {
	if fits(p) {
		return []*Patch{p}
	}
	var parts []*Patch
	var group []Hunk
	flush := func() {
		if len(group) > 0 {
			parts = append(parts, &Patch{Hunks: group})
			group = nil
		}
	}
	for _, h := range p.Hunks {
		if fits(&Patch{Hunks: append(append([]Hunk(nil), group...), h)}) {
			group = append(group, h)
			continue
		}
		flush()
		if fits(&Patch{Hunks: []Hunk{h}}) {
			group = []Hunk{h}
			continue
		}
		for _, piece := range cutHunk(h, fits) {
			parts = append(parts, &Patch{Hunks: []Hunk{piece}})
		}
	}
	flush()
	return parts
}

// cutHunk cuts h into the longest runs of lines that fit, found by binary
// search (fits is monotone in the run's length).
func cutHunk(h Hunk, fits func(*Patch) bool) []Hunk {
	oldAt := make([]int, len(h.Lines)+1)
	newAt := make([]int, len(h.Lines)+1)
	oldAt[0], newAt[0] = h.OldStart, h.NewStart
	for i, l := range h.Lines {
		oldAt[i+1], newAt[i+1] = oldAt[i], newAt[i]
		if l.Op != '+' {
			oldAt[i+1]++
		}
		if l.Op != '-' {
			newAt[i+1]++
		}
	}
	sub := func(from, to int) Hunk {
		s := Hunk{OldStart: oldAt[from], NewStart: newAt[from], Section: h.Section, Lines: h.Lines[from:to]}
		s.OldLines, s.NewLines = oldAt[to]-oldAt[from], newAt[to]-newAt[from]
		return s
	}
	var out []Hunk
	for start := 0; start < len(h.Lines); {
		// lead with up to three context lines already sent
		lead := start
		for lead > 0 && start-lead < 3 && h.Lines[lead-1].Op == ' ' {
			lead--
		}
		if !fits(&Patch{Hunks: []Hunk{sub(lead, start+1)}}) {
			lead = start
		}
		lo, hi := start+1, len(h.Lines) // the longest end in [lo, hi] that fits
		for lo < hi {
			mid := (lo + hi + 1) / 2
			if fits(&Patch{Hunks: []Hunk{sub(lead, mid)}}) {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		out = append(out, sub(lead, lo))
		start = lo
	}
	return out
}
