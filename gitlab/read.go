package gitlab

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"

	gl "gitlab.com/gitlab-org/api/client-go/v2"

	"github.com/prq-dev/prq/forge"
)

// perPage is the page size of every list: GitLab's maximum.
const perPage = 100

// PR reads a merge request: its head and base as its diff_refs have them,
// its target branch as BaseRef. GitLab's states map to the port's: opened
// is open; closed, merged and locked are closed.
func (c *Client) PR(ctx context.Context, owner, repo string, n int) (forge.PullRequest, error) {
	mr, resp, err := c.api.MergeRequests.GetMergeRequest(project(owner, repo), int64(n), nil, gl.WithContext(ctx))
	if err != nil {
		return forge.PullRequest{}, c.classify("get merge request", resp, err)
	}
	state := "closed"
	if mr.State == "opened" {
		state = "open"
	}
	head := mr.DiffRefs.HeadSha
	if head == "" {
		head = mr.SHA
	}
	out := forge.PullRequest{Number: int(mr.IID), State: state, Draft: mr.Draft, Title: mr.Title, Body: mr.Description,
		HeadSHA: head, BaseSHA: mr.DiffRefs.BaseSha, BaseRef: mr.TargetBranch, Labels: mr.Labels}
	if mr.Author != nil {
		out.Author = mr.Author.Username
	}
	return out, nil
}

// Files lists a merge request's changed files, following every page
// (X-Next-Page). A diff GitLab collapsed or found too large has no
// patch: the planner reports it as skipped.
func (c *Client) Files(ctx context.Context, owner, repo string, n int) ([]forge.File, error) {
	var out []forge.File
	opt := &gl.ListMergeRequestDiffsOptions{ListOptions: gl.ListOptions{PerPage: perPage, Page: 1}}
	for {
		diffs, resp, err := c.api.MergeRequests.ListMergeRequestDiffs(project(owner, repo), int64(n), opt, gl.WithContext(ctx))
		if err != nil {
			return nil, c.classify("list merge request diffs", resp, err)
		}
		for _, d := range diffs {
			out = append(out, toFile(d.OldPath, d.NewPath, d.Diff, d.NewFile, d.DeletedFile, d.RenamedFile, d.TooLarge || d.Collapsed))
		}
		if resp.NextPage == 0 || resp.NextPage == opt.Page {
			return out, nil
		}
		opt.Page = resp.NextPage
	}
}

// Compare lists the files changed between two commits (from the merge
// base of base and head, as GitHub's base...head).
func (c *Client) Compare(ctx context.Context, owner, repo, base, head string) ([]forge.File, error) {
	cmp, resp, err := c.api.Repositories.Compare(project(owner, repo), &gl.CompareOptions{From: &base, To: &head}, gl.WithContext(ctx))
	if err != nil {
		return nil, c.classify("compare", resp, err)
	}
	out := make([]forge.File, 0, len(cmp.Diffs))
	for _, d := range cmp.Diffs {
		out = append(out, toFile(d.OldPath, d.NewPath, d.Diff, d.NewFile, d.DeletedFile, d.RenamedFile, false))
	}
	if cmp.CompareTimeout {
		return out, fmt.Errorf("gitlab: compare %.7s...%.7s: GitLab timed out: %w", base, head, forge.ErrCompareIncomplete)
	}
	return out, nil
}

// toFile is one diff as the port has it. GitLab's diff is a unified diff
// without file headers, as GitHub's patch.
func toFile(oldPath, newPath, patch string, added, deleted, renamed, skipped bool) forge.File {
	f := forge.File{Filename: newPath, Status: "modified"}
	switch {
	case added:
		f.Status = "added"
	case deleted:
		f.Status, f.Filename = "removed", oldPath
	case renamed:
		f.Status = "renamed"
	}
	if skipped || patch == "" {
		return f
	}
	for _, l := range strings.Split(patch, "\n") {
		switch {
		case strings.HasPrefix(l, "+"):
			f.Additions++
		case strings.HasPrefix(l, "-"):
			f.Deletions++
		}
	}
	p := strings.TrimSuffix(patch, "\n")
	f.Patch = &p
	return f
}

// maxInline is the largest file the repository files API is asked for:
// bigger ones are reported too large, as GitHub's contents API does.
const maxInline = 1 << 20

// Contents reads a repository file at ref (the target branch's commit
// for .prq.yaml; never the source branch's). An absent path is
// forge.ErrNotFound.
func (c *Client) Contents(ctx context.Context, owner, repo, path, ref string) (forge.FileContent, error) {
	var opt *gl.GetFileOptions
	if ref != "" {
		opt = &gl.GetFileOptions{Ref: &ref}
	} else {
		opt = &gl.GetFileOptions{Ref: gl.Ptr("HEAD")}
	}
	f, resp, err := c.api.RepositoryFiles.GetFile(project(owner, repo), path, opt, gl.WithContext(ctx))
	if err != nil {
		return forge.FileContent{}, c.classify("get file", resp, err)
	}
	out := forge.FileContent{Path: f.FilePath, SHA: f.BlobID, Size: int(f.Size)}
	if f.Size > maxInline {
		return out, fmt.Errorf("gitlab: get file %s: %d bytes: %w", path, f.Size, forge.ErrTooLarge)
	}
	if f.Encoding != "base64" {
		out.Content = []byte(f.Content)
		return out, nil
	}
	b, err := base64.StdEncoding.DecodeString(f.Content)
	if err != nil {
		return out, fmt.Errorf("gitlab: get file %s: %w", path, err)
	}
	out.Content = b
	return out, nil
}
