// Package render writes what prq posts on a pull request — the summary
// comment, the review body and the check run's text — within GitHub's
// limits whatever the pull request's size, with every piece of untrusted
// text (model output, paths, reasons) made inert by package safemd.
//
// A summary that does not fit one comment first collapses its per-file
// rows into <details> with each file's text cut short, and then continues
// in further comments, each with its own marker so each is upserted in
// place. Render owns layout and limits only: it does not decide what was
// reviewed, and it does not talk to GitHub.
package render

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/prq-dev/prq/internal/safemd"
)

// Count is n and noun, the noun plural unless n is 1: "1 file",
// "2 files", "0 line comments". Nouns here take an s.
func Count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// MaxBody is GitHub's limit on comment and review bodies, in characters.
const MaxBody = 65536

// MaxCheckText is GitHub's limit on a check run's output.summary and
// output.text, in characters.
const MaxCheckText = 65535

// File is one file's line in the summary.
type File struct {
	Path string
	// Summary is the model's summary of the file (untrusted).
	Summary string
	// Reviewed: a review ran on the file; Comments is how many line
	// comments it made.
	Reviewed bool
	Comments int
	// Note says why the file has no summary or review, or that a result
	// is partial (prq's words, rendered inert all the same).
	Note string
	// Failed: the review or summary failed; Note says how.
	Failed bool
	// Quota: skipped because the installation's token quota is used up.
	Quota bool
	// Fallback: a result of the file was made by a fallback model (Note
	// says which), the one planned could not serve it.
	Fallback bool
}

// Summary is a pull request head's summary comment.
type Summary struct {
	// Repo is "owner/name": links into it stay links.
	Repo string
	// Head is the commit the summary describes.
	Head  string
	Files []File
	// QuotaReset says when the quota resets, when files were skipped.
	QuotaReset string
	// Notice, when set, is a warning under the headline in prq's words
	// (a repository configuration file that could not be used, and why),
	// rendered inert all the same.
	Notice string
	// Marker returns the hidden marker of part i (1-based) of the summary;
	// State is a hidden line recorded in part 1 (reviewed commits).
	Marker func(part int) string
	State  string
	// Cost, when above 0, is what the head's calls cost in dollars, at
	// the models' prices: the footer of part 1 says so.
	Cost float64
	// Walkthrough, when set, is the model's walkthrough of the pull
	// request: part 1 opens with it, rendered inert and cut to
	// WalkthroughCap characters.
	Walkthrough string
}

// WalkthroughCap is the most of a walkthrough a summary shows.
const WalkthroughCap = 3000

// Dollars writes an amount of US dollars for people: cents, or four
// decimals below ten cents.
func Dollars(d float64) string {
	if d < 0.1 {
		return fmt.Sprintf("$%.4f", d)
	}
	return fmt.Sprintf("$%.2f", d)
}

// textCap is how much of a file's summary a collapsed row keeps.
const textCap = 400

// Parts renders the summary as one or more comment bodies, each at most
// limit characters (MaxBody when limit is 0). Part 1 carries the
// headline, the state and the first rows; later parts continue the rows.
func (s Summary) Parts(limit int) []string {
	if limit <= 0 {
		limit = MaxBody
	}
	head := s.headline()
	var summarised, other []string
	for _, f := range s.Files {
		if r, ok := s.row(f, 0); ok {
			summarised = append(summarised, r)
		} else {
			other = append(other, s.item(f))
		}
	}
	// 1. everything in one comment, in full
	if body := s.assemble(head, summarised, other, false); chars(body) <= limit {
		return []string{body}
	}
	// 2. rows collapsed, each file's text cut short
	summarised = summarised[:0]
	for _, f := range s.Files {
		if r, ok := s.row(f, textCap); ok {
			summarised = append(summarised, r)
		}
	}
	if body := s.assemble(head, summarised, other, true); chars(body) <= limit {
		return []string{body}
	}
	// 3. continued in further comments
	return s.split(head, summarised, other, limit)
}

