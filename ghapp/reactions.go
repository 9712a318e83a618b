package ghapp

import (
	"context"

	"github.com/google/go-github/v56/github"
)

// OwnReviewComment is one of the App's own diff comments on a pull
// request (a finding, or a reply in a thread).
type OwnReviewComment struct {
	ID   int64
	Body string
}

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

// Votes are the people's 👍 and 👎 on a comment, by login: each person
// once, the App's own reactions left out. A person who put both on the
// comment is in neither: their vote says nothing.
type Votes struct {
	Up, Down []string
}

// CommentVotes reads the 👍 and 👎 reactions on a diff comment
// (GET /repos/{owner}/{repo}/pulls/comments/{comment_id}/reactions,
// every page).
func (c *Client) CommentVotes(ctx context.Context, owner, repo string, commentID int64) (Votes, error) {
	var up, down []string
	seen := map[string]bool{}
	for page := 1; ; {
		rs, resp, err := c.gh.Reactions.ListPullRequestCommentReactions(ctx, owner, repo, commentID, &github.ListOptions{PerPage: 100, Page: page})
		if err != nil {
			return Votes{}, classify("list reactions", resp, err)
		}
		for _, r := range rs {
			u := r.GetUser()
			if u == nil || c.ours(u) {
				continue
			}
			who := u.GetLogin()
			switch content := r.GetContent(); {
			case content != "+1" && content != "-1", seen[content+who]:
			case content == "+1":
				seen[content+who] = true
				up = append(up, who)
			default:
				seen[content+who] = true
				down = append(down, who)
			}
		}
		if resp.NextPage == 0 {
			var v Votes
			for _, who := range up {
				if !seen["-1"+who] {
					v.Up = append(v.Up, who)
				}
			}
			for _, who := range down {
				if !seen["+1"+who] {
					v.Down = append(v.Down, who)
				}
			}
			return v, nil
		}
		page = resp.NextPage
	}
}
