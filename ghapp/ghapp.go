// Package ghapp is prq's GitHub adapter: it authenticates as the GitHub
// App (RS256 JWT exchanged for installation tokens, through
// ghinstallation) against GITHUB_API_URL, and offers the handful of calls
// prq makes, with GitHub's failures classified for the caller: rate
// limits with their retry time (v56 maps 403 limits but not 429), 404s,
// 422s and transient errors. It does not pace or retry writes, nor decide
// what to post; the workers do.
package ghapp

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bradleyfalzon/ghinstallation/v2"
	"github.com/google/go-github/v56/github"
	tokengithub "github.com/google/go-github/v88/github" // ghinstallation's

	"github.com/prq-dev/prq/forge"
)

// App is a GitHub App: it hands out per-installation clients.
type App struct {
	id      int64
	key     []byte
	baseURL *url.URL
	tr      http.RoundTripper

	mu      sync.Mutex
	clients map[int64]*Client
	bot     string // "<slug>[bot]", lower case; "" until SetBot
}

// SetBot names the App's bot account by the App's slug: only comments
// and reviews written by "<slug>[bot]" (a user of type Bot) count as
// prq's when a write is found again by its marker. Without it, any Bot
// account's write counts.
func (a *App) SetBot(slug string) {
	a.mu.Lock()
	a.bot = strings.ToLower(strings.TrimSpace(slug))
	if a.bot != "" && !strings.HasSuffix(a.bot, "[bot]") {
		a.bot += "[bot]"
	}
	a.mu.Unlock()
}

func (a *App) botLogin() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.bot
}

// New returns the App. apiURL defaults to https://api.github.com/; an
// Enterprise Server URL includes its /api/v3/ path. tr defaults to
// http.DefaultTransport.
func New(appID int64, privateKeyPEM []byte, apiURL string, tr http.RoundTripper) (*App, error) {
	if appID <= 0 {
		return nil, fmt.Errorf("ghapp: app id must be positive")
	}
	if err := checkKey(privateKeyPEM); err != nil {
		return nil, err
	}
	if apiURL == "" {
		apiURL = "https://api.github.com/"
	}
	u, err := url.Parse(apiURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("ghapp: GITHUB_API_URL %q is not an http(s) URL", apiURL)
	}
	if !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
	}
	if tr == nil {
		tr = http.DefaultTransport
	}
	return &App{id: appID, key: privateKeyPEM, baseURL: u, tr: tr, clients: map[int64]*Client{}}, nil
}

// checkKey reports a private key that cannot sign, without echoing it.
func checkKey(b []byte) error {
	block, _ := pem.Decode(b)
	if block == nil {
		return errors.New("ghapp: the private key is not PEM (expected -----BEGIN RSA PRIVATE KEY-----)")
	}
	if _, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
		return nil
	}
	if _, err := x509.ParsePKCS8PrivateKey(block.Bytes); err == nil {
		return nil
	}
	return errors.New("ghapp: the private key is not an RSA key in PKCS#1 or PKCS#8 form")
}

// Client returns the client of an installation (cached; tokens refresh
// by themselves).
func (a *App) Client(installation int64) (*Client, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c, ok := a.clients[installation]; ok {
		return c, nil
	}
	itr, err := a.Transport(installation)
	if err != nil {
		return nil, err
	}
	gh := github.NewClient(&http.Client{Transport: deadline{next: itr, d: callTimeout}})
	gh.BaseURL = a.baseURL
	gh.UploadURL = a.baseURL
	c := &Client{gh: gh, installation: installation, app: a}
	a.clients[installation] = c
	return c, nil
}

// callTimeout bounds each call to GitHub, its answer's body read.
const callTimeout = 30 * time.Second

// deadline bounds each request and the reading of its answer by d, as
// http.Client.Timeout does, but ends with the body's last byte as well
// as with its Close: go-github replaces an error answer's body after
// reading it and never closes the original, so Client.Timeout's timer
// goroutine would live on until it fired.
type deadline struct {
	next http.RoundTripper
	d    time.Duration
}

func (t deadline) RoundTrip(r *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithTimeout(r.Context(), t.d)
	resp, err := t.next.RoundTrip(r.WithContext(ctx))
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = &cancelAtEnd{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

// cancelAtEnd releases its request's deadline once the body is read to
// its end or closed.
type cancelAtEnd struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelAtEnd) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.cancel()
	}
	return n, err
}

func (b *cancelAtEnd) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// Client calls GitHub as one installation.
type Client struct {
	gh           *github.Client
	installation int64
	app          *App
	botID        atomic.Int64 // the bot's user id, once seen on a write of ours
}

