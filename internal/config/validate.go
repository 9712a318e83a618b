package config

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/llm"
	"github.com/prq-dev/prq/ratelimit"
)

// report records one bad setting: its name and what is wrong with it.
type report = func(name, format string, a ...any)

// Validate reports every bad setting, each named with its accepted form.
// Each section has its validator; they run in this order, so problems
// are reported in the order of the sections.
func (c *Config) Validate(m Mode) error {
	var errs []error
	bad := func(name, format string, a ...any) {
		errs = append(errs, &SettingError{Name: name, Source: c.sources[name], Problem: fmt.Sprintf(format, a...)})
	}
	serve, worker := m == ModeServe || m == ModeAll, m == ModeWorker || m == ModeAll
	c.validateProcess(bad, serve || worker)
	c.validateAPIURLs(bad)
	c.validateGitHub(bad)
	c.validateAccess(bad, serve, serve || worker)
	c.validateGateway(bad)
	c.validateFrontDoor(bad)
	c.validateCredentials(bad, worker)
	models := c.validateModels(bad)
	c.validateProviders(bad, worker)
	c.validateJobs(bad, models)
	c.validateTiers(bad)
	c.validateScheduler(bad)
	c.validateQuota(bad)
	c.validateRetry(bad)
	c.validateFilters(bad)
	return errors.Join(errs...)
}

// validateProcess checks the top-level settings every process reads:
// Redis (required unless only the demo runs), the listen address,
// logging, retention, shutdown and the worker's concurrency.
func (c *Config) validateProcess(bad report, needRedis bool) {
	if c.RedisURL != "" {
		if _, err := ParseRedisURL(c.RedisURL); err != nil {
			bad("REDIS_URL", "%v (want redis://[:password@]host:port[/db], rediss://..., redis-sentinel://host:port[,host:port]?master=name or redis-cluster://host:port[,host:port])", err)
		}
	} else if needRedis {
		bad("REDIS_URL", "is required (for example redis://127.0.0.1:6379); only `prq demo` runs without Redis")
	}
	if c.Addr == "" {
		bad("PRQ_ADDR", "must not be empty (for example :8080)")
	} else if _, port, ok := strings.Cut(c.Addr, ":"); !ok || port == "" {
		bad("PRQ_ADDR", "%q is not host:port (for example :8080 or 127.0.0.1:8080)", c.Addr)
	}
	if f := c.Log.Format; f != "text" && f != "json" {
		bad(settingName("log.format"), "%q: want text or json", f)
	}
	if _, err := ParseLevel(c.Log.Level); err != nil {
		bad(settingName("log.level"), "%v", err)
	}
	if c.Retention.D() < time.Hour {
		bad("retention", "must be at least 1h, got %s", c.Retention.D())
	}
	if c.ShutdownTimeout.D() <= 0 {
		bad(settingName("shutdown_timeout"), "must be positive, got %s", c.ShutdownTimeout.D())
	}
	if c.Worker.Concurrency <= 0 || c.Worker.Concurrency > 10000 {
		bad(settingName("worker.concurrency"), "must be between 1 and 10000, got %d", c.Worker.Concurrency)
	}
}

// validateAPIURLs checks GitHub's API address and the implicit
// provider's.
func (c *Config) validateAPIURLs(bad report) {
	if u, err := url.Parse(c.GitHub.APIURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad("GITHUB_API_URL", "%q is not an http(s) URL", c.GitHub.APIURL)
	}
	if c.OpenAI.BaseURL != "" {
		if u, err := url.Parse(c.OpenAI.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("OPENAI_BASE_URL", "%q is not an http(s) URL", c.OpenAI.BaseURL)
		}
	}
}

