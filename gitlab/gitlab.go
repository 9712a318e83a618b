// Package gitlab is prq's GitLab adapter: it reads merge requests and
// writes prq's notes, diff discussions, replies, award emoji and commit
// statuses through GitLab's REST API (the official client), on GitLab.com
// or a self-managed instance, each tenant with its own group or project
// access token. GitLab's failures are classified as the forge port's
// (package forge): 429 with Retry-After or RateLimit-Reset is a
// *forge.RateLimitedError, so waits go through the workers' write lane
// instead of sleeping here.
//
// Everything it posts is made inert for GitLab first (safemd.GitLab):
// quick actions, mentions and references in model output would otherwise
// run with the bot's rights. It does not decide what to post (the
// workers do) nor receive webhooks (package webhook does).
package gitlab

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	gl "gitlab.com/gitlab-org/api/client-go/v2"
	"golang.org/x/time/rate"

	"github.com/prq-dev/prq/forge"
	"github.com/prq-dev/prq/jobs"
)

// Tenant is one GitLab tenant: a top-level group (or a project) whose
// merge requests prq reviews, with the access token of its bot user.
type Tenant struct {
	// ID is the group's (or project's) GitLab id; its prq tenant id is
	// jobs.GitLabTenant(ID).
	ID int64
	// Path is the group's full path ("acme") or the project's
	// ("acme/api"): webhook deliveries of projects under it are its.
	Path string
	// Token is the group or project access token. Required.
	Token string
}

// Config configures the adapter.
type Config struct {
	// BaseURL is GitLab's address (its API is under /api/v4). Defaults
	// to https://gitlab.com; a self-managed instance sets its own.
	BaseURL string
	Tenants []Tenant
	// Transport carries every request. Defaults to http.DefaultTransport.
	Transport http.RoundTripper
	// Timeout bounds each request. Defaults to 30s.
	Timeout time.Duration
	// NowFunc is the clock that turns RateLimit-Reset into a wait.
	// Defaults to time.Now.
	NowFunc func() time.Time
}

// Tenants hands out each tenant's client.
type Tenants struct {
	cfg     Config
	mu      sync.Mutex
	clients map[int64]*Client
	byID    map[int64]Tenant
}

