package workers

import (
	"context"
	"errors"
	"log/slog"

	"github.com/prq-dev/prq/forge"
	"github.com/prq-dev/prq/ghapp"
	"github.com/prq-dev/prq/jobs"
)

// GitHubApp hands out an installation's GitHub client (a *ghapp.App).
type GitHubApp interface {
	Client(installation int64) (*ghapp.Client, error)
}

// PRReader reads a pull request: what the planner uses of GitHub.
type PRReader interface {
	PR(ctx context.Context, owner, repo string, n int) (ghapp.PullRequest, error)
	Files(ctx context.Context, owner, repo string, n int) ([]ghapp.File, error)
	Compare(ctx context.Context, owner, repo, base, head string) ([]ghapp.File, error)
	Contents(ctx context.Context, owner, repo, path, ref string) (ghapp.FileContent, error)
}

// PRReaders hands out an installation's PRReader.
type PRReaders interface {
	PRReader(installation int64) (PRReader, error)
}

// ReviewWriter publishes a head's results: what the finalizer uses of
// GitHub. HasReview finds a review by its marker, so a review posted
// before a crash is not posted again.
type ReviewWriter interface {
	UpsertComment(ctx context.Context, owner, repo string, n int, knownID int64, marker, body string) (int64, error)
	HasReview(ctx context.Context, owner, repo string, n int, marker string) (int64, error)
	CreateReview(ctx context.Context, owner, repo string, n int, commit, body string, comments []ghapp.ReviewComment) (int64, error)
	// ReviewThreads, Reply and ResolveThread resolve the threads of
	// findings a push addressed.
	ReviewThreads(ctx context.Context, owner, repo string, n int) ([]ghapp.ReviewThread, error)
	Reply(ctx context.Context, owner, repo string, n int, commentID int64, body string) (int64, error)
	ResolveThread(ctx context.Context, threadID string) error
	// OwnReviewComments and CommentVotes read back the 👍 and 👎 people
	// gave prq's findings (n: the comment's pull request, which GitLab
	// needs).
	OwnReviewComments(ctx context.Context, owner, repo string, n int) ([]forge.OwnComment, error)
	CommentVotes(ctx context.Context, owner, repo string, n int, commentID int64) (forge.Votes, error)
}

// ReviewWriters hands out an installation's ReviewWriter.
type ReviewWriters interface {
	ReviewWriter(installation int64) (ReviewWriter, error)
}

// Replier answers a comment: what the chat responder uses of GitHub.
// HasReply finds a reply by its marker, so a reply posted before a crash
// is not posted again.
type Replier interface {
	Reply(ctx context.Context, owner, repo string, n int, commentID int64, body string) (int64, error)
	Comment(ctx context.Context, owner, repo string, n int, body string) (int64, error)
	HasReply(ctx context.Context, owner, repo string, n int, review bool, marker string) (int64, error)
}

// Repliers hands out an installation's Replier.
type Repliers interface {
	Replier(installation int64) (Replier, error)
}

var (
	_ PRReader     = (*ghapp.Client)(nil)
	_ ReviewWriter = ghForge{}
	_ Replier      = (*ghapp.Client)(nil)
	_ GitHubApp    = (*ghapp.App)(nil)

	_ PRReaders     = Installations{}
	_ ReviewWriters = Installations{}
	_ Repliers      = Installations{}
)

// Installations hands each handler its narrow view of a tenant's forge:
// a GitHub installation's *ghapp.Client, or a GitLab tenant's client.
type Installations struct {
	App GitHubApp
	// GitLab hands out GitLab tenants' clients; nil: none configured.
	GitLab ForgeTenants
}

// PRReader returns the installation's client as a PRReader.
func (i Installations) PRReader(installation int64) (PRReader, error) {
	return i.forge(installation)
}

// ReviewWriter returns the installation's client as a ReviewWriter.
func (i Installations) ReviewWriter(installation int64) (ReviewWriter, error) {
	return i.forge(installation)
}

// Replier returns the installation's client as a Replier.
func (i Installations) Replier(installation int64) (Replier, error) {
	return i.forge(installation)
}

// ghRetry turns GitHub failures into asynq outcomes: rate limits wait as
// told (not a failure), others retry with backoff.
func ghRetry(err error) error {
	var rl *ghapp.RateLimitedError
	if errors.As(err, &rl) {
		return &RetryAfterError{After: rl.RetryAfter, Err: err}
	}
	return err
}

// ghFailed drops the job cleanly when the PR is gone, else retries.
func ghFailed(ctx context.Context, log *slog.Logger, pr jobs.PR, what string, err error) error {
	if errors.Is(err, ghapp.ErrNotFound) {
		log.InfoContext(ctx, "pull request is gone; dropped", "pr", pr.String(), "what", what)
		return nil
	}
	return err
}
