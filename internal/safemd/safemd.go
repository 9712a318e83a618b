// Package safemd renders untrusted text inert in GitHub-flavoured markdown.
//
// Everything prq posts that came from the model, the diff, file paths or
// comments passes through here first: the model can be steered by the code
// it reviews, and paths and comments are written by anyone who can open a
// pull request. Rendered output has no live @mentions (user or team), no
// cross-repository references, no images or other remote content, no raw
// HTML (so no hidden markers and no <details> breaking out of prq's layout),
// and links only into the pull request's own repository (other URLs and
// e-mail addresses are shown as code); zero-width and
// bidirectional control characters are removed. Code spans and fenced code
// blocks are kept (nothing inside them is live), and a fence the text leaves
// open is closed so it cannot swallow what prq writes after it.
//
// It owns escaping only; what prq writes around the text (tables, headings,
// markers) is the caller's.
package safemd

import (
	"regexp"
	"strings"
	"unicode/utf8"
)

// Text returns s as inert markdown. repo ("owner/name", may be empty) is the
// one repository whose github.com links stay links; every other URL is shown
// as code.
func Text(s, repo string) string {
	s = strip(s)
	var b strings.Builder
	lines := strings.SplitAfter(s, "\n")
	var para []string // text lines waiting to be rendered as one paragraph
	flush := func() {
		if len(para) > 0 {
			b.WriteString(inline(strings.Join(para, ""), repo))
			para = para[:0]
		}
	}
	for i := 0; i < len(lines); i++ {
		fch, flen, ok := fenceOpen(lines[i])
		if !ok {
			para = append(para, lines[i])
			continue
		}
		flush()
		// A fenced block: kept verbatim up to its closing fence, or closed
		// by us at the end of the text. The info string is untrusted too.
		b.WriteString(strings.Repeat(string(fch), flen) + infoString(lines[i], fch, flen) + "\n")
		closed := false
		for i++; i < len(lines); i++ {
			if fenceClose(lines[i], fch, flen) {
				b.WriteString(strings.Repeat(string(fch), flen) + "\n")
				closed = true
				break
			}
			b.WriteString(lines[i])
		}
		if !closed {
			if !strings.HasSuffix(b.String(), "\n") {
				b.WriteString("\n")
			}
			b.WriteString(strings.Repeat(string(fch), flen) + "\n")
		}
	}
	flush()
	return b.String()
}

// Line is Text on one line: newlines become spaces, so the result can sit
// in a list item or a sentence without breaking the layout around it.
func Line(s, repo string) string {
	s = strings.Join(strings.Fields(strings.ReplaceAll(strip(s), "\n", " ")), " ")
	return inline(s, repo)
}

// Cell is Line for a table cell: pipes are escaped as GFM requires (inside
// code spans too) so the text cannot add columns or rows.
func Cell(s, repo string) string {
	return strings.ReplaceAll(Line(s, repo), "|", `\|`)
}

// Code returns s as one inline code span (a file path, an identifier):
// shown exactly, never interpreted. Newlines become spaces.
func Code(s string) string {
	s = strings.ReplaceAll(strip(s), "\n", " ")
	s = strings.ReplaceAll(s, "\r", " ")
	if s == "" {
		return "` `"
	}
	longest, run := 0, 0
	for _, r := range s {
		if r == '`' {
			run++
			if run > longest {
				longest = run
			}
		} else {
			run = 0
		}
	}
	ticks := strings.Repeat("`", longest+1)
	if strings.HasPrefix(s, "`") || strings.HasSuffix(s, "`") || (strings.HasPrefix(s, " ") && strings.HasSuffix(s, " ")) {
		s = " " + s + " "
	}
	return ticks + s + ticks
}

// CodeCell is Code for a table cell.
func CodeCell(s string) string { return strings.ReplaceAll(Code(s), "|", `\|`) }

