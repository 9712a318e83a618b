package workers

import (
	"context"
	"fmt"

	"github.com/prq-dev/prq/forge"
	"github.com/prq-dev/prq/ghapp"
	"github.com/prq-dev/prq/jobs"
)

// Forge is the forge port: everything the handlers use of one tenant's
// forge (reading a change request, its diffs and its config; writing
// the summary, a review round, replies, reactions and progress), in the
// forge package's types. A *gitlab.Client is one; GitHub's *ghapp.Client
// is one through ghForge, which adds the merge request number GitLab's
// award emoji need to its reactions.
type Forge interface {
	PRReader
	ReviewWriter
	Replier
	Reactor
	CheckWriter
}

// ForgeTenants hands out a tenant's Forge (GitLab's tenants).
type ForgeTenants interface {
	Forge(tenant int64) (Forge, error)
}

// ghForge is GitHub's client as a Forge: a reaction needs no pull
// request number there.
type ghForge struct{ *ghapp.Client }

func (g ghForge) React(ctx context.Context, owner, repo string, _ int, commentID int64, review bool, content string) error {
	return g.Client.React(ctx, owner, repo, commentID, review, content)
}

// CommentVotes reads a diff comment's 👍 and 👎: GitHub needs no pull
// request number.
func (g ghForge) CommentVotes(ctx context.Context, owner, repo string, _ int, commentID int64) (forge.Votes, error) {
	return g.Client.CommentVotes(ctx, owner, repo, commentID)
}

var _ Forge = ghForge{}

// forge returns the tenant's forge: GitHub's installation client, or
// GitLab's tenant client for a tenant id jobs.GitLabTenant gave.
func (i Installations) forge(tenant int64) (Forge, error) {
	if jobs.ForgeOf(tenant) == jobs.ForgeGitLab {
		if i.GitLab == nil {
			return nil, fmt.Errorf("workers: tenant %d is a GitLab tenant and no GitLab is configured", tenant)
		}
		return i.GitLab.Forge(tenant)
	}
	c, err := i.App.Client(tenant)
	if err != nil {
		return nil, err
	}
	return ghForge{c}, nil
}