// ours reports whether u is the App's bot account: by user id once known
// (learned from what this client wrote), else by login and type.
func (c *Client) ours(u *github.User) bool {
	if u == nil || u.GetType() != "Bot" {
		return false
	}
	if id := c.botID.Load(); id != 0 {
		return u.GetID() == id
	}
	bot := ""
	if c.app != nil {
		bot = c.app.botLogin()
	}
	return bot == "" || strings.EqualFold(u.GetLogin(), bot)
}

// learn records the bot's user id from a write of ours.
func (c *Client) learn(u *github.User) {
	if u == nil || u.GetID() == 0 || u.GetType() != "Bot" {
		return
	}
	bot := ""
	if c.app != nil {
		bot = c.app.botLogin()
	}
	if bot == "" || strings.EqualFold(u.GetLogin(), bot) {
		c.botID.CompareAndSwap(0, u.GetID())
	}
}

// Errors the caller branches on.
// They are the forge port's (package forge), so the workers branch on
// GitHub's and GitLab's alike.
var (
	ErrNotFound      = forge.ErrNotFound
	ErrUnprocessable = forge.ErrUnprocessable
	// ErrForbidden is a 403 that is not a rate limit: the App lacks a
	// permission, or the installation is suspended.
	ErrForbidden = forge.ErrForbidden
)

// InstallationRefusedError is GitHub refusing an installation's token:
// 404 (the App was uninstalled) or 403 (the installation is suspended).
// It is permanent for the installation until it is installed or
// unsuspended again: retrying cannot help.
type InstallationRefusedError struct {
	Installation int64
	Status       int
}

func (e *InstallationRefusedError) Error() string {
	return fmt.Sprintf("ghapp: GitHub refuses installation %d a token (%d %s)", e.Installation, e.Status, http.StatusText(e.Status))
}

// Reason is a short word for the refusal: "uninstalled" or "suspended".
func (e *InstallationRefusedError) Reason() string {
	if e.Status == http.StatusNotFound {
		return "uninstalled"
	}
	return "suspended"
}

// RateLimitedError is a primary or secondary rate limit: retry after RetryAfter.
type RateLimitedError = forge.RateLimitedError

// TransientError is a 5xx or network failure worth retrying.
type TransientError = forge.TransientError

// classify maps go-github's errors to prq's.
func classify(op string, resp *github.Response, err error) error {
	if err == nil {
		return nil
	}
	var rle *github.RateLimitError
	var abuse *github.AbuseRateLimitError
	var mint *ghinstallation.HTTPError
	if errors.As(err, &mint) && mint.Response != nil &&
		(mint.Response.StatusCode == http.StatusNotFound || mint.Response.StatusCode == http.StatusForbidden) &&
		mint.Response.Header.Get("Retry-After") == "" && mint.Response.Header.Get("X-RateLimit-Remaining") != "0" {
		return fmt.Errorf("%s: %w", op, &InstallationRefusedError{Installation: mint.InstallationID, Status: mint.Response.StatusCode})
	}
	switch {
	case errors.As(err, &abuse):
		d := time.Minute
		if abuse.RetryAfter != nil {
			d = *abuse.RetryAfter
		}
		return fmt.Errorf("%s: %w", op, &RateLimitedError{RetryAfter: d, Secondary: true})
	case errors.As(err, &rle):
		d := time.Until(rle.Rate.Reset.Time)
		if d <= 0 {
			d = time.Minute
		}
		return fmt.Errorf("%s: %w", op, &RateLimitedError{RetryAfter: d})
	}
	if resp != nil && resp.Response != nil {
		switch code := resp.StatusCode; {
		case code == http.StatusTooManyRequests,
			code == http.StatusForbidden && (resp.Header.Get("Retry-After") != "" || strings.Contains(strings.ToLower(err.Error()), "rate limit")):
			return fmt.Errorf("%s: %w", op, &RateLimitedError{RetryAfter: retryAfter(resp.Response), Secondary: true})
		case code == http.StatusNotFound:
			return fmt.Errorf("%s: %w", op, ErrNotFound)
		case code == http.StatusForbidden:
			return fmt.Errorf("%s: %w: %v", op, ErrForbidden, err)
		case code == http.StatusUnprocessableEntity:
			return fmt.Errorf("%s: %w: %v", op, ErrUnprocessable, err)
		case code >= 500:
			return fmt.Errorf("%s: %w", op, &TransientError{Err: err})
		}
		return fmt.Errorf("%s: %w", op, err)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w", op, err)
	}
	return fmt.Errorf("%s: %w", op, &TransientError{Err: err})
}