// validateGitHub checks the github section's pacing, webhook limits,
// chat associations and review parts.
func (c *Config) validateGitHub(bad report) {
	if c.GitHub.WriteGap.D() < 0 {
		bad("github.write_gap", "must not be negative")
	}
	if n := c.GitHub.ChatWriteBurst; n == nil || *n < 0 {
		bad("github.chat_write_burst", "must not be negative")
	}
	if c.GitHub.CheckRunEvery.D() < 0 {
		bad("github.check_run_every", "must not be negative")
	}
	if c.GitHub.WebhookMaxBytes <= 0 {
		bad("github.webhook_max_bytes", "must be positive, got %d", c.GitHub.WebhookMaxBytes)
	}
	if c.GitHub.WebhookMaxInFlightBytes < 0 || (c.GitHub.WebhookMaxInFlightBytes > 0 && c.GitHub.WebhookMaxInFlightBytes < c.GitHub.WebhookMaxBytes) {
		bad("github.webhook_max_in_flight_bytes", "must be at least webhook_max_bytes (%d), got %d", c.GitHub.WebhookMaxBytes, c.GitHub.WebhookMaxInFlightBytes)
	}
	for _, a := range c.GitHub.ChatAssociations {
		switch strings.ToUpper(strings.TrimSpace(a)) {
		case "OWNER", "MEMBER", "COLLABORATOR", "CONTRIBUTOR", "FIRST_TIME_CONTRIBUTOR", "FIRST_TIMER", "NONE", "MANNEQUIN":
		default:
			bad("github.chat_associations", "%q is not a GitHub author association (OWNER, MEMBER, COLLABORATOR, CONTRIBUTOR, FIRST_TIME_CONTRIBUTOR, FIRST_TIMER, NONE)", a)
		}
	}
	if c.GitHub.MaxReviewParts < 0 {
		bad("github.max_review_parts", "must not be negative, got %d", c.GitHub.MaxReviewParts)
	}
}

// validateAccess checks the secrets that guard the HTTP surfaces (serve:
// the webhook secret and the admin token are required; serve and worker:
// neither may be guessable) and the admin and metrics access settings.
func (c *Config) validateAccess(bad report, serve, strongSecrets bool) {
	if serve {
		// with GitLab tenants alone, serve takes no GitHub webhooks: it
		// mounts POST /webhook only with a secret
		if c.GitHub.WebhookSecret == "" && len(c.GitLab.Tenants) == 0 {
			bad("GITHUB_WEBHOOK_SECRET", "is required for serve: unsigned webhooks would be trusted")
		}
		if problem := c.AdminTokenProblem(); problem != "" {
			bad("PRQ_ADMIN_TOKEN", "%s", problem)
		}
		if c.Metrics.RequireToken && c.Admin.Token == "" {
			bad("metrics.require_token", "needs PRQ_ADMIN_TOKEN: without it nothing could scrape /metrics")
		}
	}
	if strongSecrets {
		// the demo generates its own; everywhere else a guessable secret
		// lets anyone sign webhooks or open the admin surfaces
		for name, v := range map[string]Secret{"GITHUB_WEBHOOK_SECRET": c.GitHub.WebhookSecret, "PRQ_ADMIN_TOKEN": c.Admin.Token} {
			if v != "" {
				if problem := WeakSecret(string(v)); problem != "" {
					bad(name, "%s", problem)
				}
			}
		}
	}
	if ro := c.Admin.ReadOnly; ro != nil {
		if !*ro {
			bad("admin.read_only", "false no longer makes the asynq web UI writable: it is read-only unless admin.ui_writes is true; drop read_only and set ui_writes: true")
		} else if c.Admin.UIWrites {
			bad("admin.read_only", "true contradicts admin.ui_writes: true; keep one (read_only is the default now)")
		}
	}
	if c.Metrics.CacheFor.D() < 0 {
		bad("metrics.cache_for", "must not be negative, got %s", c.Metrics.CacheFor.D())
	}
}

// validateGateway checks the gateway section's waits, timeouts and
// output floor.
func (c *Config) validateGateway(bad report) {
	if c.Gateway.MaxWait.D() < 0 {
		bad("gateway.max_wait", "must not be negative, got %s", c.Gateway.MaxWait.D())
	}
	if c.Gateway.HeaderTimeout.D() < 0 || c.Gateway.StreamIdle.D() < 0 {
		bad("gateway.header_timeout", "header_timeout and stream_idle must not be negative")
	}
	if c.Gateway.FallbackWait.D() < 0 {
		bad("gateway.fallback_wait", "must not be negative, got %s", c.Gateway.FallbackWait.D())
	}
	if c.Gateway.MinOutput < 0 {
		bad("gateway.min_output", "must not be negative, got %d", c.Gateway.MinOutput)
	}
}

// validateFrontDoor checks the limits on hung providers and request
// bodies in flight.
func (c *Config) validateFrontDoor(bad report) {
	if c.OpenAI.FirstByteTimeout.D() < 0 {
		bad("openai.first_byte_timeout", "must not be negative, got %s", c.OpenAI.FirstByteTimeout.D())
	}
	for _, m := range c.Models {
		if m.FirstByteTimeout.D() < 0 {
			bad("models."+m.Name+".first_byte_timeout", "must not be negative, got %s", m.FirstByteTimeout.D())
		}
	}
	if c.Gateway.MaxBodyBytesInFlight < 0 {
		bad("gateway.max_body_bytes_in_flight", "must not be negative, got %d", c.Gateway.MaxBodyBytesInFlight)
	}
}