// strip removes characters that hide or reorder text: zero-width spaces and
// joiners, word joiners, the byte-order mark, bidirectional controls, other
// C0/C1 controls except tab and newline, and invalid UTF-8.
func strip(s string) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	s = strings.ReplaceAll(s, "\r\n", "\n")
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\t':
			return r
		case r < 0x20 || (r >= 0x7f && r < 0xa0):
			return -1
		case r >= 0x200b && r <= 0x200f, r >= 0x202a && r <= 0x202e,
			r >= 0x2060 && r <= 0x2064, r >= 0x2066 && r <= 0x2069,
			r == 0xfeff, r == 0x00ad, r == 0x180e:
			return -1
		}
		return r
	}, s)
}

// fenceOpen reports whether line opens a fenced code block (up to three
// spaces of indent, then three or more backticks or tildes).
func fenceOpen(line string) (ch byte, n int, ok bool) {
	t := strings.TrimRight(line, "\n")
	ind := len(t) - len(strings.TrimLeft(t, " "))
	if ind > 3 {
		return 0, 0, false
	}
	t = t[ind:]
	if len(t) < 3 || (t[0] != '`' && t[0] != '~') {
		return 0, 0, false
	}
	ch = t[0]
	for n < len(t) && t[n] == ch {
		n++
	}
	if n < 3 {
		return 0, 0, false
	}
	if ch == '`' && strings.Contains(t[n:], "`") {
		return 0, 0, false // CommonMark: a backtick fence's info has no backtick
	}
	return ch, n, true
}

func fenceClose(line string, ch byte, n int) bool {
	t := strings.TrimRight(line, "\n")
	ind := len(t) - len(strings.TrimLeft(t, " "))
	if ind > 3 {
		return false
	}
	t = strings.TrimRight(t[ind:], " \t")
	if len(t) < n {
		return false
	}
	for i := 0; i < len(t); i++ {
		if t[i] != ch {
			return false
		}
	}
	return true
}

var infoWord = regexp.MustCompile(`^[A-Za-z0-9_+#.-]{1,30}$`)

// infoString keeps a fence's language word when it is a plain word, but
// not "suggestion": on a review comment GitHub would offer the block as a
// change to commit, and prq posts only suggestions it has checked against
// the head (render.Suggestion), never one written into the model's text.
func infoString(line string, ch byte, n int) string {
	t := strings.TrimSpace(strings.TrimRight(line, "\n"))
	t = strings.TrimSpace(strings.TrimLeft(t, string(ch)))
	if f := strings.Fields(t); len(f) > 0 && infoWord.MatchString(f[0]) && !strings.EqualFold(f[0], "suggestion") {
		return f[0]
	}
	return ""
}

// inline renders a run of non-fenced text: code spans are kept, the rest
// is escaped.
func inline(s, repo string) string {
	var b tickWriter
	for len(s) > 0 {
		i := strings.IndexByte(s, '`')
		if i < 0 {
			escape(&b, s, repo)
			break
		}
		escape(&b, s[:i], repo)
		s = s[i:]
		n := 0
		for n < len(s) && s[n] == '`' {
			n++
		}
		if end := closingRun(s[n:], n); end >= 0 {
			body := s[n : n+end]
			// A code span's content is literal; a blank line ends a
			// paragraph (and the span) in CommonMark, so none is kept.
			body = strings.ReplaceAll(body, "\n\n", "\n \n")
			b.write(s[:n] + body + s[:n])
			s = s[n+end+n:]
			continue
		}
		// No closing run of the same length: the backticks are literal.
		b.write(strings.Repeat("\\`", n))
		s = s[n:]
	}
	return b.String()
}

// tickWriter separates pieces with a space where one ends and the next
// begins with a backtick: adjacent runs would merge into one longer run
// and change where code spans open and close.
type tickWriter struct{ strings.Builder }

func (w *tickWriter) write(s string) {
	if s == "" {
		return
	}
	if w.Len() > 0 && s[0] == '`' && w.String()[w.Len()-1] == '`' {
		w.WriteByte(' ')
	}
	w.WriteString(s)
}

