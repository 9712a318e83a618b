package fakegithub

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prq-dev/prq/fake/fakegithub/openapi"
)

// Family is a group of GitHub's endpoints that fail together: an API an
// Enterprise Server or a proxy lacks, a permission the App was not
// granted, an outage of one service.
type Family string

// The families of the routes the fake serves.
const (
	FamilyApp            Family = "app"             // the App's own endpoints (JWT)
	FamilyPulls          Family = "pulls"           // a pull request, its files, a comparison
	FamilyIssueComments  Family = "issue-comments"  // conversation comments
	FamilyReviews        Family = "reviews"         // reviews
	FamilyReviewComments Family = "review-comments" // diff comments and replies
	FamilyCheckRuns      Family = "check-runs"      // check runs: create, update, list for a ref
	FamilyContents       Family = "contents"        // a repository's files
	FamilyReactions      Family = "reactions"       // reactions on comments
)

// Route is one endpoint the fake serves, named as GitHub's REST
// description names it (its path template's parameters are the fake's
// own names; their positions are GitHub's).
type Route struct {
	Method, Path string
	Family       Family
	h            http.HandlerFunc
}

// Routes returns every endpoint the fake serves (its own /_fake/ pages
// aside), so a test can check each against GitHub's description.
func (s *Server) Routes() []Route { return s.routes() }

func (s *Server) routes() []Route {
	return []Route{
		{"POST", "/app/installations/{id}/access_tokens", FamilyApp, s.accessToken},
		{"GET", "/app", FamilyApp, s.getApp},
		{"GET", "/app/installations", FamilyApp, s.listInstallations},
		{"POST", "/app-manifests/{code}/conversions", FamilyApp, s.convertManifest},
		{"GET", "/repos/{owner}/{repo}/pulls/{n}", FamilyPulls, s.auth(s.getPR)},
		{"GET", "/repos/{owner}/{repo}/pulls/{n}/files", FamilyPulls, s.auth(s.listFiles)},
		{"GET", "/repos/{owner}/{repo}/compare/{basehead}", FamilyPulls, s.auth(s.compare)},
		{"GET", "/repos/{owner}/{repo}/issues/{n}/comments", FamilyIssueComments, s.auth(s.listComments)},
		{"POST", "/repos/{owner}/{repo}/issues/{n}/comments", FamilyIssueComments, s.auth(s.write(s.createComment))},
		{"PATCH", "/repos/{owner}/{repo}/issues/comments/{id}", FamilyIssueComments, s.auth(s.write(s.editComment))},
		{"POST", "/repos/{owner}/{repo}/pulls/{n}/reviews", FamilyReviews, s.auth(s.write(s.createReview))},
		{"GET", "/repos/{owner}/{repo}/pulls/{n}/reviews", FamilyReviews, s.auth(s.listReviews)},
		{"POST", "/repos/{owner}/{repo}/pulls/{n}/comments/{id}/replies", FamilyReviewComments, s.auth(s.write(s.reply))},
		{"POST", "/repos/{owner}/{repo}/pulls/{n}/comments", FamilyReviewComments, s.auth(s.write(s.createReviewComment))},
		{"GET", "/repos/{owner}/{repo}/pulls/{n}/comments", FamilyReviewComments, s.auth(s.listReviewComments)},
		{"POST", "/repos/{owner}/{repo}/check-runs", FamilyCheckRuns, s.auth(s.needs("checks", s.write(s.createCheckRun)))},
		{"PATCH", "/repos/{owner}/{repo}/check-runs/{id}", FamilyCheckRuns, s.auth(s.needs("checks", s.write(s.updateCheckRun)))},
		{"GET", "/repos/{owner}/{repo}/commits/{ref}/check-runs", FamilyCheckRuns, s.auth(s.needs("checks", s.listCheckRuns))},
		{"POST", "/repos/{owner}/{repo}/issues/comments/{id}/reactions", FamilyReactions, s.auth(s.write(s.react(false)))},
		{"POST", "/repos/{owner}/{repo}/pulls/comments/{id}/reactions", FamilyReactions, s.auth(s.write(s.react(true)))},
		{"GET", "/repos/{owner}/{repo}/pulls/comments/{id}/reactions", FamilyReactions, s.auth(s.listReactions)},
		{"GET", "/repos/{owner}/{repo}/contents/{path...}", FamilyContents, s.auth(s.needs("contents", s.getContents))},
	}
}