// Status returns the HTTP status GitHub answered a failed call of a
// Client with (429 for a rate limit, whichever status carried it), or 0
// when no answer came (a timeout, a network failure) or err is not a
// GitHub failure.
func Status(err error) int {
	var rl *RateLimitedError
	var er *github.ErrorResponse
	switch {
	case err == nil:
		return 0
	case errors.As(err, &rl):
		return http.StatusTooManyRequests
	case errors.Is(err, ErrForbidden):
		return http.StatusForbidden
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, ErrUnprocessable):
		return http.StatusUnprocessableEntity
	case errors.As(err, &er) && er.Response != nil:
		return er.Response.StatusCode
	}
	return 0
}

// retryAfter reads Retry-After or x-ratelimit-reset; else GitHub's advice: 60s.
func retryAfter(r *http.Response) time.Duration {
	if s, err := strconv.Atoi(strings.TrimSpace(r.Header.Get("Retry-After"))); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := strconv.ParseInt(r.Header.Get("X-RateLimit-Reset"), 10, 64); err == nil {
		if d := time.Until(time.Unix(t, 0)); d > 0 {
			return d
		}
	}
	return time.Minute
}

// PullRequest is what prq needs of a PR.
type PullRequest = forge.PullRequest

// PR fetches a pull request.
func (c *Client) PR(ctx context.Context, owner, repo string, n int) (PullRequest, error) {
	pr, resp, err := c.gh.PullRequests.Get(ctx, owner, repo, n)
	if err != nil {
		return PullRequest{}, classify("get pull request", resp, err)
	}
	var labels []string
	for _, l := range pr.Labels {
		labels = append(labels, l.GetName())
	}
	return PullRequest{Number: pr.GetNumber(), State: pr.GetState(), Draft: pr.GetDraft(), Title: pr.GetTitle(), Body: pr.GetBody(),
		HeadSHA: pr.GetHead().GetSHA(), BaseSHA: pr.GetBase().GetSHA(), BaseRef: pr.GetBase().GetRef(), Author: pr.GetUser().GetLogin(),
		AuthorIsBot: pr.GetUser().GetType() == "Bot", Labels: labels}, nil
}

// FileContent is a repository file read through the contents API.
type FileContent = forge.FileContent

// ErrTooLarge is a file the contents API does not send inline (over 1
// MB): its Size and SHA are still returned.
var ErrTooLarge = forge.ErrTooLarge

// Contents reads a file of a repository at ref (a commit sha or a
// branch; "" for the default branch). A path that is absent, or a
// directory, is ErrNotFound.
func (c *Client) Contents(ctx context.Context, owner, repo, path, ref string) (FileContent, error) {
	fc, dir, resp, err := c.gh.Repositories.GetContents(ctx, owner, repo, path, &github.RepositoryContentGetOptions{Ref: ref})
	if err != nil {
		return FileContent{}, classify("get contents", resp, err)
	}
	if fc == nil || dir != nil || fc.GetType() != "file" {
		return FileContent{}, fmt.Errorf("get contents %s: not a file: %w", path, ErrNotFound)
	}
	out := FileContent{Path: fc.GetPath(), SHA: fc.GetSHA(), Size: fc.GetSize()}
	if fc.GetEncoding() == "none" {
		return out, fmt.Errorf("get contents %s: %d bytes: %w", path, out.Size, ErrTooLarge)
	}
	text, err := fc.GetContent()
	if err != nil {
		return out, fmt.Errorf("get contents %s: %w", path, err)
	}
	out.Content = []byte(text)
	return out, nil
}

// File is a changed file; Patch is nil for binaries and huge files.
type File = forge.File

func toFiles(in []*github.CommitFile) []File {
	out := make([]File, 0, len(in))
	for _, f := range in {
		out = append(out, File{Filename: f.GetFilename(), Status: f.GetStatus(), Additions: f.GetAdditions(), Deletions: f.GetDeletions(), Patch: f.Patch})
	}
	return out
}

// MaxFiles is GitHub's cap on a PR's listed files.
const MaxFiles = 3000

// Files lists a PR's files, every page (100 a page), up to GitHub's 3,000.
func (c *Client) Files(ctx context.Context, owner, repo string, n int) ([]File, error) {
	var out []File
	opt := &github.ListOptions{PerPage: 100}
	for {
		fs, resp, err := c.gh.PullRequests.ListFiles(ctx, owner, repo, n, opt)
		if err != nil {
			return nil, classify("list files", resp, err)
		}
		out = append(out, toFiles(fs)...)
		if resp.NextPage == 0 || len(out) >= MaxFiles {
			break
		}
		opt.Page = resp.NextPage
	}
	if len(out) > MaxFiles {
		out = out[:MaxFiles]
	}
	return out, nil
}