// validateCredentials checks the GitHub App's and the providers'
// credentials a worker needs, and the App's key file wherever it is set.
func (c *Config) validateCredentials(bad report, worker bool) {
	if worker {
		// with GitLab tenants alone, no GitHub App is needed: its jobs
		// never come (serve mounts no GitHub webhook without its secret)
		gitlabOnly := len(c.GitLab.Tenants) > 0 && c.GitHub.AppID == 0 && c.GitHub.PrivateKey == "" && c.GitHub.PrivateKeyPath == ""
		if c.GitHub.AppID == 0 && !gitlabOnly {
			bad("GITHUB_APP_ID", "is required for worker (the GitHub App's numeric id)")
		}
		if c.GitHub.PrivateKey == "" && c.GitHub.PrivateKeyPath == "" && !gitlabOnly {
			bad("GITHUB_PRIVATE_KEY_PATH", "is required for worker (or GITHUB_PRIVATE_KEY with the PEM itself)")
		}
		if c.OpenAI.APIKey == "" && len(c.Providers) == 0 {
			bad("OPENAI_API_KEY", "is required for worker (or providers with their key_env)")
		}
	}
	if problem := c.keyFileProblem(); problem != "" {
		bad("GITHUB_PRIVATE_KEY_PATH", "%s", problem)
	}
}

// validateModels checks each model's own settings, then what refers to
// other models (fallbacks) or to its provider's kind (flex). It returns
// the names of the models configured.
func (c *Config) validateModels(bad report) map[string]bool {
	models := map[string]bool{}
	for i, mc := range c.Models {
		name := fmt.Sprintf("models[%d]", i)
		if mc.Name == "" {
			bad(name+".name", "is required")
			continue
		}
		if models[mc.Name] {
			bad(name+".name", "model %q is configured twice", mc.Name)
		}
		models[mc.Name] = true
		validateModel(bad, mc)
	}
	for _, mc := range c.Models {
		if p, ok := c.ProviderOf(mc.Name); ok && mc.Flex && p.Kind == KindAnthropic {
			bad("models."+mc.Name+".flex", "flex processing is OpenAI's: provider %s is %s", p.Name, p.Kind)
		}
		if mc.BatchQueueTokens < 0 {
			bad("models."+mc.Name+".batch_queue_tokens", "must not be negative, got %d", mc.BatchQueueTokens)
		}
		seen := map[string]bool{}
		for _, f := range mc.Fallbacks {
			switch {
			case f == mc.Name:
				bad("models."+mc.Name+".fallbacks", "names the model itself")
			case seen[f]:
				bad("models."+mc.Name+".fallbacks", "names %q twice", f)
			case !models[f]:
				bad("models."+mc.Name+".fallbacks", "%q is not a configured model", f)
			}
			seen[f] = true
		}
	}
	return models
}

// validateModel checks one named model's limits, token sizes, prices
// and output format.
func validateModel(bad report, mc ModelConfig) {
	if _, err := mc.Limits(); err != nil {
		bad("models."+mc.Name, "%v", err)
	}
	if mc.MaxOutputTokens < 0 || mc.ContextTokens < 0 {
		bad("models."+mc.Name, "max_output_tokens and context_tokens must not be negative")
	}
	if p, ok := mc.PricesOf(); ok && mc.Prices != nil && (!p.Valid() || p.Input == 0 && p.Output == 0) {
		bad("models."+mc.Name+".prices", "want dollars per million tokens, none negative, input or output above 0; got %+v", *mc.Prices)
	}
	if out := cmp.Or(mc.MaxOutputTokens, defaultMaxOutputTokens); mc.OutputTokensPerMinute > 0 && out > mc.OutputTokensPerMinute {
		bad("models."+mc.Name, "max_output_tokens %d exceeds output_tokens_per_minute %d: every call asks for that much output, so none could ever be admitted", out, mc.OutputTokensPerMinute)
	}
	if mc.OutputFormat != "" {
		if _, err := llm.ParseFormatType(mc.OutputFormat); err != nil {
			bad("models."+mc.Name+".output_format", "%q: want json_schema, json_object or text", mc.OutputFormat)
		}
	}
}

