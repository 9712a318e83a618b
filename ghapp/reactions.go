package ghapp

import (
	"context"

	"github.com/google/go-github/v56/github"

	"github.com/prq-dev/prq/forge"
)

// OwnReviewComment is one of the App's own diff comments on a pull
// request (a finding, or a reply in a thread).
type OwnReviewComment = forge.OwnComment

// OwnReviewComments returns the App's own diff comments on a pull
// request, every page of them.
func (c *Client) OwnReviewComments(ctx context.Context, owner, repo string, n int) ([]OwnReviewComment, error) {
	var out []OwnReviewComment
	for page := 1; ; {
		cs, resp, err := c.gh.PullRequests.ListComments(ctx, owner, repo, n, &github.PullRequestListCommentsOptions{ListOptions: github.ListOptions{PerPage: 100, Page: page}})
		if err != nil {
			return nil, classify("list review comments", resp, err)
		}
		for _, cm := range cs {
			if c.ours(cm.GetUser()) {
				out = append(out, OwnReviewComment{ID: cm.GetID(), Body: cm.GetBody()})
			}
		}
		if resp.NextPage == 0 {
			return out, nil
		}
		page = resp.NextPage
	}
}

// Votes are the people's 👍 and 👎 on a comment (forge.CountVotes).
type Votes = forge.Votes

// CommentVotes reads the 👍 and 👎 reactions on a diff comment
// (GET /repos/{owner}/{repo}/pulls/comments/{comment_id}/reactions,
// every page).
func (c *Client) CommentVotes(ctx context.Context, owner, repo string, commentID int64) (Votes, error) {
	var vs []forge.Vote
	for page := 1; ; {
		rs, resp, err := c.gh.Reactions.ListPullRequestCommentReactions(ctx, owner, repo, commentID, &github.ListOptions{PerPage: 100, Page: page})
		if err != nil {
			return Votes{}, classify("list reactions", resp, err)
		}
		for _, r := range rs {
			if u := r.GetUser(); u != nil && !c.ours(u) && (r.GetContent() == "+1" || r.GetContent() == "-1") {
				vs = append(vs, forge.Vote{Who: u.GetLogin(), Up: r.GetContent() == "+1"})
			}
		}
		if resp.NextPage == 0 {
			return forge.CountVotes(vs), nil
		}
		page = resp.NextPage
	}
}
