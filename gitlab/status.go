package gitlab

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	gl "gitlab.com/gitlab-org/api/client-go/v2"

	"github.com/prq-dev/prq/forge"
)

// state maps a check run's status and conclusion to a commit status
// state: queued is pending, in_progress running, completed success or
// failed (canceled when cancelled).
func state(r forge.CheckRun) gl.BuildStateValue {
	switch r.Status {
	case "queued":
		return gl.Pending
	case "in_progress":
		return gl.Running
	}
	switch r.Conclusion {
	case "success", "neutral", "skipped":
		return gl.Success
	case "cancelled":
		return gl.Canceled
	}
	return gl.Failed
}

// maxDescription is GitLab's cap on a commit status's description.
const maxDescription = 255

// CreateCheckRun sets the head's commit status named r.Name and returns
// its id.
func (c *Client) CreateCheckRun(ctx context.Context, owner, repo string, r forge.CheckRun) (int64, error) {
	return c.setStatus(ctx, project(owner, repo), r)
}

// UpdateCheckRun moves the head's commit status to r's state. GitLab
// keys a status by commit and name, so r.HeadSHA is required; id is
// GitLab's to replace (a finished status is followed by a new one).
func (c *Client) UpdateCheckRun(ctx context.Context, owner, repo string, _ int64, r forge.CheckRun) error {
	if r.HeadSHA == "" {
		return fmt.Errorf("gitlab: update commit status %q: no head sha", r.Name)
	}
	_, err := c.setStatus(ctx, project(owner, repo), r)
	return err
}

func (c *Client) setStatus(ctx context.Context, pid string, r forge.CheckRun) (int64, error) {
	desc := clip(r.Title, maxDescription)
	opt := &gl.SetCommitStatusOptions{State: state(r), Name: gl.Ptr(r.Name)}
	if desc != "" {
		opt.Description = &desc
	}
	if r.DetailsURL != "" {
		opt.TargetURL = gl.Ptr(r.DetailsURL)
	}
	st, resp, err := c.api.Commits.SetCommitStatus(pid, r.HeadSHA, opt, gl.WithContext(ctx))
	if err == nil {
		return st.ID, nil
	}
	err = c.classify("set commit status", resp, err)
	// the status is in this state already (GitLab refuses a transition
	// to the same state): the write happened, by a retry's earlier try
	if errors.Is(err, forge.ErrUnprocessable) && strings.Contains(err.Error(), "Cannot transition status") {
		return c.FindCheckRun(ctx, "", pid, r.HeadSHA, r.Name)
	}
	return 0, err
}

// FindCheckRun returns the id of the newest commit status named name on
// sha, or 0. owner may be empty with repo the project's full path.
func (c *Client) FindCheckRun(ctx context.Context, owner, repo, sha, name string) (int64, error) {
	pid := repo
	if owner != "" {
		pid = project(owner, repo)
	}
	sts, resp, err := c.api.Commits.GetCommitStatuses(pid, sha, &gl.GetCommitStatusesOptions{Name: &name, All: gl.Ptr(true), ListOptions: gl.ListOptions{PerPage: perPage}}, gl.WithContext(ctx))
	if err != nil {
		return 0, c.classify("list commit statuses", resp, err)
	}
	var id int64
	for _, s := range sts {
		if s.Name == name && s.ID > id {
			id = s.ID
		}
	}
	return id, nil
}

// clip cuts s to at most n bytes, at a rune boundary, marking a cut
// with an ellipsis.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
