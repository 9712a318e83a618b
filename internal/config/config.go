// Package config owns prq's configuration: the Config struct and its
// defaults, the YAML file (PRQ_CONFIG), the environment, the shared
// command-line flags, validation per section and per mode, REDIS_URL
// parsing and redaction. It knows nothing of how a process is wired or run.
package config

import (
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/prq-dev/prq/llm"
	"github.com/prq-dev/prq/ratelimit"
)

// Config is prq's whole configuration: defaults, then the YAML file
// (PRQ_CONFIG), then the environment, then flags.
type Config struct {
	// RedisURL: redis://, rediss://, redis-sentinel:// or redis-cluster://.
	RedisURL string `yaml:"redis_url"`
	// Addr is the HTTP listen address. Defaults to :8080.
	Addr string `yaml:"addr"`
	// AllowEviction starts even when Redis's maxmemory-policy is not
	// noeviction. Defaults to false: eviction silently deletes jobs.
	AllowEviction bool `yaml:"allow_eviction"`
	// AllowNoPersistence starts even when Redis has neither AOF nor RDB
	// snapshots (env PRQ_ALLOW_NO_PERSISTENCE, flag --allow-no-persistence).
	// Defaults to false: a restart would lose acknowledged deliveries.
	AllowNoPersistence bool `yaml:"allow_no_persistence"`
	// Retention is how long a pull request's state (its runs, files,
	// results, what was posted) is kept after its last change: every such
	// key expires then. Defaults to 14 days.
	Retention Duration `yaml:"retention"`
	// ShutdownTimeout bounds how long in-flight jobs may run after SIGTERM.
	// Defaults to 30s.
	ShutdownTimeout Duration     `yaml:"shutdown_timeout"`
	Log             LogConfig    `yaml:"log"`
	GitHub          GitHubConfig `yaml:"github"`
	GitLab          GitLabConfig `yaml:"gitlab"`
	OpenAI          OpenAIConfig `yaml:"openai"`
	// Providers are the LLM providers models name. Defaults to none: one
	// implicit OpenAI provider from openai (OPENAI_API_KEY, OPENAI_BASE_URL).
	Providers []ProviderConfig `yaml:"providers"`
	Models    []ModelConfig    `yaml:"models"`
	Jobs      JobsConfig       `yaml:"jobs"`
	Tiers     map[string]Tier  `yaml:"tiers"`
	// DefaultTier is the tier of installations with no plan. Defaults to free.
	DefaultTier string            `yaml:"default_tier"`
	Plans       []PlanConfig      `yaml:"plans"`
	Scheduler   SchedulerCfg      `yaml:"scheduler"`
	Chat        ChatConfig        `yaml:"chat"`
	Filters     FiltersConfig     `yaml:"filters"`
	Worker      WorkerConfig      `yaml:"worker"`
	Admin       AdminConfig       `yaml:"admin"`
	Quota       QuotaSettings     `yaml:"quota"`
	Dashboard   DashboardCfg      `yaml:"dashboard"`
	Retry       RetryConfig       `yaml:"retry"`
	Metrics     MetricsConfig     `yaml:"metrics"`
	Gateway     GatewayConfig     `yaml:"gateway"`
	Batch       BatchConfig       `yaml:"batch"`
	path        string            // the file read, if any
	sources     map[string]string // setting name -> where it was set, for errors
}

// LogConfig configures logging.
type LogConfig struct {
	// Format is text or json. Defaults to text.
	Format string `yaml:"format"`
	// Level is debug, info, warn or error. Defaults to info.
	Level string `yaml:"level"`
}

