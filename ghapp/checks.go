package ghapp

import (
	"context"

	"github.com/google/go-github/v56/github"

	"github.com/prq-dev/prq/forge"
)

// CheckRun is the state prq gives a pull request head's check run.
type CheckRun = forge.CheckRun

func output(r CheckRun) *github.CheckRunOutput {
	if r.Title == "" && r.Summary == "" {
		return nil
	}
	return &github.CheckRunOutput{Title: github.String(r.Title), Summary: github.String(r.Summary)}
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// CreateCheckRun creates a check run on a commit and returns its id. It
// needs the App permission checks: write (ErrForbidden without it).
func (c *Client) CreateCheckRun(ctx context.Context, owner, repo string, r CheckRun) (int64, error) {
	cr, resp, err := c.gh.Checks.CreateCheckRun(ctx, owner, repo, github.CreateCheckRunOptions{
		Name: r.Name, HeadSHA: r.HeadSHA, Status: optional(r.Status), Conclusion: optional(r.Conclusion),
		DetailsURL: optional(r.DetailsURL), ExternalID: optional(r.ExternalID), Output: output(r),
	})
	if err != nil {
		return 0, classify("create check run", resp, err)
	}
	return cr.GetID(), nil
}

// UpdateCheckRun changes a check run's status, conclusion and output.
// r.Name is required: go-github always sends the name, and GitHub
// refuses a blank one.
func (c *Client) UpdateCheckRun(ctx context.Context, owner, repo string, id int64, r CheckRun) error {
	_, resp, err := c.gh.Checks.UpdateCheckRun(ctx, owner, repo, id, github.UpdateCheckRunOptions{
		Name: r.Name, Status: optional(r.Status), Conclusion: optional(r.Conclusion),
		DetailsURL: optional(r.DetailsURL), ExternalID: optional(r.ExternalID), Output: output(r),
	})
	return classify("update check run", resp, err)
}

// FindCheckRun returns the id of the newest check run named name on a
// commit, or 0: how a retried job finds the run it created before.
func (c *Client) FindCheckRun(ctx context.Context, owner, repo, sha, name string) (int64, error) {
	res, resp, err := c.gh.Checks.ListCheckRunsForRef(ctx, owner, repo, sha, &github.ListCheckRunsOptions{CheckName: github.String(name)})
	if err != nil {
		return 0, classify("list check runs", resp, err)
	}
	for _, cr := range res.CheckRuns {
		if cr.GetName() == name {
			return cr.GetID(), nil
		}
	}
	return 0, nil
}