// familyFault is how a family misbehaves: every request answers status
// (0: served), after waiting stall (or until the client gives up).
type familyFault struct {
	status int
	stall  time.Duration
}

// FailFamily makes every request to the family answer status, in
// GitHub's error shape, until FailFamily(f, 0): 403 "Resource not
// accessible by integration" (a permission the App lacks), 404 "Not
// Found" (an API that is not there), 422 "Validation Failed" with its
// errors, 429 a secondary rate limit with Retry-After, 5xx "Server Error".
func (s *Server) FailFamily(f Family, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ft := s.faults[f]
	ft.status = status
	s.faults[f] = ft
}

// StallFamily makes every request to the family wait d before it is
// served (or failed), or until the client gives up: a timeout. d 0 ends it.
func (s *Server) StallFamily(f Family, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ft := s.faults[f]
	ft.stall = d
	s.faults[f] = ft
}

// FamilyRequests is how many requests reached the family, failed or not.
func (s *Server) FamilyRequests(f Family) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.familyHits[f]
}

// family counts a request to f and applies f's fault, if any.
func (s *Server) family(f Family, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.familyHits[f]++
		ft := s.faults[f]
		s.mu.Unlock()
		if ft.stall > 0 {
			select {
			case <-time.After(ft.stall):
			case <-r.Context().Done():
				return // the client gave up
			}
		}
		if ft.status == 0 {
			h(w, r)
			return
		}
		familyError(w, f, ft.status)
	}
}

// familyError answers status the way GitHub does for the family.
func familyError(w http.ResponseWriter, f Family, status int) {
	doc := "https://docs.github.com/rest"
	switch status {
	case http.StatusForbidden:
		ghError(w, status, "Resource not accessible by integration")
	case http.StatusNotFound:
		ghError(w, status, "Not Found")
	case http.StatusUnprocessableEntity:
		resource := map[Family]string{FamilyCheckRuns: "CheckRun", FamilyIssueComments: "IssueComment", FamilyReviews: "PullRequestReview",
			FamilyReviewComments: "PullRequestReviewComment", FamilyPulls: "PullRequest", FamilyApp: "Integration"}[f]
		writeJSON(w, status, map[string]any{"message": "Validation Failed", "documentation_url": doc, "status": strconv.Itoa(status),
			"errors": []any{map[string]any{"resource": resource, "code": "invalid", "field": "base"}}})
	case http.StatusTooManyRequests:
		w.Header().Set("Retry-After", "60")
		writeJSON(w, status, map[string]any{"message": "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.",
			"documentation_url": doc + "/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits", "status": "429"})
	default:
		msg := http.StatusText(status)
		if status >= 500 {
			msg = "Server Error"
		}
		if msg == "" {
			msg = fmt.Sprintf("Error %d", status)
		}
		ghError(w, status, msg)
	}
}

// enterpriseKey marks a request made under the Enterprise base path.
type enterpriseKey struct{}

// validBody refuses, as GitHub does (422 "Invalid request."), a body its
// REST description refuses: the schema of the operation (api.github.com's,
// or the newest Enterprise Server's under /api/v3) and the rules it
// states in prose. A refusal counts in the pull request's Rejected.
func (s *Server) validBody(w http.ResponseWriter, r *http.Request, pr string) bool {
	v, err := openapi.Load()
	if err != nil {
		ghError(w, http.StatusInternalServerError, err.Error())
		return false
	}
	d := v.Dotcom()
	if ent, _ := r.Context().Value(enterpriseKey{}).(bool); ent {
		d = v.Enterprise()
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		ghError(w, http.StatusBadRequest, "Problems parsing JSON")
		return false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	refused := d.Refuses(openapi.Request{Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery, ContentType: r.Header.Get("Content-Type"), Body: body})
	if len(refused) == 0 {
		return true
	}
	if len(body) > 0 && !json.Valid(body) {
		ghError(w, http.StatusBadRequest, "Problems parsing JSON")
		return false
	}
	s.mu.Lock()
	s.statsOf(pr).Rejected++
	s.mu.Unlock()
	writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"message": "Invalid request.\n\n" + strings.Join(refused, "\n"),
		"documentation_url": "https://docs.github.com/rest", "status": "422"})
	return false
}