// closingRun returns the index in s of a run of exactly n backticks that
// closes a code span, or -1. A blank line ends the search (it ends the
// paragraph, so no span can cross it).
func closingRun(s string, n int) int {
	for i := 0; i < len(s); {
		if strings.HasPrefix(s[i:], "\n\n") || strings.HasPrefix(s[i:], "\n \n") {
			return -1
		}
		if s[i] != '`' {
			i++
			continue
		}
		j := i
		for j < len(s) && s[j] == '`' {
			j++
		}
		if j-i == n {
			return i
		}
		i = j
	}
	return -1
}

var (
	// A URL GitHub would autolink (GFM's extended autolinks).
	urlRe = regexp.MustCompile(`(?i)\b(?:https?://|ftp://|www\.)[^\s<>]+`)
	// An address GitHub would autolink as mailto:.
	emailRe = regexp.MustCompile(`[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}`)
	// @user, @org/team: GitHub links and notifies them.
	mentionRe = regexp.MustCompile(`@[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})(?:/[A-Za-z0-9][A-Za-z0-9_.-]*)?`)
	// owner/repo#123 and owner/repo@sha: cross-references that notify
	// another repository's timeline.
	xrefRe = regexp.MustCompile(`\b[A-Za-z0-9][A-Za-z0-9-]*/[A-Za-z0-9_.-]+(?:#\d+|@[0-9a-fA-F]{7,40})\b`)
	// GH-123 and #123: references to this repository's issues and pull
	// requests, which GitHub links and cross-references.
	issueRe = regexp.MustCompile(`(?i)(?:\bGH-|#)\d+\b`)
	// Characters with a meaning in inline markdown or HTML.
	special = strings.NewReplacer(
		`\`, `\\`, `[`, `\[`, `]`, `\]`, `<`, `&lt;`, `>`, `&gt;`, `&`, `&amp;`,
	)
)

// escape renders plain text: special characters escaped, mentions, cross
// references and foreign URLs turned into code spans.
func escape(b *tickWriter, s, repo string) {
	type span struct{ from, to int }
	var spans []span
	for _, re := range []*regexp.Regexp{urlRe, emailRe, mentionRe, xrefRe, issueRe} {
		for _, m := range re.FindAllStringIndex(s, -1) {
			overlaps := false
			for _, sp := range spans {
				if m[0] < sp.to && sp.from < m[1] {
					overlaps = true
					break
				}
			}
			if !overlaps {
				spans = append(spans, span{m[0], m[1]})
			}
		}
	}
	if len(spans) == 0 {
		b.write(escapeLines(s))
		return
	}
	// Emit in order.
	for i := 1; i < len(spans); i++ {
		for j := i; j > 0 && spans[j].from < spans[j-1].from; j-- {
			spans[j], spans[j-1] = spans[j-1], spans[j]
		}
	}
	at := 0
	for _, sp := range spans {
		b.write(escapeLines(s[at:sp.from]))
		tok := s[sp.from:sp.to]
		if repo != "" && sameRepoURL(tok, repo) {
			b.write(tok)
		} else {
			b.write(Code(tok))
		}
		at = sp.to
	}
	b.write(escapeLines(s[at:]))
}

// escapeLines escapes the characters that make links, images, HTML and
// entities. Emphasis, headings, lists and quotes are harmless and kept.
func escapeLines(s string) string { return special.Replace(s) }

// sameRepoURL reports whether u points into https://github.com/<repo>/.
func sameRepoURL(u, repo string) bool {
	prefix := "https://github.com/" + strings.ToLower(repo) + "/"
	l := strings.ToLower(u)
	if !strings.HasPrefix(l, prefix) {
		return false
	}
	// Nothing that could close the autolink early or smuggle markup.
	return !strings.ContainsAny(u, "()[]<>\"'`\\")
}
