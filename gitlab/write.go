package gitlab

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	gl "gitlab.com/gitlab-org/api/client-go/v2"

	"github.com/prq-dev/prq/forge"
	"github.com/prq-dev/prq/internal/safemd"
)

// notes lists a merge request's notes, oldest first, every page.
func (c *Client) notes(ctx context.Context, pid string, n int) ([]*gl.Note, error) {
	var out []*gl.Note
	opt := &gl.ListMergeRequestNotesOptions{ListOptions: gl.ListOptions{PerPage: perPage, Page: 1}, OrderBy: gl.Ptr("created_at"), Sort: gl.Ptr("asc")}
	for {
		page, resp, err := c.api.Notes.ListMergeRequestNotes(pid, int64(n), opt, gl.WithContext(ctx))
		if err != nil {
			return nil, c.classify("list notes", resp, err)
		}
		out = append(out, page...)
		if resp.NextPage == 0 || resp.NextPage == opt.Page {
			return out, nil
		}
		opt.Page = resp.NextPage
	}
}

// ours finds the bot's newest note whose body holds marker (0: none). A
// note by anyone else never counts: a pasted marker adopts nothing.
func (c *Client) ours(ctx context.Context, pid string, n int, marker string) (int64, error) {
	bot, err := c.bot(ctx)
	if err != nil {
		return 0, err
	}
	notes, err := c.notes(ctx, pid, n)
	if err != nil {
		return 0, err
	}
	for i := len(notes) - 1; i >= 0; i-- {
		if m := notes[i]; !m.System && m.Author.ID == bot && strings.Contains(m.Body, marker) {
			return m.ID, nil
		}
	}
	return 0, nil
}

// UpsertComment writes the merge request's one summary note: the known
// note, else the bot's note holding marker, is updated; else one is
// created.
func (c *Client) UpsertComment(ctx context.Context, owner, repo string, n int, knownID int64, marker, body string) (int64, error) {
	pid, body := project(owner, repo), safemd.GitLab(body)
	if knownID == 0 {
		id, err := c.ours(ctx, pid, n, marker)
		if err != nil {
			return 0, err
		}
		knownID = id
	}
	if knownID != 0 {
		_, resp, err := c.api.Notes.UpdateMergeRequestNote(pid, int64(n), knownID, &gl.UpdateMergeRequestNoteOptions{Body: &body}, gl.WithContext(ctx))
		if err == nil {
			return knownID, nil
		}
		if err = c.classify("update note", resp, err); !errors.Is(err, forge.ErrNotFound) {
			return 0, err
		}
	}
	return c.note(ctx, pid, n, body)
}

func (c *Client) note(ctx context.Context, pid string, n int, body string) (int64, error) {
	m, resp, err := c.api.Notes.CreateMergeRequestNote(pid, int64(n), &gl.CreateMergeRequestNoteOptions{Body: &body}, gl.WithContext(ctx))
	if err != nil {
		return 0, c.classify("create note", resp, err)
	}
	c.learn(m.Author.ID)
	return m.ID, nil
}

// Comment posts a note on the merge request.
func (c *Client) Comment(ctx context.Context, owner, repo string, n int, body string) (int64, error) {
	return c.note(ctx, project(owner, repo), n, safemd.GitLab(body))
}

// HasReview finds a review round by its marker (in its body note).
func (c *Client) HasReview(ctx context.Context, owner, repo string, n int, marker string) (int64, error) {
	return c.ours(ctx, project(owner, repo), n, marker)
}

// HasReply finds a reply by its marker, in a discussion or not.
func (c *Client) HasReply(ctx context.Context, owner, repo string, n int, _ bool, marker string) (int64, error) {
	return c.ours(ctx, project(owner, repo), n, marker)
}

// discussions lists a merge request's discussions, every page.
func (c *Client) discussions(ctx context.Context, pid string, n int) ([]*gl.Discussion, error) {
	var out []*gl.Discussion
	opt := &gl.ListMergeRequestDiscussionsOptions{ListOptions: gl.ListOptions{PerPage: perPage, Page: 1}}
	for {
		page, resp, err := c.api.Discussions.ListMergeRequestDiscussions(pid, int64(n), opt, gl.WithContext(ctx))
		if err != nil {
			return nil, c.classify("list discussions", resp, err)
		}
		out = append(out, page...)
		if resp.NextPage == 0 || resp.NextPage == opt.Page {
			return out, nil
		}
		opt.Page = resp.NextPage
	}
}

// Reply answers in the discussion of note commentID.
func (c *Client) Reply(ctx context.Context, owner, repo string, n int, commentID int64, body string) (int64, error) {
	pid := project(owner, repo)
	ds, err := c.discussions(ctx, pid, n)
	if err != nil {
		return 0, err
	}
	for _, d := range ds {
		for _, m := range d.Notes {
			if m.ID != commentID {
				continue
			}
			b := safemd.GitLab(body)
			r, resp, err := c.api.Discussions.AddMergeRequestDiscussionNote(pid, int64(n), d.ID, &gl.AddMergeRequestDiscussionNoteOptions{Body: &b}, gl.WithContext(ctx))
			if err != nil {
				return 0, c.classify("reply", resp, err)
			}
			c.learn(r.Author.ID)
			return r.ID, nil
		}
	}
	return 0, fmt.Errorf("gitlab: reply: note %d in no discussion of !%d: %w", commentID, n, forge.ErrNotFound)
}

