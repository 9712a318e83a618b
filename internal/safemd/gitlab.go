package safemd

import (
	"regexp"
	"strings"
)

// GitLab makes a note prq is about to post on GitLab inert there too. It
// takes the whole note as prq rendered it (text already passed through
// Text, Line or Cell, and prq's own markup and hidden markers) and adds
// what GitLab reads beyond GitHub:
//
//   - quick actions: a line beginning with "/" (/merge, /close, /approve,
//     /assign …) is run by GitLab with the bot's rights; outside code it
//     is escaped ("\/merge" shows as "/merge"), inside a fenced block it
//     is indented by one space, which GitLab does not run either;
//   - references: @user, @group and @all mentions, #123 issues, !123
//     merge requests, ~label and ~"a label", %milestone and %"a
//     milestone", &123 epics and $123 snippets, with an optional
//     project or group path in front, become code spans.
//
// Code spans, fenced blocks and HTML comments (prq's markers) are kept
// as they are. GitLab is idempotent: its output passed again is unchanged.
func GitLab(note string) string {
	var b strings.Builder
	lines := strings.SplitAfter(note, "\n")
	var para []string
	flush := func() {
		if len(para) > 0 {
			b.WriteString(gitlabInline(strings.Join(para, "")))
			para = para[:0]
		}
	}
	for i := 0; i < len(lines); i++ {
		fch, flen, ok := fenceOpen(lines[i])
		if !ok {
			para = append(para, quickAction(lines[i]))
			continue
		}
		flush()
		b.WriteString(lines[i])
		for i++; i < len(lines); i++ {
			if fenceClose(lines[i], fch, flen) {
				b.WriteString(lines[i])
				break
			}
			if strings.HasPrefix(lines[i], "/") {
				b.WriteString(" ")
			}
			b.WriteString(lines[i])
		}
	}
	flush()
	return b.String()
}

// quickAction escapes the slash of a line GitLab would run as a quick
// action (leading blanks and quote or list markers included, to be
// safe).
func quickAction(line string) string {
	i := 0
	for i < len(line) && strings.IndexByte(" \t>", line[i]) >= 0 {
		i++
	}
	if i < len(line) && line[i] == '/' {
		return line[:i] + `\` + line[i:]
	}
	return line
}

// gitlabRefRe matches what GitLab links or notifies: mentions and
// references, with an optional path in front. &amp; is how Text writes
// an ampersand, which GitLab's reference filters read as "&".
var gitlabRefRe = regexp.MustCompile(`(?:[A-Za-z0-9_](?:[A-Za-z0-9_.\-/]*[A-Za-z0-9_])?)?(?:[#!$]\d+|(?:&amp;|&)\d+|[~%]"[^"\n]*"|[~%][A-Za-z0-9_][A-Za-z0-9_.:\-?]*)|@[A-Za-z0-9_][A-Za-z0-9_.\-/]*`)

// gitlabInline wraps references in code spans outside code spans and
// HTML comments.
func gitlabInline(s string) string {
	var b tickWriter
	for len(s) > 0 {
		tick := nextTick(s)
		com := strings.Index(s, "<!--")
		switch {
		case com >= 0 && (tick < 0 || com < tick):
			end := strings.Index(s[com:], "-->")
			if end < 0 {
				end = len(s) - com - len("-->")
			}
			stop := com + end + len("-->")
			b.write(gitlabRefs(s[:com]))
			b.write(s[com:stop])
			s = s[stop:]
		case tick >= 0:
			b.write(gitlabRefs(s[:tick]))
			s = s[tick:]
			n := 0
			for n < len(s) && s[n] == '`' {
				n++
			}
			if end := closingRun(s[n:], n); end >= 0 {
				b.write(s[:n+end+n])
				s = s[n+end+n:]
				continue
			}
			b.write(s[:n]) // literal backticks (escaped by Text already)
			s = s[n:]
		default:
			b.write(gitlabRefs(s))
			s = ""
		}
	}
	return b.String()
}

func gitlabRefs(s string) string {
	var b tickWriter // a span after an escaped backtick stays apart from it
	at := 0
	for _, m := range gitlabRefRe.FindAllStringIndex(s, -1) {
		b.write(s[at:m[0]])
		if m[0] > 0 && s[m[0]-1] == '\\' {
			b.write(" ") // the backslash must not escape the span's backtick
		}
		b.write(Code(strings.ReplaceAll(s[m[0]:m[1]], "&amp;", "&")))
		at = m[1]
	}
	b.write(s[at:])
	return b.String()
}

// nextTick returns the index of the first backtick that is not escaped
// by a backslash (Text escapes the literal ones), or -1.
func nextTick(s string) int {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++ // the escaped character is literal
		case '`':
			return i
		}
	}
	return -1
}
