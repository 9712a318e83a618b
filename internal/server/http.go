package server

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/hibiken/asynqmon"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/internal/dashboard"
	"github.com/prq-dev/prq/internal/gateway"
	"github.com/prq-dev/prq/internal/metrics"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/ratelimit"
	"github.com/prq-dev/prq/store"
	"github.com/prq-dev/prq/webhook"
)

// handler returns prq's HTTP routes; ctx bounds the dashboard's sampler.
// Everything but the webhook, health checks and metrics needs the admin
// token (unless open, for the demo without a token; metrics too when
// metrics.require_token). Every state-changing request to the admin API
// and the asynq web UI must come from the same origin (sameOrigin); the
// asynq web UI changes nothing unless admin.ui_writes. Every response
// carries the security headers.
func (s *Server) handler(ctx context.Context, wh http.Handler, open bool, prPages string) (http.Handler, func(), error) {
	auth := tokenAuth(string(s.cfg.Admin.Token), open)
	mux := http.NewServeMux()
	if wh != nil {
		mux.Handle("POST /webhook", wh)
	}
	if s.gitlabHook != nil {
		mux.Handle("POST /webhook/gitlab", s.gitlabHook)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := s.rdb.Ping(ctx).Err(); err != nil {
			http.Error(w, "redis unavailable", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	var metricsHandler http.Handler = s.metrics.Handler()
	if s.cfg.Metrics.RequireToken {
		metricsHandler = tokenAuth(string(s.cfg.Admin.Token), false)(metricsHandler)
	}
	mux.Handle("GET /metrics", metricsHandler)
	writes := s.cfg.Admin.UIWrites
	mon := asynqmon.New(asynqmon.Options{RootPath: monitoringRoot, RedisConnOpt: s.connOpt, ReadOnly: !writes})
	ui, err := newMonitoringUI(mon, writes)
	if err != nil {
		mon.Close()
		return nil, nil, err
	}
	mux.Handle(monitoringRoot+"/", auth(sameOrigin(ui)))
	mux.Handle("GET "+csrfScriptPath, ui.script())
	dash := dashboard.New(dashSource{s}, s.store, open)
	dash.PRPages = prPages
	withDashboard := !s.cfg.Dashboard.Disabled
	mux.Handle("/api/", auth(sameOrigin(dash.AdminAPI(withDashboard))))
	keysAPI := auth(sameOrigin(gateway.KeysAPI(gateway.NewKeys(s.rdb), s.cfg.ModelNames())))
	mux.Handle("/api/keys", keysAPI)
	mux.Handle("/api/keys/", keysAPI)
	gw, err := s.gateway(ctx)
	if err != nil {
		mon.Close()
		return nil, nil, err
	}
	mux.Handle("/v1/", gw)
	if withDashboard {
		go dash.Sample(ctx, time.Second)
		mux.Handle("/", auth(dash.Page()))
	}
	return securityHeaders(mux), func() { mon.Close() }, nil
}

// dashSource is the dashboard's read-only view of the process.
type dashSource struct{ s *Server }

var _ dashboard.Source = dashSource{}

func (d dashSource) Models() []string { return d.s.sched.Models() }
func (d dashSource) Stats(ctx context.Context, model string) (admission.Stats, error) {
	return d.s.sched.Stats(ctx, model)
}
func (d dashSource) Tokens(ctx context.Context, model string) (in, adm map[string]int64, err error) {
	return d.s.sched.Tokens(ctx, model)
}
func (d dashSource) Bucket(model string) (*ratelimit.Bucket, bool) { return d.s.sched.Bucket(model) }
func (d dashSource) Paused(ctx context.Context) map[string]string  { return d.s.sched.Paused(ctx) }
func (d dashSource) PausedKeys(ctx context.Context, model string) map[int]string {
	return d.s.sched.PausedKeys(ctx, model)
}
func (d dashSource) ActiveRuns(ctx context.Context, limit int64) ([]store.Run, error) {
	return d.s.store.ActiveRuns(ctx, limit)
}
func (d dashSource) GetQueueInfo(q string) (*asynq.QueueInfo, error) { return d.s.insp.GetQueueInfo(q) }
func (d dashSource) GaveUpCounts(ctx context.Context) map[string]int64 {
	return metrics.GaveUpCounts(ctx, d.s.rdb)
}

func (d dashSource) Acceptance(ctx context.Context) []store.Acceptance {
	acc, _ := store.ReadAcceptance(ctx, d.s.rdb) // none when Redis does not answer
	return acc
}

func (d dashSource) CallCounts(ctx context.Context) map[string]map[string]int64 {
	return metrics.CallCounts(ctx, d.s.metrics.Counts())
}

func (d dashSource) Costs(ctx context.Context) map[string]map[string]float64 {
	return metrics.Costs(ctx, d.s.rdb)
}

func (d dashSource) Spend(ctx context.Context) []dashboard.Spend {
	var out []dashboard.Spend
	spent, _ := metrics.Spendings(ctx, d.s.rdb, time.Now(), d.s.cfg.Budgets()) // none when Redis does not answer
	for _, sp := range spent {
		out = append(out, dashboard.Spend{Installation: sp.Installation, Tier: sp.Tier, Dollars: sp.Dollars, Budget: sp.Budget})
	}
	return out
}

// QuotaUsed reads the installation's whole quota (none where quotas are
// split per job kind).
func (d dashSource) QuotaUsed(ctx context.Context, inst int64, tier jobs.Tier) (ratelimit.Usage, int64, bool) {
	cfg := d.s.cfg
	limit := cfg.Tiers[string(tier)].QuotaTokens
	if limit <= 0 || cfg.Quota.PerKind {
		return ratelimit.Usage{}, 0, false
	}
	period, _ := ratelimit.ParsePeriod(cfg.Quota.Period)
	q, err := ratelimit.NewQuota(d.s.rdb, ratelimit.QuotaConfig{Period: period})
	if err != nil {
		return ratelimit.Usage{}, 0, false
	}
	u, err := q.Used(ctx, strconv.FormatInt(inst, 10), "", limit)
	return u, limit, err == nil
}

// tokenAuth requires the admin token (bearer or basic password) unless
// open (the demo without a token, on loopback only). Open, it answers only
// requests for a loopback name (loopbackHost): a page whose DNS name is
// rebound to 127.0.0.1 sends its own name as Host, and is refused.
func tokenAuth(token string, open bool) func(http.Handler) http.Handler {
	return func(h http.Handler) http.Handler {
		if open {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if !loopbackHost(r.Host) {
					http.Error(w, "refused: without an admin token prq answers only requests for 127.0.0.1, [::1] or localhost (this one is for another name, as a page whose DNS name was rebound to this machine would send)", http.StatusForbidden)
					return
				}
				h.ServeHTTP(w, r)
			})
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
			if _, pw, ok := r.BasicAuth(); ok {
				got = pw
			}
			if token == "" || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
				w.Header().Set("WWW-Authenticate", `Basic realm="prq"`)
				http.Error(w, "authentication required (PRQ_ADMIN_TOKEN as a bearer token or basic-auth password)", http.StatusUnauthorized)
				return
			}
			h.ServeHTTP(w, r)
		})
	}
}