// GitHubConfig configures the GitHub App.
type GitHubConfig struct {
	AppID          int64  `yaml:"app_id"`
	AppSlug        string `yaml:"app_slug"`
	PrivateKeyPath string `yaml:"private_key_path"`
	PrivateKey     Secret `yaml:"private_key"`
	WebhookSecret  Secret `yaml:"webhook_secret"`
	// APIURL defaults to https://api.github.com/.
	APIURL string `yaml:"api_url"`
	// SkipBotPRs skips pull requests opened by bots. Defaults to true.
	SkipBotPRs *bool `yaml:"skip_bot_prs"`
	// WebhookMaxBytes caps webhook bodies. Defaults to 25 MB, GitHub's maximum.
	WebhookMaxBytes int64 `yaml:"webhook_max_bytes"`
	// WriteGap is the least time between an installation's content-creating
	// calls. Defaults to 1s (GitHub's advice); the demo compresses it.
	WriteGap Duration `yaml:"write_gap"`
	// ChatWriteBurst is how many chat replies may go to an installation
	// at once right after another write, ahead of WriteGap; the lane's
	// rate stays one write a gap, so a minute holds at most
	// 60s/write_gap + ChatWriteBurst + 1 writes. Defaults to 4.
	ChatWriteBurst *int `yaml:"chat_write_burst"`
	// WebhookMaxInFlightBytes caps the webhook bodies being read at once,
	// across requests (503 with Retry-After past it). Defaults to
	// webhook_max_bytes plus 4 MB.
	WebhookMaxInFlightBytes int64 `yaml:"webhook_max_in_flight_bytes"`
	// ChatAssociations are who may start chat besides the PR's author
	// (GitHub author_association). Defaults to OWNER, MEMBER, COLLABORATOR.
	ChatAssociations []string `yaml:"chat_associations"`
	// CheckRuns shows each head's progress as a check run (the App needs
	// checks: write). Defaults to true.
	CheckRuns *bool `yaml:"check_runs"`
	// RepoConfig reads each repository's .prq.yaml (and its
	// organisation's prq.yaml) from the base branch (the App needs
	// contents: read). Defaults to true.
	RepoConfig *bool `yaml:"repo_config"`
	// SummaryCost shows what each reviewed head's calls cost, at the
	// models' prices, in the summary comment's footer. Defaults to false.
	SummaryCost bool `yaml:"summary_cost"`
	// CheckRunEvery is the least time between two progress updates of a
	// head's check run. Defaults to 5s.
	CheckRunEvery Duration `yaml:"check_run_every"`
	// WebURL is GitHub's web address, for links. Defaults to https://github.com.
	WebURL string `yaml:"web_url"`
	// MaxReviewParts caps the calls one file's review may be split into.
	// Defaults to 20.
	MaxReviewParts int `yaml:"max_review_parts"`
}

// OpenAIConfig configures the LLM provider.
type OpenAIConfig struct {
	APIKey  Secret `yaml:"api_key"`
	BaseURL string `yaml:"base_url"`
	// Timeout bounds one call. Defaults to 120s.
	Timeout Duration `yaml:"timeout"`
	// FirstByteTimeout abandons a job's call (a transient failure,
	// retried through admission) when no byte of the reply arrived
	// within it: a hung provider costs this, not Timeout. A non-streamed
	// reply's headers come when it is done, so it must exceed the
	// longest reply. Models may set their own; reasoning models default
	// to none. Defaults to 30s.
	FirstByteTimeout Duration `yaml:"first_byte_timeout"`
}