// validateJobs checks that each job kind names a configured model, the
// batch lane's pacing and the jobs' context size.
func (c *Config) validateJobs(bad report, models map[string]bool) {
	for setting, model := range map[string]string{"jobs.summary_model": c.Jobs.SummaryModel, "jobs.review_model": c.Jobs.ReviewModel, "jobs.chat_model": c.Jobs.ChatModel} {
		if !models[model] {
			bad(setting, "model %q is not among the configured models", model)
		}
	}
	if c.Batch.Every.D() < 0 || c.Batch.Every.D() > 0 && c.Batch.Every.D() < time.Second {
		bad("batch.every", "want a duration of at least 1s, got %s", c.Batch.Every.D())
	}
	if c.Batch.MaxRequests < 0 || c.Batch.MaxRequests > 50000 {
		bad("batch.max_requests", "want 0 (the default) to 50,000 (OpenAI's most), got %d", c.Batch.MaxRequests)
	}
	if n := c.Jobs.ContextTokens; n != nil && (*n < 0 || *n > maxContextTokens) {
		bad("jobs.context_tokens", "must be between 0 and %d, got %d", maxContextTokens, *n)
	}
}

// validateTiers checks every tier, the default tier and the plans that
// name tiers.
func (c *Config) validateTiers(bad report) {
	for name, t := range c.Tiers {
		c.validateTier(bad, name, t)
	}
	if _, err := jobs.ParseTier(c.DefaultTier); err != nil {
		bad("default_tier", "%v", err)
	}
	c.validateGitLab(bad)
	for i, p := range c.Plans {
		if p.Installation <= 0 {
			bad(fmt.Sprintf("plans[%d].installation", i), "must be a positive installation id")
		}
		if _, err := jobs.ParseTier(p.Tier); err != nil {
			bad(fmt.Sprintf("plans[%d].tier", i), "%v", err)
		}
	}
}

// validateTier checks one tier: its name, weight, quotas, lane and
// dollar limits (which need every model priced).
func (c *Config) validateTier(bad report, name string, t Tier) {
	if _, err := jobs.ParseTier(name); err != nil {
		bad("tiers."+name, "%v", err)
	}
	if t.Weight <= 0 {
		bad("tiers."+name+".weight", "must be positive, got %d", t.Weight)
	}
	if t.QuotaTokens < 0 {
		bad("tiers."+name+".quota_tokens", "must not be negative, got %d", t.QuotaTokens)
	}
	if t.Lane != "" && t.Lane != LaneStandard && t.Lane != LaneFlex && t.Lane != LaneBatch {
		bad("tiers."+name+".lane", "want %q, %q or %q, got %q", LaneStandard, LaneFlex, LaneBatch, t.Lane)
	}
	if t.Lane == LaneBatch && !c.modelHasBatch(c.Jobs.SummaryModel) && !c.modelHasBatch(c.Jobs.ReviewModel) {
		bad("tiers."+name+".lane", "batch, but neither jobs.summary_model nor jobs.review_model has batch: true")
	}
	if t.LaneWait.D() < 0 || t.LaneWait.D() > 0 && t.LaneWait.D() < time.Minute {
		bad("tiers."+name+".lane_wait", "want a duration of at least 1m, got %s", t.LaneWait.D())
	}
	if t.ChatQuotaTokens < 0 {
		bad("tiers."+name+".chat_quota_tokens", "must not be negative, got %d", t.ChatQuotaTokens)
	}
	for _, d := range []struct {
		setting string
		v       float64
	}{{"quota_dollars", t.QuotaDollars}, {"budget_dollars", t.BudgetDollars}} {
		setting, v := d.setting, d.v
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) || v > 1e6 {
			bad("tiers."+name+"."+setting, "want dollars from 0 to 1,000,000, got %v", v)
		} else if v > 0 {
			for _, mc := range c.Models {
				if p, ok := mc.PricesOf(); !ok || p.Output <= 0 {
					bad("tiers."+name+"."+setting, "model %s has no prices (models[].prices): its calls could not be counted in dollars", mc.Name)
				}
			}
		}
	}
}