func (s Summary) headline() string {
	var files, reviewed, comments, failed, quota, fallback int
	for _, f := range s.Files {
		files++
		if f.Fallback {
			fallback++
		}
		if f.Reviewed {
			reviewed++
			comments += f.Comments
		}
		if f.Failed {
			failed++
		}
		if f.Quota {
			quota++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "## prq summary\n\n%s at %s", Count(files, "file"), safemd.Code(short(s.Head)))
	if reviewed > 0 {
		fmt.Fprintf(&b, "; reviewed %d with %s", reviewed, Count(comments, "line comment"))
	}
	b.WriteString(".")
	if failed > 0 {
		fmt.Fprintf(&b, " **%d could not be processed** (see below).", failed)
	}
	if quota > 0 {
		fmt.Fprintf(&b, " **%d skipped: this installation's token quota is used up", quota)
		if s.QuotaReset != "" {
			fmt.Fprintf(&b, " until %s", safemd.Line(s.QuotaReset, ""))
		}
		b.WriteString(".**")
	}
	if fallback > 0 {
		fmt.Fprintf(&b, " %d by a fallback model: the one planned could not serve them (see below).", fallback)
	}
	b.WriteString("\n")
	if s.Notice != "" {
		fmt.Fprintf(&b, "\n> [!WARNING]\n> %s\n", safemd.Line(s.Notice, s.Repo))
	}
	if w := strings.TrimSpace(s.Walkthrough); w != "" {
		if utf8.RuneCountInString(w) > WalkthroughCap {
			w = string([]rune(w)[:WalkthroughCap]) + "… (cut short)"
		}
		fmt.Fprintf(&b, "\n### Walkthrough\n\n%s\n", strings.TrimRight(safemd.Text(w, s.Repo), "\n"))
	}
	return b.String()
}

// row is a summarised file's table row; ok is false for a file without a
// summary (it is listed instead).
func (s Summary) row(f File, maxText int) (string, bool) {
	if strings.TrimSpace(f.Summary) == "" {
		return "", false
	}
	text := strings.TrimSpace(f.Summary)
	if maxText > 0 && utf8.RuneCountInString(text) > maxText {
		text = string([]rune(text)[:maxText]) + "… (cut short to fit GitHub's comment limit)"
	}
	review := "not reviewed"
	switch {
	case f.Failed:
		review = "failed: " + f.Note
	case f.Reviewed && f.Comments == 0:
		review = "no problems found"
	case f.Reviewed:
		review = Count(f.Comments, "comment")
	}
	if f.Note != "" && !f.Failed {
		review += " (" + f.Note + ")"
	}
	return "| " + safemd.CodeCell(f.Path) + " | " + safemd.Cell(text, s.Repo) + " | " + safemd.Cell(review, s.Repo) + " |\n", true
}

// item lists a file that has no summary, with why.
func (s Summary) item(f File) string {
	why := f.Note
	if why == "" {
		why = "no summary"
	}
	return "- " + safemd.Code(f.Path) + ": " + safemd.Line(why, s.Repo) + "\n"
}

const tableHead = "| File | Summary | Review |\n|---|---|---|\n"

func (s Summary) assemble(head string, rows, other []string, collapse bool) string {
	var b strings.Builder
	b.WriteString(head)
	if len(rows) > 0 {
		b.WriteString("\n")
		if collapse {
			fmt.Fprintf(&b, "<details><summary>Per-file summaries (%s)</summary>\n\n", Count(len(rows), "file"))
		}
		b.WriteString(tableHead)
		for _, r := range rows {
			b.WriteString(r)
		}
		if collapse {
			b.WriteString("\n</details>\n")
		}
	}
	if len(other) > 0 {
		fmt.Fprintf(&b, "\n<details><summary>Files without a summary (%d)</summary>\n\n", len(other))
		for _, o := range other {
			b.WriteString(o)
		}
		b.WriteString("\n</details>\n")
	}
	b.WriteString(s.footer(1))
	return b.String()
}

func (s Summary) footer(part int) string {
	f := "\n"
	if part == 1 && s.Cost > 0 {
		f += fmt.Sprintf("<sub>The calls of this review cost %s at the models' prices.</sub>\n", Dollars(s.Cost))
	}
	if s.Marker != nil {
		f += s.Marker(part) + "\n"
	}
	if part == 1 && s.State != "" {
		f += s.State + "\n"
	}
	return f
}

// split packs rows into parts of at most limit characters.
func (s Summary) split(head string, rows, other []string, limit int) []string {
	type block struct {
		open, close string // what a part needs around this block's lines
		lines       []string
	}
	blocks := []block{
		{open: "\n<details><summary>Per-file summaries</summary>\n\n" + tableHead, close: "\n</details>\n", lines: rows},
		{open: "\n<details><summary>Files without a summary</summary>\n\n", close: "\n</details>\n", lines: other},
	}
	var parts []string
	var cur strings.Builder
	n := 0 // characters in cur
	write := func(s string) { cur.WriteString(s); n += chars(s) }
	start := func() {
		cur.Reset()
		n = 0
		if len(parts) == 0 {
			write(head)
		} else {
			write(fmt.Sprintf("## prq summary (continued, part %d)\n", len(parts)+1))
		}
	}
	const more = "\n_Continued in the next comment._\n"
	finish := func() {
		parts = append(parts, cur.String()+s.footer(len(parts)+1))
	}
	reserve := func(part int) int { return chars(more) + chars(s.footer(part)) }
	start()
	for _, bl := range blocks {
		if len(bl.lines) == 0 {
			continue
		}
		opened := false
		for _, line := range bl.lines {
			need := chars(line) + chars(bl.close)
			if !opened {
				need += chars(bl.open)
			}
			if n+need+reserve(len(parts)+1) > limit && (opened || n > chars(head)) {
				if opened {
					write(bl.close)
				}
				write(more)
				finish()
				start()
				opened = false
			}
			if !opened {
				write(bl.open)
				opened = true
			}
			if room := limit - n - chars(bl.close) - reserve(len(parts)+1); chars(line) > room {
				line = cutTo(line, room)
			}
			write(line)
		}
		if opened {
			write(bl.close)
		}
	}
	finish()
	return parts
}

// cutTo cuts a rendered line to n characters at most, ending it cleanly.
func cutTo(line string, n int) string {
	const cut = "…\n"
	if n <= chars(cut) {
		return ""
	}
	r := []rune(strings.TrimSuffix(line, "\n"))
	if len(r) > n-chars(cut) {
		r = r[:n-chars(cut)]
	}
	// A cut inside a code span or an escape could leave it open: drop
	// back to the last space.
	s := string(r)
	if i := strings.LastIndex(s, " "); i > 0 {
		s = s[:i]
	}
	return s + cut
}

func chars(s string) int { return utf8.RuneCountInString(s) }

func short(sha string) string {
	if len(sha) > 7 {
		return sha[:7]
	}
	return sha
}

// Finding is a review finding that sits on no line of the diff, or a
// line comment GitHub refused: it goes into the review body.
type Finding struct {
	Path string
	Line int
	Body string // untrusted
}

// Review is the body of a head's review.
type Review struct {
	Repo     string
	Head     string
	Files    int // files reviewed
	Failed   int // files whose review failed (the summary says why)
	Comments int // line comments in the review
	Findings []Finding
	Marker   string
	// StillOpen counts the findings this head's review raised again that
	// an earlier review of the pull request posted and that are still
	// open: they are not posted twice.
	StillOpen int
}

// Body renders the review body within limit characters (MaxBody when 0):
// "no problems found" when the review has nothing to say, so a clean
// review can be told from a missing one, and never when no file's review
// succeeded (Failed says how many did not); the findings that have no line
// under their files' names, cut short with a note when they do not fit.
func (r Review) Body(limit int) string {
	if limit <= 0 {
		limit = MaxBody
	}
	var b strings.Builder
	failed := ""
	if r.Failed > 0 {
		failed = fmt.Sprintf(" **%s could not be reviewed** (see the summary comment).", Count(r.Failed, "file"))
	}
	switch {
	case r.Comments == 0 && len(r.Findings) == 0 && r.Files == 0 && r.Failed > 0:
		// nothing was reviewed: not a clean review
		fmt.Fprintf(&b, "prq could not review the %s at %s: see the summary comment.\n", Count(r.Failed, "file"), safemd.Code(short(r.Head)))
	case r.Comments == 0 && len(r.Findings) == 0 && r.StillOpen > 0:
		fmt.Fprintf(&b, "prq reviewed %s at %s: no new problems found.%s\n", Count(r.Files, "file"), safemd.Code(short(r.Head)), failed)
	case r.Comments == 0 && len(r.Findings) == 0:
		fmt.Fprintf(&b, "prq reviewed %s at %s: no problems found.%s\n", Count(r.Files, "file"), safemd.Code(short(r.Head)), failed)
	default:
		fmt.Fprintf(&b, "prq reviewed %s at %s: %s", Count(r.Files, "file"), safemd.Code(short(r.Head)), Count(r.Comments, "line comment"))
		if len(r.Findings) > 0 {
			fmt.Fprintf(&b, " and %s below", Count(len(r.Findings), "finding"))
		}
		b.WriteString("." + failed + "\n")
	}
	if r.StillOpen > 0 {
		fmt.Fprintf(&b, "\n%s\n", stillOpen(r.StillOpen))
	}
	tail := "\n" + r.Marker + "\n"
	if len(r.Findings) > 0 {
		b.WriteString("\n")
		last := ""
		for i, f := range r.Findings {
			var line strings.Builder
			if f.Path != last {
				line.WriteString("\n**" + safemd.Code(f.Path) + "**\n\n")
				last = f.Path
			}
			where := ""
			if f.Line > 0 {
				where = fmt.Sprintf("line %d: ", f.Line)
			}
			line.WriteString("- " + where + safemd.Line(f.Body, r.Repo) + "\n")
			note := "\n_" + Count(len(r.Findings)-i, "more finding") + " did not fit GitHub's limit._\n"
			if chars(b.String())+chars(line.String())+chars(note)+chars(tail) > limit {
				b.WriteString(note)
				break
			}
			b.WriteString(line.String())
		}
	}
	b.WriteString(tail)
	return b.String()
}

// stillOpen says how many findings an earlier review posted and this one
// did not repeat.
func stillOpen(n int) string {
	if n == 1 {
		return "1 finding of an earlier review is still open and is not repeated."
	}
	return fmt.Sprintf("%d findings of earlier reviews are still open and are not repeated.", n)
}