// ModelConfig is one model and its provider limits.
type ModelConfig struct {
	Name string `yaml:"name"`
	// FirstByteTimeout is openai.first_byte_timeout for this model's
	// calls. Defaults to it (to none for a reasoning model).
	FirstByteTimeout Duration `yaml:"first_byte_timeout"`
	// Provider names the entry of providers that serves the model.
	// Defaults to the only provider when there is one (the implicit
	// OpenAI provider when providers is empty); required with several.
	Provider          string `yaml:"provider"`
	RequestsPerMinute int64  `yaml:"requests_per_minute"`
	TokensPerMinute   int64  `yaml:"tokens_per_minute"`
	BurstRequests     int64  `yaml:"burst_requests"`
	BurstTokens       int64  `yaml:"burst_tokens"`
	RequestsPerDay    int64  `yaml:"requests_per_day"`
	TokensPerDay      int64  `yaml:"tokens_per_day"`
	// InputTokensPerMinute and OutputTokensPerMinute limit a call's input
	// and output tokens apart (Anthropic's ITPM and OTPM; 0: none). With
	// both set, tokens_per_minute defaults to their sum (it then never
	// binds before them).
	InputTokensPerMinute  int64 `yaml:"input_tokens_per_minute"`
	OutputTokensPerMinute int64 `yaml:"output_tokens_per_minute"`
	// InputTokensPerDay and OutputTokensPerDay are their daily limits.
	InputTokensPerDay  int64 `yaml:"input_tokens_per_day"`
	OutputTokensPerDay int64 `yaml:"output_tokens_per_day"`
	// Reasoning models take max_completion_tokens instead of max_tokens.
	Reasoning bool `yaml:"reasoning"`
	// Flex: the model serves OpenAI's flex processing (service_tier
	// "flex": batch prices, slower, sometimes refused); the jobs of a tier
	// with lane flex use it. OpenAI and Azure OpenAI providers only.
	Flex bool `yaml:"flex"`
	// Batch: the provider's batch API serves the model (OpenAI's Batch
	// API, Azure OpenAI's global batch deployments, Anthropic's Message
	// Batches); the jobs of a tier with lane batch use it.
	Batch bool `yaml:"batch"`
	// BatchQueueTokens caps the input tokens of the model's batches not
	// yet over (OpenAI's enqueued-token limit); 0: the provider's
	// refusal alone bounds them.
	BatchQueueTokens int64 `yaml:"batch_queue_tokens"`
	// CachedInputCounts: the provider counts input read from its prompt
	// cache toward the model's input and token limits. Defaults to false
	// for Anthropic models (on most, only uncached input counts toward
	// ITPM), true otherwise (OpenAI counts cached tokens).
	CachedInputCounts *bool `yaml:"cached_input_counts"`
	// MaxOutputTokens is the output cap a worker's call asks for (default
	// 1024) and the one the gateway gives a request that sets none
	// (default ratelimit.DefaultMaxOutput, 4096: agents' replies run
	// longer than a review's comments).
	MaxOutputTokens int64 `yaml:"max_output_tokens"`
	// ContextTokens is the model's context window. Defaults to 128000.
	ContextTokens int64 `yaml:"context_tokens"`
	// Period of the limits. Defaults to 1m; the demo compresses it.
	Period Duration `yaml:"period"`
	// Limiter is how the provider counts: bucket (continuous refill,
	// OpenAI's), window (at most the limits in any sliding window) or auto
	// (a bucket until the provider's headers show a window, then the
	// window settings). Defaults to bucket.
	Limiter string `yaml:"limiter"`
	// Window is a window limiter's span. Defaults to the period.
	Window Duration `yaml:"window"`
	// SubWindow, when set, also caps any shorter sub-window at
	// SubWindowShare of the limits (window limiter only).
	SubWindow Duration `yaml:"sub_window"`
	// SubWindowShare of the limits any sub-window may hold, in (0, 1].
	// Defaults to sub_window/window.
	SubWindowShare float64 `yaml:"sub_window_share"`
	// WindowMargin: a window limiter holds each admission this much longer
	// than the window, for the time until the provider counts the call.
	// Unset: measured from the calls' way to the provider, at most
	// window/60 (see ratelimit.Limits.WindowMargin).
	WindowMargin Duration `yaml:"window_margin"`
	// Settle is how a call's real usage corrects its admitted estimate:
	// estimate (nothing: the provider counted the estimate, OpenAI's way),
	// debt (usage beyond the estimate is charged too) or refund (usage
	// replaces the estimate both ways). Defaults to estimate.
	Settle string `yaml:"settle"`
	// OutputFormat is how reviews are asked for: json_schema (strict
	// structured outputs), json_object, or text (a delimited block the
	// prompt describes). Defaults by model family: json_schema for
	// gpt-4o, gpt-4.1, gpt-5 and o-series models, text for Claude,
	// json_object otherwise.
	OutputFormat string `yaml:"output_format"`
	// Fallbacks are the models a gateway request or a summary or review
	// job moves to, in order, when this one cannot serve it: every key
	// paused, the provider failing the call, or (a gateway request) not
	// admitted within gateway.fallback_wait. It moves through admission
	// (the fallback's bucket, the same quota); the fallbacks' own
	// fallbacks are not followed. Defaults to none.
	Fallbacks []string `yaml:"fallbacks"`
	// Prices are the model's prices in US dollars per million tokens,
	// for what calls cost (prq_llm_cost_dollars_total). Defaults to the
	// provider's list prices prq knows (llm.ListPrices), else none: the
	// model's calls are not priced.
	Prices *PricesConfig `yaml:"prices"`
}

// CachedInputCountsOr is cached_input_counts, or its default for a
// provider of kind.
func (m ModelConfig) CachedInputCountsOr(kind string) bool {
	if m.CachedInputCounts != nil {
		return *m.CachedInputCounts
	}
	return kind != KindAnthropic
}