// validateScheduler checks the scheduler's mode, shares, send lag and
// aging, and the chat limits it admits chat under.
func (c *Config) validateScheduler(bad report) {
	if s := c.Scheduler.Mode; s != "weighted" && s != "strict" {
		bad("scheduler.mode", "%q: want weighted or strict", s)
	}
	if cs := c.Scheduler.ChatShare; cs == nil || *cs < 0 || *cs >= 1 {
		bad("scheduler.chat_share", "must be in [0, 1)")
	}
	for m, n := range c.Scheduler.ChatReserve {
		if _, ok := c.Model(m); !ok {
			bad("scheduler.chat_reserve", "names %q, which is not a configured model", m)
		} else if n < 0 {
			bad("scheduler.chat_reserve", "%s: must not be negative", m)
		}
	}
	if c.Scheduler.ChatIdle.D() <= 0 {
		bad("scheduler.chat_idle", "must be positive")
	}
	if cc := c.Scheduler.ChatCap; cc == nil || *cc <= 0 || *cc > 1 {
		bad("scheduler.chat_cap", "must be in (0, 1]")
	}
	if n := c.Chat.PerUserPerHour; n == nil || *n < 0 {
		bad("chat.per_user_per_hour", "must not be negative (0: no limit)")
	}
	if n := c.Chat.PerPRPerHour; n == nil || *n < 0 {
		bad("chat.per_pr_per_hour", "must not be negative (0: no limit)")
	}
	if l := c.Scheduler.SendLag; l == nil || l.D() < 0 || l.D() > 10*time.Second {
		bad("scheduler.send_lag", "must be in [0, 10s]")
	}
	if c.Scheduler.Aging.D() <= 0 {
		bad("scheduler.aging", "must be positive")
	}
}

// validateQuota checks how tenant quotas are counted.
func (c *Config) validateQuota(bad report) {
	if _, err := ratelimit.ParsePeriod(c.Quota.Period); err != nil {
		bad("quota.period", "%v", err)
	}
	if w := c.Quota.WhenSpent; w != "" && w != "wait" && w != "skip" {
		bad("quota.when_spent", "want wait or skip, got %q", w)
	}
}

// validateRetry checks each class's retry budget.
func (c *Config) validateRetry(bad report) {
	for _, r := range []struct {
		name string
		b    RetryBudget
	}{{"retry.batch", c.Retry.Batch}, {"retry.chat", c.Retry.Chat}} {
		name, b := r.name, r.b
		if b.MaxAttempts < 1 {
			bad(name+".max_attempts", "must be at least 1")
		}
		if b.MaxAge.D() <= 0 {
			bad(name+".max_age", "must be positive")
		}
	}
}

// validateFilters checks the globs of the files left out of reviews.
func (c *Config) validateFilters(bad report) {
	for _, g := range c.Filters.Exclude {
		if _, err := path.Match(strings.TrimSuffix(g, "/**"), "x"); err != nil {
			bad("filters.exclude", "bad glob %q: %v", g, err)
		}
	}
}

// validateGitLab checks GitLab's address and tenants.
func (c *Config) validateGitLab(bad report) {
	if u, err := url.Parse(c.GitLab.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad("GITLAB_URL", "%q is not an http(s) URL", c.GitLab.URL)
	}
	if c.GitLab.WebhookToken != "" {
		if problem := WeakSecret(string(c.GitLab.WebhookToken)); problem != "" {
			bad("GITLAB_WEBHOOK_TOKEN", "%s", problem)
		}
	}
	ids := map[int64]bool{}
	for i, t := range c.GitLab.Tenants {
		at := fmt.Sprintf("gitlab.tenants[%d]", i)
		if _, err := jobs.GitLabTenant(t.ID); err != nil {
			bad(at+".id", "must be the group's or project's GitLab id (a positive number), got %d", t.ID)
		} else if ids[t.ID] {
			bad(at+".id", "%d is configured twice", t.ID)
		}
		ids[t.ID] = true
		if strings.Trim(t.Path, "/") == "" {
			bad(at+".path", "is required: the group's or project's full path")
		}
		if t.Token == "" {
			bad(at+".token", "is required: a group or project access token")
		}
		if t.WebhookToken == "" && c.GitLab.WebhookToken == "" {
			bad(at+".webhook_token", "is required unless gitlab.webhook_token is set")
		} else if problem := WeakSecret(string(t.WebhookToken)); t.WebhookToken != "" && problem != "" {
			bad(at+".webhook_token", "%s", problem)
		}
		if t.Tier != "" {
			if _, err := jobs.ParseTier(t.Tier); err != nil {
				bad(at+".tier", "%v", err)
			}
		}
	}
}