// New checks the configuration; clients are built on first use.
func New(cfg Config) (*Tenants, error) {
	if cfg.BaseURL == "" {
		cfg.BaseURL = "https://gitlab.com"
	}
	if cfg.Transport == nil {
		cfg.Transport = http.DefaultTransport
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.NowFunc == nil {
		cfg.NowFunc = time.Now
	}
	if !strings.HasPrefix(cfg.BaseURL, "http://") && !strings.HasPrefix(cfg.BaseURL, "https://") {
		return nil, fmt.Errorf("gitlab: BaseURL %q must start with http:// or https://", cfg.BaseURL)
	}
	t := &Tenants{cfg: cfg, clients: map[int64]*Client{}, byID: map[int64]Tenant{}}
	for i, tn := range cfg.Tenants {
		id, err := jobs.GitLabTenant(tn.ID)
		if err != nil {
			return nil, fmt.Errorf("gitlab: tenants[%d]: %w", i, err)
		}
		switch {
		case tn.Token == "":
			return nil, fmt.Errorf("gitlab: tenants[%d] (%s): token is required", i, tn.Path)
		case strings.Trim(tn.Path, "/") == "":
			return nil, fmt.Errorf("gitlab: tenants[%d]: path is required", i)
		}
		if _, dup := t.byID[id]; dup {
			return nil, fmt.Errorf("gitlab: tenants[%d]: id %d configured twice", i, tn.ID)
		}
		tn.Path = strings.Trim(tn.Path, "/")
		t.byID[id] = tn
	}
	return t, nil
}

// ErrUnknownTenant is a tenant id no configured tenant has.
var ErrUnknownTenant = errors.New("gitlab: unknown tenant")

// Client returns the tenant's client.
func (t *Tenants) Client(tenant int64) (*Client, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c, ok := t.clients[tenant]; ok {
		return c, nil
	}
	tn, ok := t.byID[tenant]
	if !ok {
		return nil, fmt.Errorf("%w: %d", ErrUnknownTenant, tenant)
	}
	api, err := gl.NewClient(tn.Token,
		gl.WithBaseURL(strings.TrimRight(t.cfg.BaseURL, "/")+"/api/v4"),
		gl.WithHTTPClient(&http.Client{Transport: t.cfg.Transport, Timeout: t.cfg.Timeout}),
		// a 429 goes back to the workers, which wait in their write lane;
		// the client's own retries and limiter would sleep in a job
		gl.WithoutRetries(),
		gl.WithCustomLimiter(rate.NewLimiter(rate.Inf, 0)),
	)
	if err != nil {
		return nil, fmt.Errorf("gitlab: client of tenant %s: %w", tn.Path, err)
	}
	c := &Client{api: api, now: t.cfg.NowFunc}
	t.clients[tenant] = c
	return c, nil
}

// Client is one tenant's GitLab.
type Client struct {
	api *gl.Client
	now func() time.Time
	// botID is the bot user's id, learned from the first note it wrote
	// (a note of it found by marker counts too).
	mu    sync.Mutex
	botID int64
}

func (c *Client) learn(id int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.botID == 0 {
		c.botID = id
	}
}

// bot returns the bot user's id, asking GitLab (GET /user) the first
// time.
func (c *Client) bot(ctx context.Context) (int64, error) {
	c.mu.Lock()
	id := c.botID
	c.mu.Unlock()
	if id != 0 {
		return id, nil
	}
	u, resp, err := c.api.Users.CurrentUser(gl.WithContext(ctx))
	if err != nil {
		return 0, c.classify("get current user", resp, err)
	}
	c.learn(u.ID)
	return u.ID, nil
}

// project is the API's project id: the URL-encoded full path.
func project(owner, repo string) string { return owner + "/" + repo }

// classify maps the client's errors to the forge port's.
func (c *Client) classify(op string, resp *gl.Response, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("gitlab: %s: %w", op, err)
	}
	if resp == nil || resp.Response == nil {
		return fmt.Errorf("gitlab: %s: %w", op, &forge.TransientError{Err: err})
	}
	switch code := resp.StatusCode; {
	case code == http.StatusTooManyRequests:
		return fmt.Errorf("gitlab: %s: %w", op, &forge.RateLimitedError{RetryAfter: c.retryAfter(resp.Header)})
	case code == http.StatusNotFound:
		return fmt.Errorf("gitlab: %s: %w", op, forge.ErrNotFound)
	case code == http.StatusUnauthorized, code == http.StatusForbidden:
		return fmt.Errorf("gitlab: %s: %w: %v", op, forge.ErrForbidden, err)
	case code == http.StatusBadRequest, code == http.StatusConflict, code == http.StatusUnprocessableEntity:
		return fmt.Errorf("gitlab: %s: %w: %v", op, forge.ErrUnprocessable, err)
	case code >= 500:
		return fmt.Errorf("gitlab: %s: %w", op, &forge.TransientError{Err: err})
	}
	return fmt.Errorf("gitlab: %s: %w", op, err)
}

// retryAfter reads Retry-After (seconds), else RateLimit-Reset (unix
// seconds), else GitLab's own advice for a limited client: a minute.
func (c *Client) retryAfter(h http.Header) time.Duration {
	if s, err := strconv.Atoi(strings.TrimSpace(h.Get("Retry-After"))); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := strconv.ParseInt(strings.TrimSpace(h.Get("RateLimit-Reset")), 10, 64); err == nil {
		if d := time.Unix(t, 0).Sub(c.now()); d > 0 {
			return d
		}
	}
	return time.Minute
}