// ReviewThreads lists the merge request's diff discussions. Their ids
// name the project and merge request too, so ResolveThread needs nothing
// else.
func (c *Client) ReviewThreads(ctx context.Context, owner, repo string, n int) ([]forge.ReviewThread, error) {
	pid := project(owner, repo)
	ds, err := c.discussions(ctx, pid, n)
	if err != nil {
		return nil, err
	}
	bot, err := c.bot(ctx)
	if err != nil {
		return nil, err
	}
	var out []forge.ReviewThread
	for _, d := range ds {
		if d.IndividualNote || len(d.Notes) == 0 || d.Notes[0].Type != gl.DiffNote {
			continue
		}
		t := forge.ReviewThread{ID: threadID(pid, n, d.ID), Resolved: d.Notes[0].Resolved}
		for _, m := range d.Notes {
			t.Comments = append(t.Comments, forge.ThreadComment{ID: m.ID, Body: m.Body, Ours: m.Author.ID == bot})
		}
		out = append(out, t)
	}
	return out, nil
}

func threadID(pid string, n int, discussion string) string {
	return pid + "!" + strconv.Itoa(n) + "#" + discussion
}

// ResolveThread resolves a discussion ReviewThreads listed.
func (c *Client) ResolveThread(ctx context.Context, id string) error {
	rest, discussion, ok1 := cutLast(id, "#")
	pid, num, ok2 := cutLast(rest, "!")
	n, err := strconv.ParseInt(num, 10, 64)
	if !ok1 || !ok2 || err != nil || discussion == "" {
		return fmt.Errorf("gitlab: resolve thread: malformed id %q", id)
	}
	_, resp, err := c.api.Discussions.ResolveMergeRequestDiscussion(pid, n, discussion, &gl.ResolveMergeRequestDiscussionOptions{Resolved: gl.Ptr(true)}, gl.WithContext(ctx))
	return c.classify("resolve discussion", resp, err)
}

func cutLast(s, sep string) (before, after string, ok bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

// emoji maps GitHub's reaction contents to GitLab's award emoji names.
var emoji = map[string]string{"+1": "thumbsup", "-1": "thumbsdown", "laugh": "laughing", "hooray": "tada",
	"confused": "confused", "heart": "heart", "rocket": "rocket", "eyes": "eyes"}

// React awards an emoji to note commentID of merge request n, once: an
// award the bot already gave is left as it is.
func (c *Client) React(ctx context.Context, owner, repo string, n int, commentID int64, _ bool, content string) error {
	name, ok := emoji[content]
	if !ok {
		return fmt.Errorf("gitlab: react: no award emoji for %q", content)
	}
	pid := project(owner, repo)
	bot, err := c.bot(ctx)
	if err != nil {
		return err
	}
	awards, resp, err := c.api.AwardEmoji.ListMergeRequestAwardEmojiOnNote(pid, int64(n), commentID, &gl.ListAwardEmojiOptions{ListOptions: gl.ListOptions{PerPage: perPage}}, gl.WithContext(ctx))
	if err != nil {
		return c.classify("list award emoji", resp, err)
	}
	for _, a := range awards {
		if a.Name == name && a.User.ID == bot {
			return nil
		}
	}
	_, resp, err = c.api.AwardEmoji.CreateMergeRequestAwardEmojiOnNote(pid, int64(n), commentID, &gl.CreateAwardEmojiOptions{Name: name}, gl.WithContext(ctx))
	return c.classify("award emoji", resp, err)
}

// OwnReviewComments returns the bot's own diff notes on merge request n
// (findings, and its replies in their discussions), every page.
func (c *Client) OwnReviewComments(ctx context.Context, owner, repo string, n int) ([]forge.OwnComment, error) {
	bot, err := c.bot(ctx)
	if err != nil {
		return nil, err
	}
	notes, err := c.notes(ctx, project(owner, repo), n)
	if err != nil {
		return nil, err
	}
	var out []forge.OwnComment
	for _, m := range notes {
		if !m.System && m.Author.ID == bot && m.Type == gl.DiffNote {
			out = append(out, forge.OwnComment{ID: m.ID, Body: m.Body})
		}
	}
	return out, nil
}

// CommentVotes reads the 👍 (thumbsup) and 👎 (thumbsdown) award emoji on
// note commentID of merge request n, every page, the bot's own left out.
func (c *Client) CommentVotes(ctx context.Context, owner, repo string, n int, commentID int64) (forge.Votes, error) {
	bot, err := c.bot(ctx)
	if err != nil {
		return forge.Votes{}, err
	}
	var vs []forge.Vote
	opt := &gl.ListAwardEmojiOptions{ListOptions: gl.ListOptions{PerPage: perPage, Page: 1}}
	for {
		awards, resp, err := c.api.AwardEmoji.ListMergeRequestAwardEmojiOnNote(project(owner, repo), int64(n), commentID, opt, gl.WithContext(ctx))
		if err != nil {
			return forge.Votes{}, c.classify("list award emoji", resp, err)
		}
		for _, a := range awards {
			if a.User.ID != bot && (a.Name == emoji["+1"] || a.Name == emoji["-1"]) {
				vs = append(vs, forge.Vote{Who: a.User.Username, Up: a.Name == emoji["+1"]})
			}
		}
		if resp.NextPage == 0 || resp.NextPage == opt.Page {
			return forge.CountVotes(vs), nil
		}
		opt.Page = resp.NextPage
	}
}

// AccessLevel returns a user's access level in the project, inherited
// from its groups included (GitLab's members/all): 0 when not a member,
// 30 Developer, 40 Maintainer, 50 Owner.
func (c *Client) AccessLevel(ctx context.Context, owner, repo string, userID int64) (int, error) {
	m, resp, err := c.api.ProjectMembers.GetInheritedProjectMember(project(owner, repo), userID, gl.WithContext(ctx))
	if err != nil {
		err = c.classify("get project member", resp, err)
		if errors.Is(err, forge.ErrNotFound) {
			return 0, nil
		}
		return 0, err
	}
	return int(m.AccessLevel), nil
}