// PricesConfig is a model's prices in US dollars per million tokens.
type PricesConfig struct {
	Input float64 `yaml:"input"`
	// CachedInput is input served from the provider's prompt cache;
	// CacheWrite input written to it (Anthropic). 0: charged as input.
	CachedInput float64 `yaml:"cached_input"`
	CacheWrite  float64 `yaml:"cache_write"`
	Output      float64 `yaml:"output"`
}

// PricesOf returns a model's prices: its prices setting, else its list
// prices; ok is false when it has neither.
func (m ModelConfig) PricesOf() (p llm.Prices, ok bool) {
	if m.Prices != nil {
		return llm.Prices{Input: m.Prices.Input, CachedInput: m.Prices.CachedInput, CacheWrite: m.Prices.CacheWrite, Output: m.Prices.Output}, true
	}
	return llm.ListPrices(m.Name)
}

// JobsConfig picks the model of each job kind.
type JobsConfig struct {
	SummaryModel string `yaml:"summary_model"`
	ReviewModel  string `yaml:"review_model"`
	ChatModel    string `yaml:"chat_model"`
	// ReuseResults reuses a file's result for a job whose prompt was
	// answered already (a head that replaced it, a run reopened) instead
	// of paying for it again. Defaults to true.
	ReuseResults *bool `yaml:"reuse_results"`
	// ContextTokens is how many tokens of a pull request's file list and
	// diffs every prompt of it carries, beside the file it is about, so
	// each file is summarised and reviewed with the whole change in view
	// (a prefix the provider's prompt cache serves at its cached price).
	// Unset: 2000 where the summary and review models read their prompt
	// cache free of their input limits (Anthropic; models[].
	// cached_input_counts false), 0 elsewhere (OpenAI counts cached
	// tokens toward TPM: context costs throughput there, and more dollars
	// than its cache saves at half price). 0 carries the title and
	// description only.
	ContextTokens *int64 `yaml:"context_tokens"`
}

// maxContextTokens bounds jobs.context_tokens (a model's whole context
// window, past any model's).
const maxContextTokens = 10_000_000

// ContextTokensOr is jobs.context_tokens, or -1 when unset: chosen by
// the head's models (workers.ContextAuto).
func (j JobsConfig) ContextTokensOr() int64 {
	if j.ContextTokens == nil {
		return -1
	}
	return *j.ContextTokens
}

// Tier configures one plan tier.
type Tier struct {
	// Weight is the tier's share under saturation (paid 8, trial 2, free 1).
	Weight int64 `yaml:"weight"`
	// Review: whether the plan includes per-file reviews.
	Review *bool `yaml:"review"`
	// QuotaTokens per quota period per installation (0: unlimited).
	QuotaTokens int64 `yaml:"quota_tokens"`
	// ChatQuotaTokens is chat's own quota per quota period per
	// installation; chat then does not draw on QuotaTokens. Defaults to 0:
	// chat shares QuotaTokens.
	ChatQuotaTokens int64 `yaml:"chat_quota_tokens"`
	// QuotaDollars caps each installation's spend per quota period, in US
	// dollars at the models' prices, as quota_tokens caps its tokens
	// (chat included). Defaults to 0: unlimited.
	QuotaDollars float64 `yaml:"quota_dollars"`
	// BudgetDollars is each installation's monthly budget (UTC months),
	// in US dollars at the models' prices: spend past 50, 75, 90 and 100%
	// of it is counted in prq_budget_installations (alerts) and shown on
	// the dashboard; nothing is refused (quota_dollars refuses). Defaults
	// to 0: none.
	BudgetDollars float64 `yaml:"budget_dollars"`
	// Lane is how the tier's summary and review jobs are called: standard,
	// flex (OpenAI's flex processing, on models with flex: true; a
	// refusal sends the job back to admission for the standard lane) or
	// batch (the providers' batch APIs, on models with batch: true; what
	// a batch does not answer within lane_wait goes to the standard
	// lane). Defaults to standard.
	Lane string `yaml:"lane"`
	// LaneWait is how long the tier's jobs may wait in the batch lane
	// before the rest go to the standard lane. Defaults to 24h (the
	// providers' completion window).
	LaneWait Duration `yaml:"lane_wait"`
}

// Lanes a tier's jobs may be called in.
const (
	LaneStandard = "standard"
	LaneFlex     = "flex"
	LaneBatch    = "batch"
)

