package config

// The words of the reference (prq config reference, which is
// docs/configuration.md): what each setting means, in a sentence or two,
// and what each section is for. Everything else in the reference comes
// from the definitions themselves. TestMeanings fails when a setting has
// no meaning here, or a meaning names no setting.

import (
	"reflect"

	"github.com/prq-dev/prq/webhook"
)

// literal writes a default owned by the code that applies it as the
// reference shows a value (`1024`, `1m`, `OWNER`, `MEMBER`), so the
// reference, and Effective which reads it back, follow that code.
func literal(v any) string { return formatValue(reflect.ValueOf(v)) }

// meaning is what one setting is for.
type meaning struct {
	// Text: one or two sentences; depth belongs in the docs pages, linked.
	Text string
	// Unset is what the setting comes to when it is not set and that is
	// not a value of Default(): an entry's default, or one applied where
	// the setting is used. Allowed only where Default() leaves it unset.
	Unset string
}

// part introduces a top-level section of the reference.
type part struct {
	Text string
	// UsedBy are the commands that read the section; none: every command.
	UsedBy []string
}

var parts = map[string]part{
	"":          {Text: "Settings at the top level of the file."},
	"log":       {Text: "Logging, asynq's lines included."},
	"github":    {Text: "The GitHub App prq acts as: `serve` verifies and reads its webhooks, `worker` calls the API as the App.", UsedBy: []string{"serve", "worker"}},
	"gitlab":    {Text: "GitLab, beside or instead of GitHub: `serve` takes its webhooks at `POST /webhook/gitlab`, `worker` calls its API with each tenant's access token. See [GitLab](gitlab.md).", UsedBy: []string{"serve", "worker"}},
	"openai":    {Text: "The implicit OpenAI-compatible provider, used when `providers` is empty.", UsedBy: []string{"worker", "gateway"}},
	"providers": {Text: "The LLM providers that `models` name: where each is, how it is spoken to, and the environment variables that hold its keys. Empty: one implicit provider made from `openai`. See [providers](providers.md#choosing-providers).", UsedBy: []string{"worker", "gateway"}},
	"models":    {Text: "The models prq calls, each with the limits of one key on it. A file's list replaces the default list."},
	"jobs":      {Text: "The model of each job kind; each must be one of `models`.", UsedBy: []string{"worker"}},
	"tiers":     {Text: "Plan tiers: their share under saturation, whether they get reviews, their quotas. A tier the file names replaces that default tier; the others keep their defaults."},
	"plans":     {Text: "Installations' plans, written at every start. At run time use `prq plan set` or `PUT /api/plans/{installation}`."},
	"scheduler": {Text: "Admission: who goes first when the limits bind. See [how admission decides](limiter.md#how-admission-decides)."},
	"chat":      {Text: "Limits on comments to the bot, checked at the webhook before a chat job exists.", UsedBy: []string{"serve"}},
	"filters":   {Text: "Which files of a pull request are reviewed.", UsedBy: []string{"worker"}},
	"worker":    {Text: "Job execution in each worker process.", UsedBy: []string{"worker"}},
	"admin":     {Text: "Access to the dashboard, the admin API and the asynq web UI.", UsedBy: []string{"serve", "gateway"}},
	"quota":     {Text: "Tenant quotas: how `tiers.<name>.quota_tokens` is counted."},
	"dashboard": {Text: "The dashboard at `/`.", UsedBy: []string{"serve"}},
	"retry":     {Text: "Every job's retry budget per class: failures, returns to admission after a provider 429 or account problem, GitHub rate-limit waits. A job that spends it ends with the reason recorded.", UsedBy: []string{"worker"}},
	"metrics":   {Text: "The Prometheus endpoint `/metrics`.", UsedBy: []string{"serve", "gateway"}},
	"gateway":   {Text: "The OpenAI-compatible LLM gateway (`/v1/chat/completions` on `serve`, and `prq gateway`). See [gateway](gateway.md).", UsedBy: []string{"serve", "gateway"}},
	"batch":     {Text: "The batch lane (tiers with `lane: batch`). See [lanes](reviews.md#discounted-lanes).", UsedBy: []string{"worker"}},
}

