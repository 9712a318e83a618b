package workers

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/prq-dev/prq/ghapp"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
)

// addressed returns the keys of the open findings a head addressed: an
// earlier review posted them, this head's review did not raise them again,
// and the lines they were about are gone from their file's head side (the
// file's patch at this head, or the file removed). A file of the head
// without a patch (too large for GitHub to send one) or not in the head
// at all tells nothing: its findings stay open.
func addressed(open map[string]store.PostedFinding, what string, files map[int]store.FileData, results []store.Result) []string {
	raised := map[string]bool{}
	for _, r := range results {
		for _, c := range r.Comments {
			raised[c.Key] = true
		}
	}
	byPath := map[string]store.FileData{}
	for _, fd := range files {
		byPath[fd.Path] = fd
	}
	var out []string
	for k, f := range open {
		fd, ok := byPath[f.Path]
		if raised[k] || f.What == what || !ok || f.Lines == "" {
			continue
		}
		if fd.Status == "removed" || (fd.Patch != "" && !headHas(fd.Patch, f.Lines)) {
			out = append(out, k)
		}
	}
	return out
}

// headHas reports whether lines (joined by newlines) are consecutive head
// lines of patch, surrounding spaces ignored.
func headHas(patch, lines string) bool {
	var head strings.Builder
	head.WriteString("\n")
	for _, l := range strings.Split(patch, "\n") {
		if strings.HasPrefix(l, "+") || strings.HasPrefix(l, " ") {
			head.WriteString(strings.TrimSpace(l[1:]) + "\n")
		}
	}
	var want strings.Builder
	want.WriteString("\n")
	for _, l := range strings.Split(lines, "\n") {
		want.WriteString(strings.TrimSpace(l) + "\n")
	}
	return strings.Contains(head.String(), want.String())
}

// resolveFixed resolves the threads of the findings this head addressed
// (addressed), each with one reply, "Addressed in <sha7>.", through the
// installation's write lane. A thread a person wrote in is left open, and
// one resolved already (by a person) is forgotten. The reply carries a
// marker and is looked for before it is posted, so a retry neither
// replies nor resolves twice. GitHub refusing the GraphQL API (no
// permission, an Enterprise Server without it) is logged and leaves the
// threads as they are: it never holds back the head's results.
func (p *Finalizer) resolveFixed(ctx context.Context, gh ReviewWriter, f jobs.Finalize, what string, files map[int]store.FileData, results []store.Result, open map[string]store.PostedFinding) error {
	keys := addressed(open, what, files, results)
	if len(keys) == 0 {
		return nil
	}
	pub, pr := p.cfg.Publications, f.PR
	byMarker := map[string]string{}
	for _, k := range keys {
		byMarker[p.cfg.Markers.Finding(pr.Key(), k)] = k
	}
	threads, err := gh.ReviewThreads(ctx, pr.Owner, pr.Repo, pr.Number)
	if err != nil {
		return p.graphqlRefused(ctx, pr, err)
	}
	found := map[string]bool{}
	for _, t := range threads {
		if len(t.Comments) == 0 || !t.Comments[0].Ours {
			continue
		}
		k := findingOf(t.Comments[0].Body, byMarker)
		if k == "" {
			continue
		}
		found[k] = true
		if err := p.resolveThread(ctx, gh, f, k, t); err != nil {
			return p.graphqlRefused(ctx, pr, err)
		}
	}
	for _, k := range keys {
		if !found[k] {
			// no thread holds it (it went into a review body): nothing to resolve
			if err := pub.ClosePostedFinding(ctx, pr, k); err != nil {
				return err
			}
		}
	}
	return nil
}

// findingOf returns the key of the finding whose marker body holds.
func findingOf(body string, byMarker map[string]string) string {
	for m, k := range byMarker {
		if strings.Contains(body, m) {
			return k
		}
	}
	return ""
}

// resolveThread replies once in the thread of finding k and resolves it,
// unless a person wrote in it; then the finding is forgotten.
func (p *Finalizer) resolveThread(ctx context.Context, gh ReviewWriter, f jobs.Finalize, k string, t ghapp.ReviewThread) error {
	pr, root := f.PR, t.Comments[0].ID
	if !t.Resolved {
		for _, c := range t.Comments {
			if !c.Ours {
				return nil // a person answered: theirs to resolve
			}
		}
		if t.More {
			return nil
		}
		marker := p.cfg.Markers.Reply(pr.Key(), root)
		replied := false
		for _, c := range t.Comments[1:] {
			replied = replied || strings.Contains(c.Body, marker)
		}
		err := p.cfg.Turns.Do(ctx, pr.Installation, PublishWrite, func() error {
			if replied {
				return nil
			}
			_, err := gh.Reply(ctx, pr.Owner, pr.Repo, pr.Number, root, fmt.Sprintf("Addressed in `%s`.\n\n%s\n", short(f.HeadSHA), marker))
			return err
		})
		if err != nil {
			return err
		}
		if err := p.cfg.Turns.Do(ctx, pr.Installation, PublishWrite, func() error { return gh.ResolveThread(ctx, t.ID) }); err != nil {
			return err
		}
		p.cfg.Log.InfoContext(ctx, "finding addressed: thread resolved", "pr", pr.String(), "head", short(f.HeadSHA), "comment", root)
	}
	return p.cfg.Publications.ClosePostedFinding(ctx, pr, k)
}

// graphqlRefused ends resolving for this head when GitHub refuses it for
// good (logged); any other error is returned for a retry.
func (p *Finalizer) graphqlRefused(ctx context.Context, pr jobs.PR, err error) error {
	if graphqlForGood(err) {
		p.cfg.Log.WarnContext(ctx, "resolving addressed findings' threads refused by GitHub: they stay open", "pr", pr.String(), "err", err)
		return nil
	}
	return err
}

// graphqlForGood reports whether GitHub refused a threads request for
// good: no permission, no such thread, or a GraphQL error other than a
// rate limit (an Enterprise Server without the API).
func graphqlForGood(err error) bool {
	var gq *ghapp.GraphQLError
	return errors.Is(err, ghapp.ErrForbidden) || errors.Is(err, ghapp.ErrNotFound) || errors.Is(err, ghapp.ErrUnprocessable) || (errors.As(err, &gq) && gq.Unwrap() == nil && gq.Type != "RATE_LIMITED")
}