// BatchConfig is the batch lane's: how often each worker process
// submits and polls, and a batch's size.
type BatchConfig struct {
	// Every is how often a worker process submits what the batch lane
	// holds and polls its open batches (one process at a time per
	// model). Defaults to 1m.
	Every Duration `yaml:"every"`
	// MaxRequests caps a batch's requests. Defaults to 5000.
	MaxRequests int `yaml:"max_requests"`
}

// modelHasBatch reports whether the model named has batch: true.
func (c *Config) modelHasBatch(name string) bool {
	for _, m := range c.Models {
		if m.Name == name {
			return m.Batch
		}
	}
	return false
}

// Budgets returns the monthly budget of each tier that has one.
func (c *Config) Budgets() map[string]float64 {
	out := map[string]float64{}
	for name, t := range c.Tiers {
		if t.BudgetDollars > 0 {
			out[name] = t.BudgetDollars
		}
	}
	return out
}

// ChatConfig limits who talks to the bot how often (checked at the
// webhook, before a chat job exists).
type ChatConfig struct {
	// PerUserPerHour caps one user's comments to the bot per installation
	// in any hour. Defaults to 20; 0: no limit.
	PerUserPerHour *int `yaml:"per_user_per_hour"`
	// PerPRPerHour caps one pull request's comments to the bot in any
	// hour. Defaults to 60; 0: no limit.
	PerPRPerHour *int `yaml:"per_pr_per_hour"`
}

// IntPtr returns a pointer to n (optional settings).
func IntPtr(n int) *int { return &n }

// PlanConfig seeds an installation's plan.
type PlanConfig struct {
	Installation int64  `yaml:"installation"`
	Tier         string `yaml:"tier"`
	Reason       string `yaml:"reason"`
}

// SchedulerCfg configures admission.
type SchedulerCfg struct {
	// Mode is weighted or strict. Defaults to weighted.
	Mode string `yaml:"mode"`
	// ChatShare of each bucket that batch work may not use. Defaults to 0.05.
	ChatShare *float64 `yaml:"chat_share"`
	// ChatReserve is, per model, the least of its tokens kept for chat
	// (batch may not use them): the reserve is ChatShare of each limit,
	// at least this, at most half. Unset: for the chat model a tenth of
	// its tokens' burst, for others ChatShare alone.
	ChatReserve map[string]int64 `yaml:"chat_reserve"`
	// ChatIdle is how long the reserve is kept whole after the last chat
	// waited or arrived; over as long again it decays into batch.
	// Defaults to 10m.
	ChatIdle Duration `yaml:"chat_idle"`
	// ChatCap is the largest share of a bucket's admitted tokens chat
	// takes while batch work waits. Defaults to 0.5; 1: chat always first
	// (batch then moves by the aging bound only).
	ChatCap *float64 `yaml:"chat_cap"`
	// Aging bounds how long a batch job waits before it goes first, ahead
	// of chat too. Defaults to 10m.
	Aging Duration `yaml:"aging"`
	// SendLag is how long a call takes from prq's decision to send it to
	// its arrival at the provider: a token bucket near full is held that
	// much refill below it (see admission.Config.SendLag). Defaults to
	// 250ms; 0: none.
	SendLag *Duration `yaml:"send_lag"`
}

// FiltersConfig decides which files are reviewed.
type FiltersConfig struct {
	// Exclude path globs (path.Match, plus a "dir/**" prefix form). Defaults
	// to lockfiles, vendored and generated files.
	Exclude []string `yaml:"exclude"`
}

// WorkerConfig configures job execution.
type WorkerConfig struct {
	// Concurrency is the number of jobs one process runs at once. Defaults to 20.
	Concurrency int `yaml:"concurrency"`
}

// AdminConfig protects the dashboard, admin API and asynq web UI.
type AdminConfig struct {
	// Token (PRQ_ADMIN_TOKEN) is the bearer token or basic-auth password;
	// at least 16 bytes, not a placeholder.
	Token Secret `yaml:"token"`
	// UIWrites lets the asynq web UI change state (pause queues, run,
	// delete or archive tasks). Defaults to false: the UI is read-only.
	UIWrites bool `yaml:"ui_writes"`
	// ReadOnly is the former switch; the UI is now read-only unless
	// ui_writes is true. read_only: false is refused with a pointer to
	// ui_writes, read_only: true with ui_writes: true as a contradiction.
	ReadOnly *bool `yaml:"read_only"`
}