var meanings = map[string]meaning{
	"redis_url":            {Text: "Redis to use: `redis://[:password@]host:port[/db]`, `rediss://…`, `redis-sentinel://h1:26379,h2:26379?master=name` or `redis-cluster://h1:7000,h2:7001`. A password in it is redacted wherever prq prints it."},
	"addr":                 {Text: "HTTP listen address of `serve`, `all` and `gateway`."},
	"allow_eviction":       {Text: "Start although Redis's `maxmemory-policy` is not `noeviction`. Unsafe: eviction silently deletes jobs."},
	"allow_no_persistence": {Text: "Start although Redis has neither AOF nor RDB snapshots. Unsafe: a Redis restart loses acknowledged deliveries and queued jobs."},
	"retention":            {Text: "How long a pull request's state (runs, files, results, what was posted) is kept, from when each is written; a run waiting for quota longer. See [what is in Redis](architecture.md#what-is-in-redis)."},
	"shutdown_timeout":     {Text: "How long in-flight jobs may run after SIGTERM."},
	"default_tier":         {Text: "The tier of installations without a plan."},

	"log.format": {Text: "`text` or `json`."},
	"log.level":  {Text: "`debug`, `info`, `warn` or `error`."},

	"github.app_id":                      {Text: "The App's numeric id (App settings → General → About). Optional with [GitLab](gitlab.md) tenants alone.", Unset: "—"},
	"github.app_slug":                    {Text: "The bot's handle: comments mentioning `@slug` become chat."},
	"github.private_key_path":            {Text: "Path of the App's private key (PEM); or give the key itself in `github.private_key`."},
	"github.private_key":                 {Text: "The App's private key itself (PEM text), instead of `github.private_key_path`."},
	"github.webhook_secret":              {Text: "The App's webhook secret, which signs every delivery; at least 16 bytes and not a placeholder (`openssl rand -hex 32`). Optional for `serve` with [GitLab](gitlab.md) tenants alone. See [rotating secrets](operations.md#rotating-secrets-without-losing-deliveries)."},
	"github.api_url":                     {Text: "GitHub's API; Enterprise Server: `https://HOST/api/v3/`."},
	"gitlab.url":                         {Text: "GitLab's address: `https://gitlab.com` or a self-managed instance's (its API is under `/api/v4`)."},
	"gitlab.webhook_token":               {Text: "The secret token of the webhooks of tenants that set none; GitLab sends it in `X-Gitlab-Token`."},
	"gitlab.tenants":                     {Text: "The top-level groups (or single projects) whose merge requests prq reviews; each is a tenant with its own plan, quota and order."},
	"gitlab.tenants[].id":                {Text: "The group's or project's numeric GitLab id; its prq tenant id is 2^52 + id (4503599627370496 + id). Required.", Unset: "—"},
	"gitlab.tenants[].path":              {Text: "Its full path (`acme`, `acme/api`): deliveries of projects under it are its. Required.", Unset: "—"},
	"gitlab.tenants[].token":             {Text: "Its group or project access token (role Developer, scope `api`): the bot user prq writes as. Required.", Unset: "—"},
	"gitlab.tenants[].webhook_token":     {Text: "Its webhook's secret token; unset: `gitlab.webhook_token`."},
	"gitlab.tenants[].tier":              {Text: "Its tier (`paid`, `trial` or `free`), written at every start like `plans`; unset: `default_tier`."},
	"github.skip_bot_prs":                {Text: "Ignore pull requests opened by bots."},
	"github.webhook_max_bytes":           {Text: "The largest webhook body read, in bytes (25 MiB, GitHub's maximum)."},
	"github.write_gap":                   {Text: "The least time between two content-creating calls of one installation (GitHub's advice against secondary rate limits)."},
	"github.chat_write_burst":            {Text: "How many chat replies may go to one installation at once right after another write, ahead of `write_gap`; a minute still holds at most 60 s / `write_gap` + this + 1 writes (see [the write lane](architecture.md)). 0: none."},
	"github.webhook_max_in_flight_bytes": {Text: "The webhook bodies being read at once, across requests, in bytes; past it `serve` answers 503 with `Retry-After`.", Unset: "`webhook_max_bytes` + 4 MiB"},
	"github.chat_associations":           {Text: "Who may talk to the bot besides the pull request's author (GitHub's `author_association`); anyone else's mention costs nothing.", Unset: literal(webhook.DefaultChatAssociations)},
	"github.repo_config":                 {Text: "Read each repository's `.prq.yaml` from the base branch (the App needs `contents: read`): see [repository configuration](repository.md).", Unset: "`true`"},
	"github.check_runs":                  {Text: "Show each head's progress as a check run (the App needs `checks: write`); its failures never hold back a result: see [check runs](reviews.md#check-runs-never-hold-back-a-result).", Unset: "`true`"},
	"github.check_run_every":             {Text: "The least time between two progress updates of a head's check run."},
	"github.web_url":                     {Text: "GitHub's web address, for links; Enterprise Server: `https://HOST`.", Unset: "`https://github.com`"},
	"github.max_review_parts":            {Text: "The most calls one file's review may be split into; a file needing more is listed as not reviewed, with why.", Unset: "`20`"},

	"openai.api_key":  {Text: "The implicit provider's key; with `providers`, their `key_env` instead."},
	"openai.base_url": {Text: "The implicit provider's API: any OpenAI-compatible one. With `providers` set, use `providers[].base_url`.", Unset: "OpenAI's API"},
	"openai.timeout":  {Text: "The longest one provider call may take, for every provider."},

	"openai.first_byte_timeout": {Text: "A job's call with no byte of its reply within this is abandoned and retried through admission (a hung provider costs this, not `timeout`). A non-streamed reply's headers come when it is done: keep it above the longest reply."},

	"providers[].name":        {Text: "What `models[].provider` refers to: lower-case letters, digits, `-` and `_`."},
	"providers[].kind":        {Text: "`openai` (OpenAI or any compatible API), `azure` (Azure OpenAI) or `anthropic` (Anthropic's Messages API)."},
	"providers[].base_url":    {Text: "The API's address, without credentials; required for `azure` (`https://RESOURCE.openai.azure.com`).", Unset: "the kind's public API"},
	"providers[].key_env":     {Text: "The environment variable holding the key, or a list of up to 16 (one key each, each with its own limits). Required. See [several keys per model](providers.md#several-keys-per-model)."},
	"providers[].api_version": {Text: "Azure's `api-version` query parameter; required for `azure` only."},
	"providers[].deployments": {Text: "Azure only: model name → deployment name.", Unset: "each model is its own deployment"},

	"models[].name":                     {Text: "The model's name as the provider knows it. Required."},
	"models[].provider":                 {Text: "The `providers[].name` that serves the model; required when there are several.", Unset: "the only provider"},
	"models[].requests_per_minute":      {Text: "Requests one key may send per period (RPM). Required.", Unset: "—"},
	"models[].tokens_per_minute":        {Text: "Tokens (input + output) one key may use per period (TPM). Required, unless both input and output limits are set.", Unset: "the sum of the input and output limits, when both are set"},
	"models[].burst_requests":           {Text: "Requests a token bucket admits at once after idleness.", Unset: "a full period's requests"},
	"models[].burst_tokens":             {Text: "Tokens a token bucket admits at once after idleness.", Unset: "a full period's tokens"},
	"models[].requests_per_day":         {Text: "A daily request limit; 0: none."},
	"models[].tokens_per_day":           {Text: "A daily token limit; 0: none."},
	"models[].input_tokens_per_minute":  {Text: "A limit on input tokens alone (Anthropic's ITPM); 0: none. See [providers](providers.md#choosing-providers)."},
	"models[].output_tokens_per_minute": {Text: "A limit on output tokens alone (Anthropic's OTPM); 0: none."},
	"models[].input_tokens_per_day":     {Text: "A daily limit on input tokens; 0: none."},
	"models[].output_tokens_per_day":    {Text: "A daily limit on output tokens; 0: none."},
	"models[].reasoning":                {Text: "A reasoning model: asked with `max_completion_tokens` instead of `max_tokens`."},
	"models[].flex":                     {Text: "The model serves OpenAI's flex processing (`service_tier: flex`): batch prices, slower, sometimes refused. Used by the jobs of a tier with `lane: flex`. See [lanes](reviews.md#discounted-lanes)."},
	"models[].batch":                    {Text: "The provider's batch API serves the model (OpenAI's Batch API, Azure's global batch deployments, Anthropic's Message Batches): used by the jobs of a tier with `lane: batch`. See [lanes](reviews.md#discounted-lanes)."},
	"models[].batch_queue_tokens":       {Text: "The input tokens the model's batches not yet over may hold (OpenAI's enqueued-token limit); 0: the provider's refusal alone bounds them."},
	"models[].cached_input_counts":      {Text: "The provider counts input read from its prompt cache toward the input and token limits: prq settles a call's cache reads back to the limiter where it does not. See [prompts and the prompt cache](reviews.md#prompts-and-the-prompt-cache).", Unset: "`false` for Anthropic models, `true` otherwise"},
	"models[].max_output_tokens":        {Text: "The output cap a worker's call asks for. The gateway gives it to a request that sets none when it is set, and `4096` when it is not (agents' replies run longer; a request may ask for up to `context_tokens`).", Unset: literal(defaultMaxOutputTokens)},
	"models[].context_tokens":           {Text: "The model's context window.", Unset: "`128000`"},
	"models[].period":                   {Text: "The period of the per-minute limits; the demo compresses it.", Unset: literal(defaultPeriod)},
	"models[].limiter":                  {Text: "How the provider counts: `bucket` (continuous refill, OpenAI's), `window` (at most the limits in any sliding window) or `auto`. See [providers that count in windows](providers.md#providers-that-count-in-windows).", Unset: "`bucket`"},
	"models[].window":                   {Text: "A window limiter's span.", Unset: "the period"},
	"models[].sub_window":               {Text: "Window limiter only: also cap any shorter sub-window at `sub_window_share` of the limits."},
	"models[].sub_window_share":         {Text: "The share of the limits any sub-window may hold, in (0, 1].", Unset: "`sub_window` / `window`"},
	"models[].window_margin":            {Text: "How much longer than the window a window limiter holds each admission, for the call's way to the provider.", Unset: "measured from the calls, at most window/60"},
	"models[].fallbacks":                {Text: "Models a gateway request or a summary or review job moves to, in order, when this one cannot serve it, through admission and under the same quota. See [fallback models](providers.md#fallback-models) and the [gateway's](gateway.md#fallbacks)."},
	"models[].settle":                   {Text: "How a call's real usage corrects its admitted estimate: `estimate`, `debt` or `refund`. See [settling usage](providers.md#settling-usage).", Unset: "`estimate`"},
	"models[].output_format":            {Text: "How reviews are asked for: `json_schema`, `json_object` or `text`. See [model output](reviews.md#model-output).", Unset: "by model family"},

	"jobs.summary_model":  {Text: "The model of per-file summaries."},
	"jobs.review_model":   {Text: "The model of per-file reviews."},
	"jobs.chat_model":     {Text: "The model of chat replies."},
	"jobs.context_tokens": {Text: "How many tokens of a pull request's file list and diffs each of its prompts carries beside its own file, so the change is reviewed whole; they sit in the prefix the prompt cache serves: see [reviews](reviews.md#prompts-and-the-prompt-cache). 0: title and description only.", Unset: "`2000` where the summary and review models read their prompt cache free of their input limits (`cached_input_counts: false`, Anthropic's default), else `0` (OpenAI counts cached tokens toward TPM)"},
	"jobs.reuse_results":  {Text: "Reuse a file's result, for 6 h, for any job whose prompt was answered already (a head that replaced it, a pull request reopened) instead of paying again: see [reviews](reviews.md#never-paid-twice).", Unset: "`true`"},

	"tiers.<name>.weight":            {Text: "The tier's share under saturation. Required, positive.", Unset: "—"},
	"tiers.<name>.review":            {Text: "Whether the tier gets per-file reviews (summaries it always gets).", Unset: "`true`"},
	"tiers.<name>.quota_tokens":      {Text: "Tokens per quota period per installation; 0: unlimited."},
	"tiers.<name>.lane":              {Text: "`standard`, `flex` (models with `flex: true` at OpenAI's flex processing: half price, slower; a refusal sends the job to the standard lane) or `batch` (models with `batch: true` through the providers' batch APIs: half price, within `lane_wait`). See [lanes](reviews.md#discounted-lanes).", Unset: "`standard`"},
	"tiers.<name>.lane_wait":         {Text: "How long the tier's jobs may wait in the batch lane; what a batch has not answered by then goes to the standard lane. See [lanes](reviews.md#discounted-lanes).", Unset: "`24h`"},
	"tiers.<name>.budget_dollars":    {Text: "US dollars per month (UTC) per installation: spend past 50, 75, 90 and 100% of it raises alerts and nothing is refused. See [budgets](reviews.md#what-a-review-costs). 0: none."},
	"tiers.<name>.quota_dollars":     {Text: "US dollars per quota period per installation, at the models' prices (`models[].prices`), reserved and capped exactly as `quota_tokens` (chat included); every model needs prices. 0: unlimited."},
	"tiers.<name>.chat_quota_tokens": {Text: "Chat's own quota per quota period per installation; 0: chat shares `quota_tokens`."},

	"plans[].installation": {Text: "The installation's id. Required.", Unset: "—"},
	"plans[].tier":         {Text: "Its tier: `paid`, `trial` or `free`."},
	"plans[].reason":       {Text: "Why, for the record."},

	"scheduler.mode":         {Text: "`weighted` (tiers share by weight) or `strict` (paid before trial before free, no sharing)."},
	"scheduler.chat_share":   {Text: "The share of each limit that batch work may not use, kept for chat; in [0, 1)."},
	"scheduler.chat_reserve": {Text: "Per model (`{model: tokens}`), the least of its tokens kept for chat: chat's reserve is `chat_share` of each limit, at least this, at most half. See [the limiter](limiter.md#how-admission-decides).", Unset: "`jobs.chat_model`: a tenth of its tokens' burst; others: `chat_share` alone"},
	"scheduler.chat_idle":    {Text: "How long chat's reserve is kept whole after the last chat waited or arrived; over as long again it decays into batch."},
	"scheduler.chat_cap":     {Text: "The largest share of admitted tokens chat takes while batch work waits, in (0, 1]; 1: chat always first."},
	"scheduler.aging":        {Text: "The longest a batch job waits before it goes first, ahead of chat too."},
	"scheduler.send_lag":     {Text: "The time from prq's decision to send a call to its arrival at the provider: a token bucket near full is held that much refill below it; in [0, 10s]."},

	"chat.per_user_per_hour": {Text: "One user's comments to the bot per installation in any hour; 0: no limit."},
	"chat.per_pr_per_hour":   {Text: "One pull request's comments to the bot in any hour; 0: no limit."},

	"filters.exclude": {Text: "Path globs never reviewed (`path.Match`, plus `dir/**` for a tree)."},

	"batch.every":        {Text: "How often a worker process submits the jobs the batch lane holds and polls its open batches (one process at a time per model).", Unset: "`1m`"},
	"batch.max_requests": {Text: "The most requests one batch holds (OpenAI's limit is 50,000).", Unset: "`5000`"},
	"worker.concurrency": {Text: "Jobs one worker process runs at once, plus max(2, concurrency/10) slots kept for chat."},

	"admin.token":     {Text: "Bearer token or basic-auth password of `/`, `/api/` and `/monitoring/`; at least 16 bytes, not a placeholder. `serve` requires it unless it listens on loopback."},
	"admin.ui_writes": {Text: "Let the asynq web UI change state (pause queues, run, delete or archive tasks); off, it is read-only."},
	"admin.read_only": {Text: "The former switch, accepted only as `true`; use `ui_writes`."},

	"models[].prices":              {Text: "The model's prices in US dollars per million tokens, for what its calls cost (`prq_llm_cost_dollars_total`). Defaults to the provider's list prices prq knows (see [the bill](reviews.md#what-a-review-costs)), else none: the model's calls are not priced."},
	"models[].prices.input":        {Text: "Dollars per million input tokens not served from the prompt cache."},
	"models[].prices.cached_input": {Text: "Dollars per million input tokens served from the provider's prompt cache; 0: charged as input."},
	"models[].prices.cache_write":  {Text: "Dollars per million input tokens written to the prompt cache (Anthropic's 5-minute writes); 0: charged as input."},
	"models[].prices.output":       {Text: "Dollars per million output tokens."},
	"github.summary_cost":          {Text: "Show what each reviewed head's calls cost, at the models' prices (`models[].prices`), in the summary comment's footer."},
	"quota.period":                 {Text: "`hour`, `day`, `week` or `month`: UTC calendar windows."},
	"quota.per_kind":               {Text: "Split each installation's quota per job kind."},
	"quota.when_spent": {Text: "`wait`: a pull request whose installation's quota is spent waits and resumes by itself when the period resets (its check run says when). " +
		"`skip`: its files are listed as skipped and the check run is neutral, never green. Chat never waits: it apologises once."},

	"dashboard.disabled": {Text: "Mount no dashboard (`/`, `/api/dashboard`); metrics, the admin API and `/monitoring/` stay."},

	"retry.batch":              {Text: "The budget of plan, file and finalize jobs."},
	"retry.batch.max_attempts": {Text: "Runs of a job, the first included."},
	"retry.batch.max_age":      {Text: "How long after it was planned a job may still retry."},
	"retry.chat":               {Text: "The budget of chat replies."},
	"retry.chat.max_attempts":  {Text: "Runs of a reply, the first included."},
	"retry.chat.max_age":       {Text: "How long after it was planned a reply may still retry."},

	"metrics.require_token": {Text: "`/metrics` needs `admin.token` too; off, Prometheus scrapes without credentials."},
	"metrics.cache_for":     {Text: "How long the series read from Redis serve further scrapes."},

	"gateway.max_wait":       {Text: "The longest a request waits for admission; the `X-Prq-Max-Wait` header may lower it.", Unset: "`60s`"},
	"gateway.min_output":     {Text: "The least output worth a call: with less quota left than the input plus this, a request is refused (403).", Unset: "`16`"},
	"gateway.header_timeout": {Text: "The longest wait for the provider's reply headers (then 504).", Unset: "`openai.timeout`"},
	"gateway.stream_idle":    {Text: "The longest a stream may go without a line from the provider before the gateway ends it.", Unset: "`60s`"},
	"gateway.fallback_wait":  {Text: "The longest a request waits for admission on a model with `fallbacks` before it moves to the next.", Unset: "`10s`"},

	"gateway.max_body_bytes_in_flight": {Text: "The request-body bytes held at once across all keys, charged as they arrive; past it a request is answered 429 with `Retry-After`.", Unset: "64 MiB"},
	"models[].first_byte_timeout":      {Text: "`openai.first_byte_timeout` for this model's calls.", Unset: "`openai.first_byte_timeout`; none for a `reasoning` model"},
}