// MaxCompareFiles is GitHub's cap on the files one comparison lists
// (for the whole comparison, on its first page; later pages page its
// commits).
const MaxCompareFiles = 300

// ErrCompareTruncated says a comparison listed GitHub's maximum of files:
// others may have changed too, so the caller cannot tell what is unchanged.
var ErrCompareTruncated = forge.ErrCompareIncomplete

// Compare lists the files changed between two commits, following every
// page. It returns ErrCompareTruncated (with the files listed) when
// GitHub's cap may have cut the list.
func (c *Client) Compare(ctx context.Context, owner, repo, base, head string) ([]File, error) {
	var out []File
	opt := &github.ListOptions{PerPage: 100}
	for {
		cmp, resp, err := c.gh.Repositories.CompareCommits(ctx, owner, repo, base, head, opt)
		if err != nil {
			return nil, classify("compare", resp, err)
		}
		out = append(out, toFiles(cmp.Files)...)
		if resp.NextPage == 0 || resp.NextPage == opt.Page {
			break
		}
		opt.Page = resp.NextPage
	}
	if len(out) >= MaxCompareFiles {
		return out, fmt.Errorf("compare %s...%s: %d files: %w", short(base), short(head), len(out), ErrCompareTruncated)
	}
	return out, nil
}

func short(sha string) string {
	if len(sha) > 7 {
		return sha[:7]
	}
	return sha
}

// UpsertComment edits the PR's comment holding marker, or creates one.
func (c *Client) UpsertComment(ctx context.Context, owner, repo string, n int, knownID int64, marker, body string) (int64, error) {
	id := knownID
	if id == 0 {
		opt := &github.IssueListCommentsOptions{ListOptions: github.ListOptions{PerPage: 100}}
		for {
			cs, resp, err := c.gh.Issues.ListComments(ctx, owner, repo, n, opt)
			if err != nil {
				return 0, classify("list comments", resp, err)
			}
			for _, cm := range cs {
				// only the App's own comment: anyone can paste a marker
				if c.ours(cm.GetUser()) && strings.Contains(cm.GetBody(), marker) {
					id = cm.GetID()
				}
			}
			if id != 0 || resp.NextPage == 0 {
				break
			}
			opt.Page = resp.NextPage
		}
	}
	if id != 0 {
		_, resp, err := c.gh.Issues.EditComment(ctx, owner, repo, id, &github.IssueComment{Body: &body})
		if err == nil {
			return id, nil
		}
		if cerr := classify("edit comment", resp, err); !errors.Is(cerr, ErrNotFound) {
			return 0, cerr
		}
	}
	cm, resp, err := c.gh.Issues.CreateComment(ctx, owner, repo, n, &github.IssueComment{Body: &body})
	if err != nil {
		return 0, classify("create comment", resp, err)
	}
	c.learn(cm.GetUser())
	return cm.GetID(), nil
}

// ReviewComment is one line comment of a review.
type ReviewComment = forge.ReviewComment

// CreateReview submits one review with line comments (Line/Side, and
// StartLine/StartSide for ranges; never the deprecated Position).
func (c *Client) CreateReview(ctx context.Context, owner, repo string, n int, commit, body string, comments []ReviewComment) (int64, error) {
	req := &github.PullRequestReviewRequest{CommitID: &commit, Body: &body, Event: github.String("COMMENT")}
	for _, rc := range comments {
		d := &github.DraftReviewComment{Path: github.String(rc.Path), Body: github.String(rc.Body), Line: github.Int(rc.Line), Side: github.String(rc.Side)}
		if rc.StartLine > 0 && rc.StartLine < rc.Line {
			d.StartLine = github.Int(rc.StartLine)
			d.StartSide = github.String(rc.Side)
		}
		req.Comments = append(req.Comments, d)
	}
	rv, resp, err := c.gh.PullRequests.CreateReview(ctx, owner, repo, n, req)
	if err != nil {
		return 0, classify("create review", resp, err)
	}
	c.learn(rv.GetUser())
	return rv.GetID(), nil
}

