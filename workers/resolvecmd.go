package workers

import (
	"context"
	"fmt"
	"strings"

	"github.com/hibiken/asynq"

	"github.com/prq-dev/prq/ghapp"
	"github.com/prq-dev/prq/jobs"
)

// resolve carries out `resolve`: every open thread of the pull request
// that prq started (its root is the App's) and only prq wrote in is
// resolved, one GraphQL resolveReviewThread each through the
// installation's write lane, and the findings they hold are forgotten
// (a later head may raise them again). A thread a person answered in is
// theirs to resolve and stays open. A retry finds the threads resolved
// already and leaves them be, so each is resolved once.
func (r *CommandRunner) resolve(ctx context.Context, c jobs.Command) (string, error) {
	cfg, pr := &r.cfg, c.PR
	gh, err := cfg.GitHub.ReviewWriter(pr.Installation)
	if err != nil {
		return "", fmt.Errorf("%w: %v", asynq.SkipRetry, err)
	}
	threads, err := gh.ReviewThreads(ctx, pr.Owner, pr.Repo, pr.Number)
	if err != nil {
		if graphqlForGood(err) {
			cfg.Log.WarnContext(ctx, "resolve: GitHub refused to list the review threads", "pr", pr.String(), "err", err)
			return "", &refusedCommand{"GitHub refused me this pull request's review threads (its GraphQL API, with the App's pull requests permission), so none was resolved."}
		}
		return "", err
	}
	open, err := cfg.Store.PostedFindings(ctx, pr)
	if err != nil {
		return "", err
	}
	byMarker := map[string]string{}
	for k := range open {
		byMarker[cfg.Markers.Finding(pr.Key(), k)] = k
	}
	resolved, answered := 0, 0
	for _, t := range threads {
		if len(t.Comments) == 0 || !t.Comments[0].Ours {
			continue
		}
		if !t.Resolved {
			if !onlyOurs(t) {
				answered++
				continue
			}
			if err := cfg.Turns.Do(ctx, pr.Installation, PublishWrite, func() error { return gh.ResolveThread(ctx, t.ID) }); err != nil {
				if graphqlForGood(err) {
					cfg.Log.WarnContext(ctx, "resolve: GitHub refused to resolve a thread", "pr", pr.String(), "thread", t.ID, "err", err)
					return "", &refusedCommand{fmt.Sprintf("GitHub refused to resolve my threads (%d resolved before it did).", resolved)}
				}
				return "", err
			}
			resolved++
		}
		if k := findingOf(t.Comments[0].Body, byMarker); k != "" {
			if err := cfg.Store.ClosePostedFinding(ctx, pr, k); err != nil {
				return "", err
			}
		}
	}
	cfg.Log.InfoContext(ctx, "resolve: threads resolved on request", "pr", pr.String(), "resolved", resolved, "answered", answered)
	return resolveAnswer(resolved, answered), nil
}

// onlyOurs reports whether only the App wrote in a thread (a thread with
// more comments than were read has people in it).
func onlyOurs(t ghapp.ReviewThread) bool {
	if t.More {
		return false
	}
	for _, c := range t.Comments {
		if !c.Ours {
			return false
		}
	}
	return true
}

// resolveAnswer says what `resolve` did.
func resolveAnswer(resolved, answered int) string {
	var b strings.Builder
	switch resolved {
	case 0:
		b.WriteString("None of my review threads here was open to resolve.")
	case 1:
		b.WriteString("Resolved 1 of my review threads.")
	default:
		fmt.Fprintf(&b, "Resolved %d of my review threads.", resolved)
	}
	switch answered {
	case 0:
	case 1:
		b.WriteString(" 1 thread a person answered in stays open: theirs to resolve.")
	default:
		fmt.Fprintf(&b, " %d threads people answered in stay open: theirs to resolve.", answered)
	}
	return b.String()
}
