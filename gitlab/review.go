package gitlab

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	gl "gitlab.com/gitlab-org/api/client-go/v2"

	"github.com/prq-dev/prq/diff"
	"github.com/prq-dev/prq/forge"
	"github.com/prq-dev/prq/internal/safemd"
)

// version is a merge request diff version: the shas a diff position
// names, and the diffs its lines live in.
type version struct {
	base, start, head string
	diffs             []*gl.Diff
}

// version finds the merge request's diff version whose head is commit.
func (c *Client) version(ctx context.Context, pid string, n int, commit string) (version, error) {
	vs, resp, err := c.api.MergeRequests.GetMergeRequestDiffVersions(pid, int64(n), &gl.GetMergeRequestDiffVersionsOptions{ListOptions: gl.ListOptions{PerPage: perPage}}, gl.WithContext(ctx))
	if err != nil {
		return version{}, c.classify("list diff versions", resp, err)
	}
	for _, v := range vs {
		if v.HeadCommitSHA != commit {
			continue
		}
		full, resp, err := c.api.MergeRequests.GetSingleMergeRequestDiffVersion(pid, int64(n), v.ID, nil, gl.WithContext(ctx))
		if err != nil {
			return version{}, c.classify("get diff version", resp, err)
		}
		return version{base: full.BaseCommitSHA, start: full.StartCommitSHA, head: full.HeadCommitSHA, diffs: full.Diffs}, nil
	}
	return version{}, fmt.Errorf("gitlab: no diff version of !%d has head %s: %w", n, commit, forge.ErrUnprocessable)
}

// position places a finding on a line GitLab accepts: new_line alone on
// an added line, old_line alone on a deleted one, both on a context
// line; a range adds line_range. ok is false when the line is in no hunk
// of the file's diff at this version.
func (v version) position(rc forge.ReviewComment) (*gl.PositionOptions, bool) {
	var d *gl.Diff
	for _, x := range v.diffs {
		if x.NewPath == rc.Path || (x.DeletedFile && x.OldPath == rc.Path) {
			d = x
			break
		}
	}
	if d == nil {
		return nil, false
	}
	p, err := diff.Parse(strings.TrimRight(d.Diff, "\n"))
	if err != nil {
		return nil, false
	}
	end, ok := findLine(p, rc.Side, rc.Line)
	if !ok {
		return nil, false
	}
	pos := &gl.PositionOptions{PositionType: gl.Ptr("text"), BaseSHA: &v.base, StartSHA: &v.start, HeadSHA: &v.head,
		OldPath: gl.Ptr(d.OldPath), NewPath: gl.Ptr(d.NewPath)}
	setLine(pos, end)
	if rc.StartLine > 0 && rc.StartLine < rc.Line {
		if start, ok := findLine(p, rc.Side, rc.StartLine); ok {
			pos.LineRange = &gl.LineRangeOptions{Start: linePos(d, start), End: linePos(d, end)}
		}
	}
	return pos, true
}

func findLine(p *diff.Patch, side string, n int) (diff.Line, bool) {
	for _, h := range p.Hunks {
		for _, l := range h.Lines {
			if (side == string(diff.Left) && l.Old == n) || (side != string(diff.Left) && l.New == n) {
				return l, true
			}
		}
	}
	return diff.Line{}, false
}

func setLine(pos *gl.PositionOptions, l diff.Line) {
	if l.Op != '+' {
		pos.OldLine = gl.Ptr(int64(l.Old))
	}
	if l.Op != '-' {
		pos.NewLine = gl.Ptr(int64(l.New))
	}
}

// linePos is one end of a line_range: GitLab's line code is the sha1 of
// the file's path, then the old and new line numbers.
func linePos(d *gl.Diff, l diff.Line) *gl.LinePositionOptions {
	sum := sha1.Sum([]byte(d.NewPath))
	lp := &gl.LinePositionOptions{LineCode: gl.Ptr(fmt.Sprintf("%s_%d_%d", hex.EncodeToString(sum[:]), l.Old, l.New)), Type: gl.Ptr("new")}
	if l.Op == '-' {
		lp.Type = gl.Ptr("old")
	}
	if l.Op != '+' {
		lp.OldLine = gl.Ptr(int64(l.Old))
	}
	if l.Op != '-' {
		lp.NewLine = gl.Ptr(int64(l.New))
	}
	return lp
}

// draft is one note of a round: its text and, for a finding, its place.
type draft struct {
	text string
	pos  *gl.PositionOptions
}