// Reply answers in a review comment's thread.
func (c *Client) Reply(ctx context.Context, owner, repo string, n int, commentID int64, body string) (int64, error) {
	cm, resp, err := c.gh.PullRequests.CreateCommentInReplyTo(ctx, owner, repo, n, body, commentID)
	if err != nil {
		return 0, classify("reply", resp, err)
	}
	return cm.GetID(), nil
}

// written is a comment as HasReply reads it.
type written struct {
	id   int64
	user *github.User
	body string
}

// HasReply returns the id of the App's own reply holding marker, or 0:
// among the PR's review comments when review is set (a reply in a diff
// thread), else among its conversation comments. A reply posted before a
// crash is found again, so it is not posted twice.
func (c *Client) HasReply(ctx context.Context, owner, repo string, n int, review bool, marker string) (int64, error) {
	for page := 1; ; {
		var bodies []written
		var resp *github.Response
		var err error
		if review {
			var cs []*github.PullRequestComment
			cs, resp, err = c.gh.PullRequests.ListComments(ctx, owner, repo, n, &github.PullRequestListCommentsOptions{ListOptions: github.ListOptions{PerPage: 100, Page: page}})
			for _, cm := range cs {
				bodies = append(bodies, written{cm.GetID(), cm.GetUser(), cm.GetBody()})
			}
		} else {
			var cs []*github.IssueComment
			cs, resp, err = c.gh.Issues.ListComments(ctx, owner, repo, n, &github.IssueListCommentsOptions{ListOptions: github.ListOptions{PerPage: 100, Page: page}})
			for _, cm := range cs {
				bodies = append(bodies, written{cm.GetID(), cm.GetUser(), cm.GetBody()})
			}
		}
		if err != nil {
			return 0, classify("list replies", resp, err)
		}
		for _, b := range bodies {
			if c.ours(b.user) && strings.Contains(b.body, marker) {
				return b.id, nil
			}
		}
		if resp.NextPage == 0 {
			return 0, nil
		}
		page = resp.NextPage
	}
}

// Comment posts a conversation comment.
func (c *Client) Comment(ctx context.Context, owner, repo string, n int, body string) (int64, error) {
	cm, resp, err := c.gh.Issues.CreateComment(ctx, owner, repo, n, &github.IssueComment{Body: &body})
	if err != nil {
		return 0, classify("comment", resp, err)
	}
	return cm.GetID(), nil
}

// Transport returns the installation's token-minting transport (for
// callers that need the raw token, such as tests of other clients).
func (a *App) Transport(installation int64) (*ghinstallation.Transport, error) {
	itr, err := ghinstallation.New(a.tr, a.id, installation, a.key)
	if err != nil {
		return nil, fmt.Errorf("ghapp: installation %d: %w", installation, err)
	}
	itr.BaseURL = strings.TrimSuffix(a.baseURL.String(), "/")
	// no options: the body {} GitHub's description has, not the JSON null
	// ghinstallation sends for none
	itr.InstallationTokenOptions = &tokengithub.InstallationTokenOptions{}
	return itr, nil
}

// BaseURL returns the API base URL the App calls.
func (a *App) BaseURL() string { return a.baseURL.String() }

// HasReview returns the id of the PR's review whose body holds marker, or 0.
func (c *Client) HasReview(ctx context.Context, owner, repo string, n int, marker string) (int64, error) {
	opt := &github.ListOptions{PerPage: 100}
	for {
		rs, resp, err := c.gh.PullRequests.ListReviews(ctx, owner, repo, n, opt)
		if err != nil {
			return 0, classify("list reviews", resp, err)
		}
		for _, r := range rs {
			if c.ours(r.GetUser()) && strings.Contains(r.GetBody(), marker) {
				return r.GetID(), nil
			}
		}
		if resp.NextPage == 0 {
			return 0, nil
		}
		opt.Page = resp.NextPage
	}
}

// Reactions prq puts on a comment that gave it a command.
const (
	ReactionTaken   = "eyes"     // the command was taken
	ReactionDone    = "rocket"   // it was carried out
	ReactionRefused = "confused" // it was refused
)

// React puts a reaction (eyes, rocket, confused, …) on a comment: a
// conversation comment, or a diff comment when review is true. Reacting
// twice with the same content changes nothing (GitHub answers 200).
func (c *Client) React(ctx context.Context, owner, repo string, commentID int64, review bool, content string) error {
	var resp *github.Response
	var err error
	if review {
		_, resp, err = c.gh.Reactions.CreatePullRequestCommentReaction(ctx, owner, repo, commentID, content)
	} else {
		_, resp, err = c.gh.Reactions.CreateIssueCommentReaction(ctx, owner, repo, commentID, content)
	}
	return classify("react", resp, err)
}
