// Package forge is the vocabulary of prq's forge port: what the engine
// reads of a change request (a GitHub pull request, a GitLab merge
// request) and writes back, as values no forge's client library owns,
// and the errors the workers branch on whichever forge answered.
//
// It owns the shapes only. It does not call any forge: the adapters do
// (package ghapp for GitHub, package gitlab for GitLab); the workers
// declare the interfaces they use of them (workers.Forge); which forge
// a tenant id belongs to is package jobs's (jobs.ForgeOf).
package forge

import (
	"errors"
	"fmt"
	"time"
)

// PullRequest is what prq needs of a change request.
type PullRequest struct {
	Number           int
	State            string
	Draft            bool
	Title            string
	Body             string
	HeadSHA, BaseSHA string
	// BaseRef is the base (target) branch's name.
	BaseRef     string
	Author      string
	AuthorIsBot bool
	// Labels are the change request's label names.
	Labels []string
}

// FileContent is a repository file read at a commit.
type FileContent struct {
	Path string
	// SHA is the file's blob sha: the same content has the same sha.
	SHA     string
	Size    int
	Content []byte
}

// File is a changed file; Patch is nil for binaries and diffs the forge
// does not send (too large, collapsed).
type File struct {
	Filename  string
	Status    string
	Additions int
	Deletions int
	Patch     *string
}

// ReviewComment is one line comment of a review: Line on Side (RIGHT:
// the new file, LEFT: the old one), StartLine for a range.
type ReviewComment struct {
	Path      string
	Line      int
	StartLine int
	Side      string
	Body      string
}

// ReviewThread is a diff thread of a change request.
type ReviewThread struct {
	ID       string // the thread's id, for ResolveThread
	Resolved bool
	// Comments are the thread's first comments, oldest first (the
	// thread's root is the first).
	Comments []ThreadComment
	// More: the thread has more comments than Comments holds.
	More bool
}

// ThreadComment is one comment of a thread.
type ThreadComment struct {
	ID   int64 // its REST id
	Body string
	// Ours: written by prq's bot account.
	Ours bool
}

// CheckRun is the state prq gives a head's progress (a GitHub check
// run, a GitLab commit status).
type CheckRun struct {
	Name    string
	HeadSHA string
	// Status is queued, in_progress or completed; Conclusion is required
	// with completed (success, neutral, failure, …).
	Status, Conclusion string
	// Title and Summary are the output shown on the forge; Summary is
	// capped at 65,535 characters by GitHub (the caller keeps it within).
	Title, Summary string
	DetailsURL     string
	ExternalID     string
}

// Errors the caller branches on, whichever forge answered.
var (
	ErrNotFound      = errors.New("forge: not found")
	ErrUnprocessable = errors.New("forge: unprocessable")
	// ErrForbidden is a refusal that is not a rate limit: the bot lacks
	// a permission, or the tenant is suspended.
	ErrForbidden = errors.New("forge: forbidden")
	// ErrTooLarge is a file the forge does not send inline: its Size and
	// SHA are still returned.
	ErrTooLarge = errors.New("forge: file too large to read")
	// ErrCompareIncomplete is a comparison of two commits the forge cut
	// short (GitHub's cap on files, GitLab's timeout): files it left out
	// would pass as unchanged.
	ErrCompareIncomplete = errors.New("forge: comparison incomplete")
)

// RateLimitedError is a forge's rate limit: retry after RetryAfter.
type RateLimitedError struct {
	RetryAfter time.Duration
	Secondary  bool
}

func (e *RateLimitedError) Error() string {
	kind := "rate limit"
	if e.Secondary {
		kind = "secondary rate limit"
	}
	return fmt.Sprintf("forge: %s: retry after %s", kind, e.RetryAfter.Round(time.Second))
}

// TransientError is a 5xx or network failure worth retrying.
type TransientError struct{ Err error }

func (e *TransientError) Error() string { return "forge: transient: " + e.Err.Error() }
func (e *TransientError) Unwrap() error { return e.Err }