// CreateReview posts one review round at commit, all at once: each
// finding as a draft diff note at its position, the body as a draft
// note, then one bulk publish. A round tried again (after a crash or a
// rate limit) keeps the drafts it made already and makes the rest, so it
// converges however few calls GitLab lets through at a time; drafts of
// any other round (only the bot sees its drafts) are deleted first. A
// finding GitLab places on no line is listed in the body instead. It
// returns the body note's id.
func (c *Client) CreateReview(ctx context.Context, owner, repo string, n int, commit, body string, comments []forge.ReviewComment) (int64, error) {
	pid := project(owner, repo)
	var drafts []draft
	var outside []forge.ReviewComment
	if len(comments) > 0 {
		v, err := c.version(ctx, pid, n, commit)
		if err != nil {
			return 0, err
		}
		for _, rc := range comments {
			if pos, ok := v.position(rc); ok {
				drafts = append(drafts, draft{text: safemd.GitLab(suggestion(rc)), pos: pos})
			} else {
				outside = append(outside, rc)
			}
		}
	}
	text := safemd.GitLab(body + outsideDiff(outside))
	have, err := c.keepDrafts(ctx, pid, n, commit, drafts, text)
	if err != nil {
		return 0, err
	}
	refused := false
	for _, d := range drafts {
		if len(have[d.text]) > 0 {
			have[d.text] = have[d.text][1:]
			continue
		}
		_, resp, err := c.api.DraftNotes.CreateDraftNote(pid, int64(n), &gl.CreateDraftNoteOptions{Note: &d.text, Position: d.pos}, gl.WithContext(ctx))
		if err = c.classify("create draft note", resp, err); errors.Is(err, forge.ErrUnprocessable) {
			// GitLab refused the position: the finding goes in the body
			outside, refused = append(outside, forge.ReviewComment{Body: d.text, Path: *d.pos.NewPath, Line: lineOf(d.pos)}), true
			continue
		}
		if err != nil {
			return 0, err
		}
	}
	if refused { // the body changes: its draft made before is not this round's any more
		if err := c.dropDrafts(ctx, pid, n, have[text]); err != nil {
			return 0, err
		}
		text, have[text] = safemd.GitLab(body+outsideDiff(outside)), nil
	}
	if len(have[text]) == 0 {
		if _, resp, err := c.api.DraftNotes.CreateDraftNote(pid, int64(n), &gl.CreateDraftNoteOptions{Note: &text}, gl.WithContext(ctx)); err != nil {
			return 0, c.classify("create draft note", resp, err)
		}
	}
	if resp, err := c.api.DraftNotes.PublishAllDraftNotes(pid, int64(n), gl.WithContext(ctx)); err != nil {
		return 0, c.classify("publish draft notes", resp, err)
	}
	notes, err := c.notes(ctx, pid, n)
	if err != nil {
		return 0, err
	}
	for i := len(notes) - 1; i >= 0; i-- {
		if notes[i].Body == text {
			c.learn(notes[i].Author.ID)
			return notes[i].ID, nil
		}
	}
	return 0, fmt.Errorf("gitlab: published review of !%d not found among its notes", n)
}

func lineOf(pos *gl.PositionOptions) int {
	if pos.NewLine != nil {
		return int(*pos.NewLine)
	}
	if pos.OldLine != nil {
		return int(*pos.OldLine)
	}
	return 0
}

// keepDrafts deletes the bot's drafts that are no part of this round
// (another head's or round's: a diff draft whose text or head differs,
// a general draft other than this round's body) and returns the ids of
// those it keeps, by text.
func (c *Client) keepDrafts(ctx context.Context, pid string, n int, commit string, want []draft, body string) (map[string][]int64, error) {
	wanted := map[string]int{body: 0}
	for _, d := range want {
		wanted[d.text]++
	}
	existing, resp, err := c.api.DraftNotes.ListDraftNotes(pid, int64(n), &gl.ListDraftNotesOptions{ListOptions: gl.ListOptions{PerPage: perPage}}, gl.WithContext(ctx))
	if err != nil {
		return nil, c.classify("list draft notes", resp, err)
	}
	have := map[string][]int64{}
	var stale []int64
	for _, d := range existing {
		general := d.Position == nil && d.Note == body && len(have[body]) == 0
		if general || (d.Position != nil && d.Position.HeadSHA == commit && len(have[d.Note]) < wanted[d.Note]) {
			have[d.Note] = append(have[d.Note], d.ID)
		} else {
			stale = append(stale, d.ID)
		}
	}
	return have, c.dropDrafts(ctx, pid, n, stale)
}

func (c *Client) dropDrafts(ctx context.Context, pid string, n int, ids []int64) error {
	for _, id := range ids {
		if resp, err := c.api.DraftNotes.DeleteDraftNote(pid, int64(n), id, gl.WithContext(ctx)); err != nil {
			if err = c.classify("delete draft note", resp, err); !errors.Is(err, forge.ErrNotFound) {
				return err
			}
		}
	}
	return nil
}

// outsideDiff lists the findings no diff line holds.
func outsideDiff(rcs []forge.ReviewComment) string {
	if len(rcs) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n\n#### Findings outside the diff\n")
	for _, rc := range rcs {
		fmt.Fprintf(&b, "\n- %s line %d: %s\n", safemd.Code(rc.Path), rc.Line, strings.ReplaceAll(strings.TrimSpace(rc.Body), "\n", "\n  "))
	}
	return b.String()
}

// suggestion is a finding's body with its committable suggestion (a
// ```suggestion block, as GitHub takes it: the block replaces the lines
// the comment is on) made GitLab's: a comment on lines StartLine to Line
// sits on Line, so the block replaces the lines above it too
// (```suggestion:-N+0). A block with a line beginning with "/" is shown as
// plain code instead: inside a note's code block such a line is escaped
// (it could be a quick action), and the escape would be committed.
func suggestion(rc forge.ReviewComment) string {
	lines := strings.SplitAfter(rc.Body, "\n")
	for i, l := range lines {
		fence := strings.TrimRight(l, "\n")
		info := strings.TrimLeft(fence, "`")
		if len(fence)-len(info) < 3 || strings.TrimSpace(info) != "suggestion" {
			continue
		}
		ticks := fence[:len(fence)-len(info)]
		spec := "suggestion"
		if rc.StartLine > 0 && rc.StartLine < rc.Line {
			spec = fmt.Sprintf("suggestion:-%d+0", rc.Line-rc.StartLine)
		}
		for _, in := range lines[i+1:] {
			if strings.TrimRight(in, "\n") == ticks {
				break
			}
			if strings.HasPrefix(in, "/") {
				spec = ""
				break
			}
		}
		lines[i] = ticks + spec + l[len(fence):]
		return strings.Join(lines, "")
	}
	return rc.Body
}