// MetricsConfig configures /metrics.
type MetricsConfig struct {
	// RequireToken makes /metrics need the admin token like the dashboard.
	// Defaults to false (Prometheus scrapes without credentials).
	RequireToken bool `yaml:"require_token"`
	// CacheFor is how long the series read from Redis are reused between
	// scrapes. Defaults to 5s.
	CacheFor Duration `yaml:"cache_for"`
}

// GatewayConfig configures the LLM gateway (/v1/chat/completions on
// serve, and prq gateway).
type GatewayConfig struct {
	// MaxWait is the longest a request waits for admission; the
	// X-Prq-Max-Wait header may lower it. Defaults to 60s.
	MaxWait Duration `yaml:"max_wait"`
	// MinOutput is the least output worth a call: below input plus this
	// much quota left, a request is refused (403). Defaults to 16.
	MinOutput int64 `yaml:"min_output"`
	// HeaderTimeout bounds the wait for the provider's reply headers.
	// Defaults to openai.timeout.
	HeaderTimeout Duration `yaml:"header_timeout"`
	// StreamIdle is the longest a stream may go without a line from the
	// provider before the gateway ends it. Defaults to 60s.
	StreamIdle Duration `yaml:"stream_idle"`
	// FallbackWait is the longest a request waits for admission on a
	// model with fallbacks before it moves to the next. Defaults to 10s.
	FallbackWait Duration `yaml:"fallback_wait"`
	// MaxBodyBytesInFlight caps the request-body bytes held at once
	// across all keys, charged as they arrive; past it a request is
	// answered 429 with Retry-After. Defaults to 64 MiB.
	MaxBodyBytesInFlight int64 `yaml:"max_body_bytes_in_flight"`
}

// QuotaSettings configures tenant quotas.
type QuotaSettings struct {
	// Period is hour, day, week or month. Defaults to day.
	Period string `yaml:"period"`
	// PerKind splits each installation's quota per job kind.
	PerKind bool `yaml:"per_kind"`
	// WhenSpent is what a summary or review does when its installation's
	// quota is spent: wait (the pull request waits and resumes by itself
	// when the period resets; its check run says when) or skip (the file
	// is listed as skipped, the check run is neutral, never green). Chat
	// never waits: it apologises once. Defaults to wait.
	WhenSpent string `yaml:"when_spent"`
}

// DashboardCfg configures the dashboard.
type DashboardCfg struct {
	// Disabled: serve mounts no dashboard (/ and /api/dashboard); metrics,
	// the admin API and the asynq web UI stay. Defaults to false.
	Disabled bool `yaml:"disabled"`
}

// RetryConfig bounds every job's retries per class: failures, returns
// to admission after a provider 429 or account problem, GitHub
// rate-limit waits. A job whose budget is spent ends with a recorded
// reason instead of retrying.
type RetryConfig struct {
	// Batch bounds plan, file and finalize jobs. Defaults to 20 attempts
	// over 24h.
	Batch RetryBudget `yaml:"batch"`
	// Chat bounds chat replies. Defaults to 8 attempts over 30m.
	Chat RetryBudget `yaml:"chat"`
}

// RetryBudget is one class's retry budget.
type RetryBudget struct {
	// MaxAttempts counts the job's runs, the first included.
	MaxAttempts int `yaml:"max_attempts"`
	// MaxAge is how long after the job was planned it may still retry.
	MaxAge Duration `yaml:"max_age"`
}

// GitLabConfig is prq on GitLab: where it is, the webhooks' token, and
// the groups and projects whose merge requests are reviewed.
type GitLabConfig struct {
	// URL is GitLab's address: https://gitlab.com or a self-managed
	// instance's. Defaults to https://gitlab.com.
	URL string `yaml:"url"`
	// WebhookToken is the secret token of the webhooks of tenants that
	// set none of their own.
	WebhookToken Secret `yaml:"webhook_token"`
	// Tenants are the groups and projects prq reviews. Defaults to none.
	Tenants []GitLabTenantConfig `yaml:"tenants"`
}

// GitLabTenantConfig is one GitLab tenant.
type GitLabTenantConfig struct {
	// ID is the group's or project's GitLab id.
	ID int64 `yaml:"id"`
	// Path is its full path (acme, or acme/api).
	Path string `yaml:"path"`
	// Token is its group or project access token (role Developer, scope
	// api).
	Token Secret `yaml:"token"`
	// WebhookToken is its webhook's secret token; "" uses
	// gitlab.webhook_token.
	WebhookToken Secret `yaml:"webhook_token"`
	// Tier is its plan tier, written at every start like plans. Defaults
	// to default_tier.
	Tier string `yaml:"tier"`
}