// loopbackHost reports whether a Host header names this machine's
// loopback: 127.0.0.1, ::1 or localhost, with a port or not.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	return strings.EqualFold(host, "localhost") || host == "127.0.0.1" || host == "::1"
}

func hostPort(a net.Addr) string {
	host, port, _ := net.SplitHostPort(a.String())
	if host == "::" || host == "0.0.0.0" || host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// serveHTTP runs the HTTP server until ctx ends, then shuts it down.
func serveHTTP(ctx context.Context, ln net.Listener, h http.Handler, log *slog.Logger) (wait func() error) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 60 * time.Second, WriteTimeout: 60 * time.Second}
	errc := make(chan error, 1)
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- err
		}
		close(errc)
	}()
	return func() error {
		select {
		case <-ctx.Done():
		case err := <-errc:
			if err != nil {
				return err
			}
		}
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	}
}

func (s *Server) webhookHandler() (*webhook.Handler, error) {
	limits := store.ChatLimits{PerUser: 20, PerPR: 60, Window: time.Hour}
	if n := s.cfg.Chat.PerUserPerHour; n != nil {
		limits.PerUser = *n
	}
	if n := s.cfg.Chat.PerPRPerHour; n != nil {
		limits.PerPR = *n
	}
	chatLimits, err := store.NewChatLimiter(s.rdb, limits)
	if err != nil {
		return nil, err
	}
	var repos webhook.RepoSettings
	if s.cfg.GitHub.RepoConfig == nil || *s.cfg.GitHub.RepoConfig {
		repos = s.store
	}
	secret := []byte(s.cfg.GitHub.WebhookSecret)
	if len(secret) == 0 {
		// GitLab tenants alone: POST /webhook is not mounted, and its
		// handler, which GitLab's shares, gets a secret nobody holds
		secret = make([]byte, 32)
		if _, err := rand.Read(secret); err != nil {
			return nil, err
		}
	}
	h, err := webhook.New(webhook.Config{Secret: secret, MaxBytes: s.cfg.GitHub.WebhookMaxBytes, Repos: repos,
		MaxInFlightBytes: s.cfg.GitHub.WebhookMaxInFlightBytes, ChatAssociations: s.cfg.GitHub.ChatAssociations,
		AppSlug: s.cfg.GitHub.AppSlug, SkipBotPRs: s.cfg.GitHub.SkipBotPRs == nil || *s.cfg.GitHub.SkipBotPRs, ChatLimiter: chatLimits,
		Replays: s.store},
		s.jobs.enqueuer, s.store, s.log.With("component", "webhook"))
	if err != nil {
		return nil, err
	}
	h.Count = s.metrics.CountDelivery
	if len(s.cfg.GitLab.Tenants) > 0 {
		gc := webhook.GitLabConfig{Token: string(s.cfg.GitLab.WebhookToken)}
		for _, t := range s.cfg.GitLab.Tenants {
			id, _ := jobs.GitLabTenant(t.ID) // Validate has checked it
			gc.Tenants = append(gc.Tenants, webhook.GitLabTenant{ID: id, Path: t.Path, Token: string(t.WebhookToken)})
		}
		g, err := webhook.NewGitLab(gc, h)
		if err != nil {
			return nil, err
		}
		s.gitlabHook = g
	}
	return h, nil
}
