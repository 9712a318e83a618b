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

// CreateReview posts one review round at commit, all at once: each
// finding as a draft diff note at its position, the body as a draft
// note, then one bulk publish. Drafts left by a round that died before
// its publish are deleted first (only the bot sees its drafts), so a
// retried round appears once. A finding GitLab places on no line is
// listed in the body instead. It returns the body note's id.
func (c *Client) CreateReview(ctx context.Context, owner, repo string, n int, commit, body string, comments []forge.ReviewComment) (int64, error) {
	pid := project(owner, repo)
	if err := c.dropDrafts(ctx, pid, n); err != nil {
		return 0, err
	}
	var outside []forge.ReviewComment
	if len(comments) > 0 {
		v, err := c.version(ctx, pid, n, commit)
		if err != nil {
			return 0, err
		}
		for _, rc := range comments {
			pos, ok := v.position(rc)
			if !ok {
				outside = append(outside, rc)
				continue
			}
			text := safemd.GitLab(rc.Body)
			_, resp, err := c.api.DraftNotes.CreateDraftNote(pid, int64(n), &gl.CreateDraftNoteOptions{Note: &text, Position: pos}, gl.WithContext(ctx))
			if err = c.classify("create draft note", resp, err); errors.Is(err, forge.ErrUnprocessable) {
				outside = append(outside, rc) // GitLab refused the position
				continue
			}
			if err != nil {
				return 0, err
			}
		}
	}
	text := safemd.GitLab(body + outsideDiff(outside))
	if _, resp, err := c.api.DraftNotes.CreateDraftNote(pid, int64(n), &gl.CreateDraftNoteOptions{Note: &text}, gl.WithContext(ctx)); err != nil {
		return 0, c.classify("create draft note", resp, err)
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

func (c *Client) dropDrafts(ctx context.Context, pid string, n int) error {
	drafts, resp, err := c.api.DraftNotes.ListDraftNotes(pid, int64(n), &gl.ListDraftNotesOptions{ListOptions: gl.ListOptions{PerPage: perPage}}, gl.WithContext(ctx))
	if err != nil {
		return c.classify("list draft notes", resp, err)
	}
	for _, d := range drafts {
		if resp, err := c.api.DraftNotes.DeleteDraftNote(pid, int64(n), d.ID, gl.WithContext(ctx)); err != nil {
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