// Secret is a string that never prints.
type Secret string

// String redacts the secret.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "[redacted]"
}

// MarshalYAML redacts the secret.
func (s Secret) MarshalYAML() (any, error) { return s.String(), nil }

// Duration is a time.Duration written as Go duration text in YAML.
type Duration time.Duration

// UnmarshalYAML parses Go duration text.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration (like 30s or 5m)", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes Go duration text.
func (d Duration) MarshalYAML() (any, error) { return shortDuration(d), nil }

// D returns the duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func BoolPtr(b bool) *bool { return &b }

// Default is what prq runs with when nothing is set.
func Default() Config {
	share, chatCap := 0.05, 0.5
	sendLag := Duration(250 * time.Millisecond)
	return Config{
		Addr:            ":8080",
		ShutdownTimeout: Duration(30 * time.Second),
		Log:             LogConfig{Format: "text", Level: "info"},
		GitLab:          GitLabConfig{URL: "https://gitlab.com"},
		GitHub:          GitHubConfig{APIURL: "https://api.github.com/", SkipBotPRs: BoolPtr(true), WebhookMaxBytes: 25 << 20, WriteGap: Duration(time.Second), ChatWriteBurst: IntPtr(4), CheckRunEvery: Duration(5 * time.Second)},
		OpenAI:          OpenAIConfig{Timeout: Duration(120 * time.Second), FirstByteTimeout: Duration(30 * time.Second)},
		Models: []ModelConfig{
			{Name: "gpt-4o-mini", RequestsPerMinute: 500, TokensPerMinute: 200000, MaxOutputTokens: 512},
			{Name: "gpt-4o", RequestsPerMinute: 500, TokensPerMinute: 30000, MaxOutputTokens: 1024},
		},
		Jobs: JobsConfig{SummaryModel: "gpt-4o-mini", ReviewModel: "gpt-4o", ChatModel: "gpt-4o-mini"},
		Tiers: map[string]Tier{
			"paid":  {Weight: 8, Review: BoolPtr(true)},
			"trial": {Weight: 2, Review: BoolPtr(true)},
			"free":  {Weight: 1, Review: BoolPtr(false)},
		},
		DefaultTier: "free",
		Scheduler:   SchedulerCfg{Mode: "weighted", ChatShare: &share, ChatCap: &chatCap, SendLag: &sendLag, Aging: Duration(10 * time.Minute), ChatIdle: Duration(10 * time.Minute)},
		Chat:        ChatConfig{PerUserPerHour: IntPtr(20), PerPRPerHour: IntPtr(60)},
		Filters: FiltersConfig{Exclude: []string{
			"*.lock", "package-lock.json", "yarn.lock", "pnpm-lock.yaml", "go.sum", "Cargo.lock", "poetry.lock",
			"vendor/**", "node_modules/**", "third_party/**", "*.min.js", "*.min.css", "*.pb.go", "*_gen.go", "*.generated.*", "dist/**",
		}},
		Worker:  WorkerConfig{Concurrency: 20},
		Quota:   QuotaSettings{Period: "day", WhenSpent: "wait"},
		Metrics: MetricsConfig{CacheFor: Duration(5 * time.Second)},
		Retry: RetryConfig{
			Batch: RetryBudget{MaxAttempts: 20, MaxAge: Duration(24 * time.Hour)},
			Chat:  RetryBudget{MaxAttempts: 8, MaxAge: Duration(30 * time.Minute)},
		},
		Retention: Duration(14 * 24 * time.Hour),
		sources:   map[string]string{},
	}
}

// SetBy reports where the named setting was set ("environment", "flag
// --addr"), or "" when it has its default or the file's value.
func (c *Config) SetBy(name string) string { return c.sources[name] }

// SettingError names the setting and its accepted form.
type SettingError struct {
	Name, Source, Problem string
}

func (e *SettingError) Error() string {
	if e.Source != "" {
		return fmt.Sprintf("config: %s (from %s): %s", e.Name, e.Source, e.Problem)
	}
	return fmt.Sprintf("config: %s: %s", e.Name, e.Problem)
}

// Load reads the YAML file, then the environment, then the flags
// already parsed into fl.
func Load(getenv func(string) string, fl *Flags) (*Config, error) {
	c := Default()
	file := getenv("PRQ_CONFIG")
	if fl != nil && fl.config != "" {
		file = fl.config
	}
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, &SettingError{Name: "PRQ_CONFIG", Problem: err.Error()}
		}
		fc := c
		fc.Models, fc.Tiers, fc.Filters.Exclude = nil, nil, nil
		if err := decodeFile(file, b, &fc); err != nil {
			return nil, err
		}
		if fc.Models == nil {
			fc.Models = c.Models
		}
		if fc.Tiers == nil {
			fc.Tiers = c.Tiers
		} else {
			for name, t := range c.Tiers { // keep defaults for tiers the file leaves out
				if _, ok := fc.Tiers[name]; !ok {
					fc.Tiers[name] = t
				}
			}
		}
		if fc.Filters.Exclude == nil {
			fc.Filters.Exclude = c.Filters.Exclude
		}
		fc.sources = c.sources
		c = fc
		c.path = file
	}
	if err := c.readEnv(getenv); err != nil {
		return nil, err
	}
	c.readKeys(getenv)
	if fl != nil {
		if err := fl.apply(&c); err != nil {
			return nil, err
		}
	}
	return &c, nil
}

// Mode is what the configuration will run: the checks differ.
type Mode int

const (
	ModeCheck Mode = iota // only what every command needs
	ModeServe
	ModeWorker
	ModeAll
	ModeDemo
)

// A model's defaults applied where its settings are used; the
// reference (reference_text.go) shows them from here, and Effective
// fills them from the reference.
const (
	// defaultMaxOutputTokens is the output cap a call asks for when
	// models[].max_output_tokens is unset (as the workers ask).
	defaultMaxOutputTokens = 1024
	// defaultPeriod is the period of a model's limits.
	defaultPeriod = Duration(time.Minute)
)

// Limits returns the model's bucket limits.
func (m ModelConfig) Limits() (ratelimit.Limits, error) {
	l := ratelimit.Limits{
		RequestsPerPeriod: m.RequestsPerMinute, TokensPerPeriod: m.TokensPerMinute, Period: m.Period.D(),
		BurstRequests: m.BurstRequests, BurstTokens: m.BurstTokens,
		RequestsPerDay: m.RequestsPerDay, TokensPerDay: m.TokensPerDay,
		InputTokensPerPeriod: m.InputTokensPerMinute, OutputTokensPerPeriod: m.OutputTokensPerMinute,
		InputTokensPerDay: m.InputTokensPerDay, OutputTokensPerDay: m.OutputTokensPerDay,
		Limiter: ratelimit.Limiter(m.Limiter), Window: m.Window.D(), SubWindow: m.SubWindow.D(), SubWindowShare: m.SubWindowShare,
		WindowMargin: m.WindowMargin.D(), Policy: ratelimit.Policy(m.Settle),
	}
	if l.Period == 0 {
		l.Period = defaultPeriod.D()
	}
	if l.TokensPerPeriod == 0 && l.InputTokensPerPeriod > 0 && l.OutputTokensPerPeriod > 0 {
		l.TokensPerPeriod = l.InputTokensPerPeriod + l.OutputTokensPerPeriod
	}
	if l.Windowed() && l.Window == 0 {
		l.Window = l.Period
	}
	if l.BurstRequests == 0 {
		l.BurstRequests = l.RequestsPerPeriod
	}
	if l.BurstTokens == 0 {
		l.BurstTokens = l.TokensPerPeriod
	}
	return l, l.Validate()
}

// Model returns the named model's configuration.
func (c *Config) Model(name string) (ModelConfig, bool) {
	for _, m := range c.Models {
		if m.Name == name {
			return m, true
		}
	}
	return ModelConfig{}, false
}

// Redacted renders the effective configuration with every secret hidden.
func (c *Config) Redacted() string {
	out := *c
	if out.RedisURL != "" {
		out.RedisURL = RedactURL(out.RedisURL)
	}
	b, _ := yaml.Marshal(out)
	return string(b)
}

// RedactURL hides the password of a URL. A string that does not parse
// as a URL with a host but holds an @ may carry credentials anywhere:
// all of it is hidden.
func RedactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		if strings.Contains(s, "@") || err != nil {
			return "[redacted: not a URL]"
		}
		return s
	}
	if u.User == nil {
		return s
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "redacted")
	}
	return u.String()
}
