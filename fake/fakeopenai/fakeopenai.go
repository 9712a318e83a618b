// Package fakeopenai is a faithful fake of an OpenAI-compatible chat
// completions provider for tests, the demo and the benchmark. It is a
// real HTTP server: it enforces requests/min and tokens/min per model and
// API key the way OpenAI does at admission (ceil(chars/4) + max output
// tokens, continuous refill), answers 429 with OpenAI's error body and
// retry headers, sets x-ratelimit-* on every response, takes seconds for
// heavy models, cites real diff lines in reviews, and injects faults on
// request. It keeps the counters a benchmark needs. With Limiter "window"
// it enforces a sliding window instead: at most RPM and TPM in any
// (t−Period, t], as many gateways do. It also speaks Anthropic's
// Messages API (/v1/messages, anthropic.go: input and output tokens
// limited separately; prompt caching by cache_control breakpoints,
// anthropic_cache.go) and Azure OpenAI's deployment paths (azure.go),
// with the same limits, faults and counters. It is not prq's
// limiter: it shares no code with package ratelimit.
package fakeopenai

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/tiktoken-go/tokenizer"
)

// DefaultMaxOutput is charged when a request sets neither max_tokens nor
// max_completion_tokens.
const DefaultMaxOutput = 4096

// Model is one model's limits and behaviour.
type Model struct {
	Name string
	// RPM and TPM are the limits per Period.
	RPM, TPM int64
	// Latency is the mean time to answer; Jitter the spread (uniform ±).
	Latency, Jitter time.Duration
	// ContextTokens is the context window. Defaults to 128000.
	ContextTokens int64
	// ITPM and OTPM are the input and output tokens per Period of the
	// Anthropic mode (/v1/messages), which limits them separately.
	// Default to TPM.
	ITPM, OTPM int64
	// CacheMinTokens is the Anthropic mode's minimum cacheable prompt
	// length: a prefix shorter than this is never cached. Defaults to
	// Anthropic's figure for the model's name (cacheMinimums,
	// anthropic_cache.go), else DefaultCacheMinTokens.
	CacheMinTokens int64
	// CacheReadsCount: the Anthropic mode's input limit counts cache
	// reads, as Anthropic's rate-limit tables mark for some older models
	// (set for their names: cacheReadsCounted); otherwise only uncached
	// input and cache writes count.
	CacheReadsCount bool
	// Flex: the model serves OpenAI's flex processing (service_tier
	// "flex"): FlexSlowdown times slower, and refused at Faults'
	// FlexUnavailable rate. A flex request for a model without it is
	// refused (400), as OpenAI refuses one for a model flex does not serve.
	Flex bool
	// BatchLatency is how long a batch of this model's requests takes
	// to complete on the fake's clock (Config.Now), scaled by
	// LatencyScale; its requests finish evenly over it. Defaults to
	// DefaultBatchLatency.
	BatchLatency time.Duration
	// BatchTokens is OpenAI's enqueued-token limit: the prompt tokens
	// of a key's batches of the model not yet over; a batch that would
	// pass it fails validation (token_limit_exceeded). 0: no limit.
	BatchTokens int64
	// BatchRequests is Anthropic's limit of a key's batch requests of
	// the model waiting in the queue (not yet answered); a batch that
	// would pass it is refused (429 rate_limit_error). 0: no limit.
	BatchRequests int64
}

// FlexSlowdown is how much slower a flex call answers than a standard
// one.
const FlexSlowdown = 3

// Faults are probabilities (0..1) of injected failures per request, after
// admission (a faulted request still counts against the limits, as a real
// provider's would).
type Faults struct {
	ServerError  float64 `json:"server_error"`  // 500/503
	Timeout      float64 `json:"timeout"`       // hang until the client gives up
	Truncated    float64 `json:"truncated"`     // 200 with cut-off JSON
	Empty        float64 `json:"empty"`         // 200 with empty content
	TooMany      float64 `json:"too_many"`      // spurious 429 (a shared key's other users)
	NoQuota      bool    `json:"no_quota"`      // every request: 429 insufficient_quota
	TimeoutAfter string  `json:"timeout_after"` // how long a timeout hangs; default 60s
	// FlexUnavailable refuses flex requests with 429 "resource
	// unavailable", before admission (not billed, not counted).
	FlexUnavailable float64 `json:"flex_unavailable"`
	// FlexRefuseEvery, when positive, refuses every Nth flex request of a
	// model so (deterministic, for tests).
	FlexRefuseEvery int `json:"flex_refuse_every"`
	// BatchExpire is the probability that a batch expires (batch.go):
	// only the first BatchExpireDone (0..1) of its requests are
	// answered, the rest expire when its completion window closes.
	BatchExpire     float64 `json:"batch_expire"`
	BatchExpireDone float64 `json:"batch_expire_done"`
	// BatchFail is the probability that a batch fails: OpenAI's fails
	// validation with a server_error, every request of Anthropic's ends
	// errored (api_error).
	BatchFail float64 `json:"batch_fail"`
	// BatchRequestError is the probability that a batch request is
	// answered with a server error (OpenAI: status 500 in the error
	// file; Anthropic: an errored api_error result).
	BatchRequestError float64 `json:"batch_request_error"`
}

// Config configures the fake.
type Config struct {
	Models []Model
	// Period of the limits. Defaults to one minute; compress it for tests.
	Period time.Duration
	// Keys accepted; empty accepts any non-empty key.
	Keys []string
	// Seed makes latencies and faults repeatable.
	Seed int64
	// LatencyScale multiplies every latency (0.1 to compress time). Defaults to 1.
	LatencyScale float64
	// Record keeps every admission for Admissions, and every chat
	// completion request for Calls (bounded runs only).
	Record bool
	// Replies is how the fake model formats review replies: one of the
	// Reply* styles. Defaults to ReplyJSON.
	Replies ReplyStyle
	// Wording picks one of the ways the fake words its findings (any
	// number; they cycle): a review's findings are deterministic in each
	// line's path and content, so the same line gets the same finding on
	// every head, and another Wording says the same thing in other words.
	Wording int
	// Limiter is how the limits are counted: "bucket" (continuous refill,
	// OpenAI's) or "window" (at most the limits in any sliding Period; the
	// reset headers say when the window empties, a 429's retry when enough
	// of it has left). Defaults to bucket.
	Limiter string
	// Deployments maps Azure deployment names to models (the Azure mode,
	// /openai/deployments/{deployment}/chat/completions). Defaults to
	// each model being its own deployment.
	Deployments map[string]string
	// Verbose answers prompts other than reviews at full length, up to
	// the request's max output tokens, as talkative models do (an agent's
	// quota meets the whole of its max_tokens).
	Verbose bool
	// Now is the limiters' clock. Defaults to time.Now; a test that runs
	// admission on a stepped clock steps this one with it.
	Now func() time.Time
	// BatchWindow is a batch's completion window on that clock: a
	// request not answered within it expires. Defaults to 24 hours.
	BatchWindow time.Duration
}

// ReplyStyle is how a fake model answers a review prompt, modelled on
// what real models and OpenAI-compatible servers do.
type ReplyStyle string

const (
	// ReplyJSON: the bare JSON object the system prompt asks for.
	ReplyJSON ReplyStyle = "json"
	// ReplyProse: prose about the file, no JSON, unless the request's
	// response_format asks for JSON (smaller models and servers that
	// follow the system prompt loosely).
	ReplyProse ReplyStyle = "prose"
	// ReplyFenced: the JSON inside a ```json fence with prose around it,
	// and a `{}` quoted from the code before it, unless response_format
	// asks for JSON.
	ReplyFenced ReplyStyle = "fenced"
	// ReplyOutside: JSON whose comments cite lines outside the diff as
	// well as inside it.
	ReplyOutside ReplyStyle = "outside"
	// ReplyCut: the JSON cut off halfway with finish_reason "length".
	ReplyCut ReplyStyle = "cut"
	// ReplyLoose: a server that accepts a strict schema without
	// enforcing it, under every output format: each comment carries
	// fields of the model's own ("path", "severity", "suggestion"), line
	// numbers come as strings, the list is named "findings", and the
	// object has a "verdict".
	ReplyLoose ReplyStyle = "loose"
	// ReplyInject: the JSON asked for, but summaries, the comments'
	// bodies and chat answers carry what an injected prompt makes a model
	// write: mentions, images, raw HTML, outside links, escapes.
	ReplyInject ReplyStyle = "inject"
	// ReplyInjectGitLab: ReplyInject with what GitLab reads beyond
	// GitHub: quick-action lines (/merge, /approve), @all and the
	// references GitLab links and notifies (GitLabInjection).
	ReplyInjectGitLab ReplyStyle = "inject-gitlab"
)

// Injection is what ReplyInject adds to the model's text: a team and a
// user mention (one behind an escape of its own), a remote image, raw
// HTML, an outside link and a hidden marker.
const Injection = "cc @acme/security-team and \\@octocat ![x](https://evil.example/p.png) <img src=\"https://evil.example/q.png\"> [log in](https://evil.example/login) <!-- prq:summary -->"

// GitLabInjection is what ReplyInjectGitLab adds: Injection, then quick
// actions on lines of their own and GitLab's mentions and references.
const GitLabInjection = Injection + "\n/merge\n/approve\ncc @all, see #12, !3, ~bug, %v1, &4 and $5"

// injection is what the style adds to the model's text ("" for none).
func (r ReplyStyle) injection() string {
	switch r {
	case ReplyInject:
		return Injection
	case ReplyInjectGitLab:
		return GitLabInjection
	}
	return ""
}

// ParseReplyStyle reads a reply style ("" is ReplyJSON).
func ParseReplyStyle(s string) (ReplyStyle, error) {
	switch r := ReplyStyle(s); r {
	case "":
		return ReplyJSON, nil
	case ReplyJSON, ReplyProse, ReplyFenced, ReplyOutside, ReplyCut, ReplyLoose, ReplyInject, ReplyInjectGitLab:
		return r, nil
	}
	return "", fmt.Errorf("fakeopenai: reply style %q: want json, prose, fenced, outside, cut, loose, inject or inject-gitlab", s)
}

// Limiter values.
const (
	LimiterBucket = "bucket"
	LimiterWindow = "window"
)

// Admission is one admitted request's cost, stamped with the fake's clock.
type Admission struct {
	At   time.Time
	Cost int64
	// Key is the short hash of the API key the request was charged to
	// (KeyLabel): every key has limits of its own.
	Key string
	// Input and Output are what the Anthropic mode charged each of its
	// token limits (Cost is their sum); 0 in the OpenAI modes.
	Input, Output int64
	// Prompt is the Anthropic mode's prompt tokens, those its input limit
	// did not count (cache reads) included.
	Prompt int64
}

// KeyLabel is how the fake names an API key in what it records: the
// first 12 hex digits of its SHA-256 (prq's ratelimit.KeyHash).
func KeyLabel(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:6])
}

// Admissions returns every admission of a model (Config.Record).
func (s *Server) Admissions(model string) []Admission {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Admission(nil), s.recorded[model]...)
}

// Call is one chat completion request the fake received (Config.Record),
// attributed by what prq's prompts say of themselves: the first user
// message's "Pull request: <title>" and "File: <path>" lines and a
// review part's "part k of n"; Kind is how the fake read the prompt
// ("review", "chat", or "text" for a summary or anything else). Status is
// what the fake answered (0: the client went away first); Complete says
// the answer was whole and no fault was injected into it.
type Call struct {
	At          time.Time
	Model, Kind string
	Title, Path string
	Part, Parts int
	Status      int
	Complete    bool
	// Prompt is the request's first user message, System its system
	// message.
	Prompt, System string
	// CacheKey is the request's prompt_cache_key.
	CacheKey string
	// Batch: the request came in a batch (batch.go), At on the fake's
	// clock when it was answered; Status is its response's status.
	Batch bool
}

var (
	titleLine = regexp.MustCompile(`(?m)^Pull request: (.*)$`)
	partOf    = regexp.MustCompile(`, part (\d+) of (\d+) of its diff`)
)

// promptHash identifies what a request asks: its model, messages and
// response format.
func promptHash(model string, req chatRequest) [32]byte {
	h := sha256.New()
	h.Write([]byte(model + "\x00"))
	for _, m := range req.Messages {
		h.Write([]byte(m.Role + "\x00" + m.Content + "\x00"))
	}
	if req.ResponseFormat != nil {
		b, _ := json.Marshal(req.ResponseFormat)
		h.Write(b)
	}
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out
}

// callOf attributes a request (see Call).
func callOf(req chatRequest, model string, at time.Time) Call {
	c := Call{At: at, Model: model, Kind: kindOf(req), Part: 1, Parts: 1, CacheKey: req.PromptCacheKey}
	user := taskOf(req)
	c.Prompt = firstUser(req)
	if len(req.Messages) > 0 && req.Messages[0].Role == "system" {
		c.System = req.Messages[0].Content
	}
	head, _, _ := strings.Cut(user, "\n\n") // the header, before the diff
	if m := titleLine.FindStringSubmatch(c.Prompt); m != nil {
		c.Title = m[1]
	}
	if m := pathLine.FindStringSubmatch(head); m != nil {
		c.Path = m[1]
	}
	if m := partOf.FindStringSubmatch(head); m != nil {
		c.Part, _ = strconv.Atoi(m[1])
		c.Parts, _ = strconv.Atoi(m[2])
	}
	return c
}

// Calls returns every chat completion request received (Config.Record),
// in order.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// statusWriter remembers the status a handler answered.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Server is the fake provider.
type Server struct {
	cfg    Config
	models map[string]Model
	codec  tokenizer.Codec

	// batches are the batch APIs' files and batches, behind their own
	// lock; batchStats their counters by model, behind mu (batch.go).
	batches    batchStore
	batchStats map[string]*BatchStats

	mu       sync.Mutex
	rng      *rand.Rand
	buckets  map[string]*bucket
	faults   Faults
	stats    map[string]*modelStats
	answered map[[32]byte]bool    // prompts answered whole (Repeats)
	prefixes map[uint64]time.Time // prompt prefixes cached, by hash: when last sent (cache.go)
	recorded map[string][]Admission
	calls    []Call
	// msgBuckets are the Anthropic mode's (model, key) limiters.
	msgBuckets map[string]*msgBucket
	// msgCache is the Anthropic mode's prompt cache: entries by the hash
	// of a prefix (with its key and model; anthropic_cache.go).
	msgCache map[uint64]cacheEntry
}

// bucket is one (model, key)'s limiter state: a token bucket, or the
// admissions still in the window. The token bucket's levels are kept
// scaled by the period in µs (level·period_µs), so its refill
// (elapsed_µs·limit) is exact: a float level drifts below a whole token
// and refuses a call an exact limiter admits.
type bucket struct {
	req, tok int64 // scaled levels
	last     time.Time
	win      []admission
	winTok   int64
}

type admission struct {
	at   time.Time
	cost int64
}

type modelStats struct {
	Requests         int64 `json:"requests"`
	RateLimited      int64 `json:"rate_limited"`
	Faults           int64 `json:"faults"`
	LastFault        time.Time
	AdmittedTokens   int64 `json:"admitted_tokens"`
	CompletionToks   int64 `json:"completion_tokens"`
	Answered         int64
	Repeats          int64
	PromptTokens     int64
	CachedTokens     int64
	CacheWriteTokens int64
	Flex             int64 // flex requests, refused ones included
	FlexRefused      int64
	formats          map[string]int64
	bill             map[string]*Usage // by lane (billOf)
	window           []admission       // admissions of the last period
	windowSum        int64
	maxWindow        int64
}

// Usage is what a model's answered requests of one lane were billed
// for: requests, prompt tokens (all of them), of those the ones read
// from the prompt cache and the ones written to it, and output tokens.
type Usage struct {
	Requests   int64 `json:"requests"`
	Prompt     int64 `json:"prompt_tokens"`
	Cached     int64 `json:"cached_tokens"`
	CacheWrite int64 `json:"cache_write_tokens"`
	Output     int64 `json:"output_tokens"`
}

// Lanes of Usage: the synchronous API at the standard price, OpenAI's
// flex processing, the batch APIs.
const (
	LaneSync  = "sync"
	LaneFlex  = "flex"
	LaneBatch = "batch"
)

// laneOf is the lane a chat completion's service tier bills in.
func laneOf(serviceTier string) string {
	if serviceTier == "flex" {
		return LaneFlex
	}
	return LaneSync
}

// billed adds an answered request to its lane's Usage. Caller holds mu.
func (st *modelStats) billed(lane string, prompt, cached, written, output int64) {
	if st.bill == nil {
		st.bill = map[string]*Usage{}
	}
	u := st.bill[lane]
	if u == nil {
		u = &Usage{}
		st.bill[lane] = u
	}
	u.Requests++
	u.Prompt += prompt
	u.Cached += cached
	u.CacheWrite += written
	u.Output += output
}

// admit records an admission in the sliding window of one period.
func (st *modelStats) admit(now time.Time, cost int64, per time.Duration) {
	st.AdmittedTokens += cost
	st.window = append(st.window, admission{at: now, cost: cost})
	st.windowSum += cost
	for now.Sub(st.window[0].at) >= per {
		st.windowSum -= st.window[0].cost
		st.window = st.window[1:]
	}
	st.maxWindow = max(st.maxWindow, st.windowSum)
}

// New returns a fake provider.
func New(cfg Config) *Server {
	if cfg.Period == 0 {
		cfg.Period = time.Minute
	}
	if cfg.LatencyScale == 0 {
		cfg.LatencyScale = 1
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Limiter == "" {
		cfg.Limiter = LimiterBucket
	}
	if cfg.Limiter != LimiterBucket && cfg.Limiter != LimiterWindow {
		panic(fmt.Sprintf("fakeopenai: limiter must be %q or %q, got %q", LimiterBucket, LimiterWindow, cfg.Limiter))
	}
	codec, err := tokenizer.Get(tokenizer.O200kBase)
	if err != nil {
		panic(fmt.Sprintf("fakeopenai: tokenizer: %v", err)) // embedded vocabulary
	}
	s := &Server{cfg: cfg, models: map[string]Model{}, codec: memoize(codec), rng: rand.New(rand.NewSource(cfg.Seed)),
		buckets: map[string]*bucket{}, msgBuckets: map[string]*msgBucket{}, stats: map[string]*modelStats{}, recorded: map[string][]Admission{},
		answered: map[[32]byte]bool{}, prefixes: map[uint64]time.Time{}, msgCache: map[uint64]cacheEntry{}}
	for _, m := range cfg.Models {
		if m.ContextTokens == 0 {
			m.ContextTokens = 128000
		}
		if m.CacheMinTokens == 0 {
			m.CacheMinTokens = cacheMinOf(m.Name)
		}
		m.CacheReadsCount = m.CacheReadsCount || readsCountOf(m.Name)
		s.models[m.Name] = m
	}
	return s
}

// SetLatencyScale changes how latencies are scaled (1: as configured).
func (s *Server) SetLatencyScale(f float64) {
	s.mu.Lock()
	s.cfg.LatencyScale = f
	s.mu.Unlock()
}

// SetLimiter switches how the limits are counted ("bucket" or "window");
// the limiter state starts afresh.
func (s *Server) SetLimiter(limiter string) error {
	if limiter != LimiterBucket && limiter != LimiterWindow {
		return fmt.Errorf("fakeopenai: limiter must be %q or %q, got %q", LimiterBucket, LimiterWindow, limiter)
	}
	s.mu.Lock()
	s.cfg.Limiter = limiter
	s.buckets = map[string]*bucket{}
	s.msgBuckets = map[string]*msgBucket{}
	s.mu.Unlock()
	return nil
}

// SetFaults replaces the injected faults.
func (s *Server) SetFaults(f Faults) {
	s.mu.Lock()
	s.faults = f
	s.mu.Unlock()
}

// ServeHTTP serves /v1/chat/completions and /v1/models (under any base
// path), the counters at /_fake/stats and the faults at /_fake/faults.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case isBatchPath(r.URL.Path): // batch.go
		s.serveBatches(w, r)
	case strings.Contains(r.URL.Path, "/openai/deployments/"):
		s.azure(w, r)
	case strings.HasSuffix(r.URL.Path, "/chat/completions") && r.Method == http.MethodPost:
		key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || !s.keyOK(key) {
			writeError(w, http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", "Incorrect API key provided.")
			return
		}
		s.completions(w, r, key, "")
	case strings.HasSuffix(r.URL.Path, "/embeddings") && r.Method == http.MethodPost:
		key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || !s.keyOK(key) {
			writeError(w, http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", "Incorrect API key provided.")
			return
		}
		s.embeddings(w, r, key, "") // embeddings.go
	case strings.HasSuffix(r.URL.Path, "/models") && r.Method == http.MethodGet:
		s.listModels(w, r)
	case strings.HasSuffix(r.URL.Path, "/v1/messages") && r.Method == http.MethodPost:
		s.messages(w, r)
	case strings.HasSuffix(r.URL.Path, "/_fake/stats"):
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(s.Stats())
	case strings.HasSuffix(r.URL.Path, "/_fake/faults") && r.Method == http.MethodPost:
		var f Faults
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&f); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.SetFaults(f)
		w.WriteHeader(http.StatusNoContent)
	default:
		writeError(w, http.StatusNotFound, "invalid_request_error", "unknown_url", fmt.Sprintf("Unknown request URL: %s %s.", r.Method, r.URL.Path))
	}
}

type chatRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
	MaxTokens           *int64          `json:"max_tokens"`
	MaxCompletionTokens *int64          `json:"max_completion_tokens"`
	ResponseFormat      *responseFormat `json:"response_format"`
	Stream              bool            `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	ServiceTier string `json:"service_tier"`
	// PromptCacheKey groups requests on one cache (OpenAI's
	// prompt_cache_key; a string, as the API requires).
	PromptCacheKey string `json:"prompt_cache_key"`
}

type responseFormat struct {
	Type       string `json:"type"`
	JSONSchema *struct {
		Name   string          `json:"name"`
		Schema json.RawMessage `json:"schema"`
		Strict bool            `json:"strict"`
	} `json:"json_schema"`
}

// checkFormat validates response_format the way OpenAI does.
func checkFormat(req chatRequest) string {
	f := req.ResponseFormat
	if f == nil {
		return ""
	}
	switch f.Type {
	case "text":
	case "json_object":
		for _, m := range req.Messages {
			if strings.Contains(strings.ToLower(m.Content), "json") {
				return ""
			}
		}
		return "'messages' must contain the word 'json' in some form, to use 'response_format' of type 'json_object'."
	case "json_schema":
		if f.JSONSchema == nil {
			return "Missing required parameter: 'response_format.json_schema'."
		}
		if f.JSONSchema.Name == "" || !regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`).MatchString(f.JSONSchema.Name) {
			return "Invalid 'response_format.json_schema.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'."
		}
		var sch map[string]any
		if json.Unmarshal(f.JSONSchema.Schema, &sch) != nil || sch["type"] != "object" {
			return "Invalid schema for response_format '" + f.JSONSchema.Name + "': schema must be a JSON Schema of 'type: \"object\"', got 'type: \"None\"'."
		}
	default:
		return fmt.Sprintf("Invalid value: '%s'. Supported values are: 'json_object', 'json_schema', and 'text'.", f.Type)
	}
	return ""
}

func writeError(w http.ResponseWriter, status int, typ, code, msg string) {
	writeParamError(w, status, typ, code, "", msg)
}

// writeParamError is OpenAI's error body naming the request parameter at
// fault (context_length_exceeded names "messages"); an empty code or
// param is sent as null, as OpenAI does.
func writeParamError(w http.ResponseWriter, status int, typ, code, param, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	var c, p any
	if code != "" {
		c = code
	}
	if param != "" {
		p = param
	}
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": p, "code": c}})
}

func (s *Server) keyOK(key string) bool {
	if key == "" {
		return false
	}
	if len(s.cfg.Keys) == 0 {
		return true
	}
	for _, k := range s.cfg.Keys {
		if k == key {
			return true
		}
	}
	return false
}

// listModels answers GET /v1/models in OpenAI's shape: the models the
// key may use, sorted by id.
func (s *Server) listModels(w http.ResponseWriter, r *http.Request) {
	key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || !s.keyOK(key) {
		writeError(w, http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", "Incorrect API key provided.")
		return
	}
	names := make([]string, 0, len(s.models))
	for name := range s.models {
		names = append(names, name)
	}
	sort.Strings(names)
	data := make([]map[string]any, 0, len(names))
	for _, name := range names {
		data = append(data, map[string]any{"id": name, "object": "model", "created": 1715367049, "owned_by": "system"})
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data})
}

// completions serves a chat completion for key (authenticated by the
// caller); deployment is the model an Azure deployment serves ("" in the
// OpenAI mode, where the body names the model).
func (s *Server) completions(w http.ResponseWriter, r *http.Request, key, deployment string) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 32<<20))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", "could not read body")
		return
	}
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", "We could not parse the JSON body of your request.")
		return
	}
	if deployment != "" {
		req.Model = deployment // Azure: the deployment decides, not the body
	}
	if msg := unrecognizedArgument(body); msg != "" {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", msg)
		return
	}
	n, msg := choiceCount(body)
	if msg != "" {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", msg)
		return
	}
	m, ok := s.models[req.Model]
	if !ok {
		writeError(w, http.StatusNotFound, "invalid_request_error", "model_not_found", fmt.Sprintf("The model `%s` does not exist or you do not have access to it.", req.Model))
		return
	}
	if len(req.Messages) == 0 {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", "'messages' must contain at least one message.")
		return
	}
	if msg := checkFormat(req); msg != "" {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", msg)
		return
	}
	if req.StreamOptions != nil && !req.Stream {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", "The 'stream_options' parameter is only allowed when 'stream' is enabled.")
		return
	}
	if req.MaxTokens != nil && req.MaxCompletionTokens != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", "max_tokens and max_completion_tokens cannot both be set.")
		return
	}
	switch req.ServiceTier {
	case "", "auto", "default", "priority":
		req.ServiceTier = "default"
	case "flex":
		if !m.Flex {
			writeParamError(w, http.StatusBadRequest, "invalid_request_error", "invalid_value", "service_tier",
				fmt.Sprintf("Invalid value for 'service_tier': flex processing is not available for model %s.", m.Name))
			return
		}
	default:
		writeParamError(w, http.StatusBadRequest, "invalid_request_error", "invalid_value", "service_tier",
			fmt.Sprintf("Invalid value for 'service_tier': %q. Supported values are: 'auto', 'default', 'flex' and 'priority'.", req.ServiceTier))
		return
	}
	maxOut := int64(DefaultMaxOutput)
	if req.MaxTokens != nil {
		maxOut = *req.MaxTokens
	} else if req.MaxCompletionTokens != nil {
		maxOut = *req.MaxCompletionTokens
	}
	if maxOut < 1 {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "integer_below_min_value", "max_tokens must be at least 1.")
		return
	}
	chars, prompt := 0, int64(3)
	for _, msg := range req.Messages {
		chars += utf8.RuneCountInString(msg.Content)
		n, _ := s.codec.Count(msg.Content)
		prompt += int64(n) + 4
	}
	cost := int64(math.Ceil(float64(chars)/4)) + maxOut*n // each choice may take the cap

	h := promptHash(m.Name, req)
	s.mu.Lock()
	st := s.statsOf(m.Name)
	st.Requests++
	complete := false // a whole answer, no fault injected into it
	defer func() {
		if !complete {
			return
		}
		s.mu.Lock()
		st.Answered++
		if s.answered[h] {
			st.Repeats++
		}
		s.answered[h] = true
		s.mu.Unlock()
	}()
	if s.cfg.Record {
		ci := len(s.calls)
		s.calls = append(s.calls, callOf(req, m.Name, time.Now()))
		sw := &statusWriter{ResponseWriter: w}
		w = sw
		defer func() {
			s.mu.Lock()
			s.calls[ci].Status, s.calls[ci].Complete = sw.status, complete && sw.status == http.StatusOK
			s.mu.Unlock()
		}()
	}
	format := "none"
	if req.ResponseFormat != nil {
		format = req.ResponseFormat.Type
	}
	st.formats[format]++
	if s.faults.NoQuota {
		st.Faults++
		s.mu.Unlock()
		writeError(w, http.StatusTooManyRequests, "insufficient_quota", "insufficient_quota", "You exceeded your current quota, please check your plan and billing details.")
		return
	}
	if prompt+maxOut > m.ContextTokens && prompt > m.ContextTokens-1 {
		s.mu.Unlock()
		writeParamError(w, http.StatusBadRequest, "invalid_request_error", "context_length_exceeded", "messages",
			fmt.Sprintf("This model's maximum context length is %d tokens. However, your messages resulted in %d tokens. Please reduce the length of the messages.", m.ContextTokens, prompt))
		return
	}
	if req.ServiceTier == "flex" {
		st.Flex++
		every := int64(s.faults.FlexRefuseEvery)
		if (every > 0 && st.Flex%every == 0) || (s.faults.FlexUnavailable > 0 && s.rng.Float64() < s.faults.FlexUnavailable) {
			st.FlexRefused++
			s.mu.Unlock()
			writeError(w, http.StatusTooManyRequests, "resource_unavailable", "resource_unavailable",
				"Resource Unavailable: flex processing does not have the capacity for this request now. Try again later, or send it without service_tier flex.")
			return
		}
	}
	now := s.cfg.Now()
	b := s.bucketOf(m, key, now)
	if float64(cost) > float64(m.TPM) {
		s.mu.Unlock()
		writeError(w, http.StatusTooManyRequests, "tokens", "rate_limit_exceeded",
			fmt.Sprintf("Request too large for %s on tokens per min (TPM): Limit %d, Requested %d.", m.Name, m.TPM, cost))
		return
	}
	if !s.admits(m, b, cost) {
		reqLeft, tokLeft := s.remaining(m, b)
		st.RateLimited++
		wait := s.waitFor(m, b, cost, now)
		s.setLimitHeaders(w.Header(), m, b, now)
		dim, lim, used := "tokens per min (TPM)", m.TPM, m.TPM-int64(tokLeft)
		if reqLeft < 1 {
			dim, lim, used = "requests per min (RPM)", m.RPM, m.RPM
		}
		s.mu.Unlock()
		w.Header().Set("retry-after", strconv.FormatInt(int64(math.Ceil(wait.Seconds())), 10))
		w.Header().Set("retry-after-ms", strconv.FormatInt(wait.Milliseconds()+1, 10))
		if deployment != "" {
			azureLimitHeaders(w.Header())
			writeAzureError(w, http.StatusTooManyRequests, "429", fmt.Sprintf("Requests to the ChatCompletions_Create Operation under Azure OpenAI API version %s have exceeded the rate limit of your current pricing tier. Please retry after %d seconds.",
				r.URL.Query().Get("api-version"), int64(math.Ceil(wait.Seconds()))))
			return
		}
		writeError(w, http.StatusTooManyRequests, "tokens", "rate_limit_exceeded",
			fmt.Sprintf("Rate limit reached for %s in organization org-fake on %s: Limit %d, Used %d, Requested %d. Please try again in %s.",
				m.Name, dim, lim, used, cost, wait.Round(time.Millisecond)))
		return
	}
	s.charge(b, cost, now)
	st.admit(now, cost, s.cfg.Period)
	if s.cfg.Record {
		s.recorded[m.Name] = append(s.recorded[m.Name], Admission{At: now, Cost: cost, Key: KeyLabel(key)})
	}
	s.setLimitHeaders(w.Header(), m, b, now)
	if deployment != "" {
		azureLimitHeaders(w.Header())
	}
	f := s.faults
	roll := s.rng.Float64()
	latency := time.Duration(float64(m.Latency+time.Duration((s.rng.Float64()*2-1)*float64(m.Jitter))) * s.cfg.LatencyScale)
	if req.ServiceTier == "flex" {
		latency *= FlexSlowdown
	}
	s.mu.Unlock()

	if f.TooMany > 0 && roll < f.TooMany {
		s.countFault(m.Name)
		w.Header().Set("retry-after-ms", "500")
		w.Header().Set("retry-after", "1")
		writeError(w, http.StatusTooManyRequests, "tokens", "rate_limit_exceeded", "Rate limit reached. Please try again in 500ms.")
		return
	}
	roll -= f.TooMany
	if roll >= 0 && roll < f.ServerError {
		s.countFault(m.Name)
		writeError(w, http.StatusInternalServerError, "server_error", "", "The server had an error while processing your request. Sorry about that!")
		return
	}
	roll -= f.ServerError
	if roll >= 0 && roll < f.Timeout {
		s.hang(r, m.Name, f)
		writeError(w, http.StatusGatewayTimeout, "server_error", "", "Gateway timeout.")
		return
	}
	roll -= f.Timeout

	if latency > 0 {
		select {
		case <-r.Context().Done():
			return
		case <-time.After(latency):
		}
	}
	prefixes := s.prefixHashes(m.Name, &req, prompt) // outside the lock: tokenising takes time
	s.mu.Lock()
	cached := s.promptCache(prefixes, now)
	st.PromptTokens += prompt
	st.CachedTokens += cached
	s.mu.Unlock()
	if call, ok := forcedTool(body); ok { // tools.go
		out := s.replyToolCall(w, r, m.Name, now, call, usageOf(prompt, cached), req.Stream, req.StreamOptions != nil && req.StreamOptions.IncludeUsage)
		s.mu.Lock()
		st.CompletionToks += out
		st.billed(laneOf(req.ServiceTier), prompt, cached, 0, out)
		s.mu.Unlock()
		complete = r.Context().Err() == nil
		return
	}
	text, finish := s.answer(req)
	if s.cfg.Verbose && finish == "stop" {
		text = s.lengthen(text, maxOut)
	}
	if roll >= 0 && roll < f.Empty {
		s.countFault(m.Name)
		text = ""
	}
	toks, _, _ := s.codec.Encode(text)
	if int64(len(toks)) > maxOut {
		text, _ = s.codec.Decode(toks[:maxOut])
		toks = toks[:maxOut]
		finish = "length"
	}
	s.mu.Lock()
	st.CompletionToks += n * int64(len(toks))
	st.billed(laneOf(req.ServiceTier), prompt, cached, 0, n*int64(len(toks)))
	s.mu.Unlock()
	faulted := roll >= 0 && roll < f.Empty
	if req.Stream {
		s.streamChoices(w, r, n, m.Name, now, text, finish, toks, usageOf(prompt, cached), req.StreamOptions != nil && req.StreamOptions.IncludeUsage)
		complete = !faulted && r.Context().Err() == nil
		return
	}
	resp := map[string]any{
		"id": fmt.Sprintf("chatcmpl-fake%d", now.UnixNano()), "object": "chat.completion", "created": now.Unix(), "model": m.Name,
		"choices": choices(n, text, finish),
		"usage":   usageOf(prompt, cached).with(n * int64(len(toks))),
		// the tier that served it, as OpenAI reports it
		"service_tier": req.ServiceTier,
	}
	out, _ := json.Marshal(resp)
	roll -= f.Empty
	if roll >= 0 && roll < f.Truncated {
		s.countFault(m.Name)
		out = out[:len(out)/2]
		faulted = true
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("openai-processing-ms", strconv.FormatInt(latency.Milliseconds(), 10))
	_, err = w.Write(out)
	complete = !faulted && err == nil
}

// hang is the Timeout fault on every dialect: it counts the fault and
// sends nothing, not even the headers, until the client gives up or
// TimeoutAfter (default a minute) passes.
func (s *Server) hang(r *http.Request, model string, f Faults) {
	s.countFault(model)
	d, err := time.ParseDuration(f.TimeoutAfter)
	if err != nil || d <= 0 {
		d = time.Minute
	}
	select {
	case <-r.Context().Done():
	case <-time.After(d):
	}
}

func (s *Server) countFault(model string) {
	s.mu.Lock()
	st := s.statsOf(model)
	st.Faults++
	st.LastFault = time.Now()
	s.mu.Unlock()
}

func (s *Server) statsOf(model string) *modelStats {
	st, ok := s.stats[model]
	if !ok {
		st = &modelStats{formats: map[string]int64{}}
		s.stats[model] = st
	}
	return st
}

// bucketOf refills (or slides) and returns the (model, key) limiter
// state. Caller holds mu.
func (s *Server) bucketOf(m Model, key string, now time.Time) *bucket {
	k := m.Name + "\x00" + key
	per := s.cfg.Period.Microseconds()
	b, ok := s.buckets[k]
	if !ok {
		b = &bucket{req: m.RPM * per, tok: m.TPM * per, last: now}
		s.buckets[k] = b
	}
	if s.cfg.Limiter == LimiterWindow {
		// (t−Period, t]: an admission stops counting a whole period later
		for len(b.win) > 0 && now.Sub(b.win[0].at) >= s.cfg.Period {
			b.winTok -= b.win[0].cost
			b.win = b.win[1:]
		}
		return b
	}
	if el := now.Sub(b.last).Microseconds(); el > 0 {
		b.req = min(m.RPM*per, b.req+el*m.RPM)
		b.tok = min(m.TPM*per, b.tok+el*m.TPM)
		b.last = b.last.Add(time.Duration(el) * time.Microsecond)
	}
	return b
}

// remaining is what the limiter would admit now, per dimension.
func (s *Server) remaining(m Model, b *bucket) (req, tok float64) {
	if s.cfg.Limiter == LimiterWindow {
		return float64(m.RPM - int64(len(b.win))), float64(m.TPM - b.winTok)
	}
	per := float64(s.cfg.Period.Microseconds())
	return float64(b.req) / per, float64(b.tok) / per
}

// admits reports whether one more request of cost fits now.
func (s *Server) admits(m Model, b *bucket, cost int64) bool {
	if s.cfg.Limiter == LimiterWindow {
		return int64(len(b.win)) < m.RPM && b.winTok+cost <= m.TPM
	}
	per := s.cfg.Period.Microseconds()
	return b.req >= per && b.tok >= cost*per
}

func (s *Server) charge(b *bucket, cost int64, now time.Time) {
	if s.cfg.Limiter == LimiterWindow {
		b.win = append(b.win, admission{at: now, cost: cost})
		b.winTok += cost
		return
	}
	per := s.cfg.Period.Microseconds()
	b.req -= per
	b.tok -= cost * per
}

func (s *Server) waitFor(m Model, b *bucket, cost int64, now time.Time) time.Duration {
	if s.cfg.Limiter == LimiterWindow {
		// until enough of the oldest admissions have left the window
		var wait time.Duration
		needReq := int64(len(b.win)) + 1 - m.RPM
		needTok := b.winTok + cost - m.TPM
		for _, a := range b.win {
			if needReq <= 0 && needTok <= 0 {
				break
			}
			wait = a.at.Add(s.cfg.Period).Sub(now)
			needReq--
			needTok -= a.cost
		}
		return max(wait, 0)
	}
	per := s.cfg.Period.Microseconds()
	var w int64 // µs
	if b.req < per {
		w = (per - b.req + m.RPM - 1) / m.RPM
	}
	if need := cost*per - b.tok; need > 0 {
		w = max(w, (need+m.TPM-1)/m.TPM)
	}
	return time.Duration(w) * time.Microsecond
}

func (s *Server) setLimitHeaders(h http.Header, m Model, b *bucket, now time.Time) {
	req, tok := s.remaining(m, b)
	h.Set("x-ratelimit-limit-requests", strconv.FormatInt(m.RPM, 10))
	h.Set("x-ratelimit-limit-tokens", strconv.FormatInt(m.TPM, 10))
	h.Set("x-ratelimit-remaining-requests", strconv.FormatInt(int64(math.Max(0, req)), 10))
	h.Set("x-ratelimit-remaining-tokens", strconv.FormatInt(int64(math.Max(0, tok)), 10))
	per := s.cfg.Period
	resetReq := time.Duration((float64(m.RPM) - req) / float64(m.RPM) * float64(per))
	resetTok := time.Duration((float64(m.TPM) - tok) / float64(m.TPM) * float64(per))
	if s.cfg.Limiter == LimiterWindow {
		// back to the full limits when the newest admission leaves
		resetReq, resetTok = 0, 0
		if n := len(b.win); n > 0 {
			resetReq = max(b.win[n-1].at.Add(per).Sub(now), 0)
			resetTok = resetReq
		}
	}
	h.Set("x-ratelimit-reset-requests", fmtDuration(resetReq))
	h.Set("x-ratelimit-reset-tokens", fmtDuration(resetTok))
}

// fmtDuration writes durations as OpenAI does: 6m0s, 1s, 20ms.
func fmtDuration(d time.Duration) string {
	if d < time.Second {
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	}
	return d.Round(time.Millisecond).String()
}

var annotated = regexp.MustCompile(`(?m)^\s*(\d+) \+(.*)$`)
var pathLine = regexp.MustCompile(`(?m)^File: (\S+)`)

// taskOf is the message that holds what a request asks and its diff:
// the last user message starting with "Task:" (prq's prompts: the pull
// request's context comes first, in a message of its own), else the
// first user message.
func taskOf(req chatRequest) string {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if m := req.Messages[i]; m.Role == "user" && strings.HasPrefix(m.Content, "Task:") {
			return m.Content
		}
	}
	return firstUser(req)
}

// firstUser is the request's first user message.
func firstUser(req chatRequest) string {
	for _, m := range req.Messages {
		if m.Role == "user" {
			return m.Content
		}
	}
	return ""
}

// kindOf is how the fake reads a prompt: by its task line when it has
// one ("Task: review" is "review", "Task: reply" "chat", "Task: write
// the walkthrough" "walkthrough", another "text"); else "review" when the system message or the requested
// schema names "comments", "chat" when the system message asks for a
// reply, else "text".
func kindOf(req chatRequest) string {
	if task := taskOf(req); strings.HasPrefix(task, "Task:") {
		switch {
		case strings.HasPrefix(task, "Task: review"):
			return "review"
		case strings.HasPrefix(task, "Task: reply"):
			return "chat"
		case strings.HasPrefix(task, "Task: write the walkthrough"):
			return "walkthrough"
		}
		return "text"
	}
	system := req.Messages[0].Content
	// what a repository's maintainers add to prq's system message is not
	// what the prompt is
	system, _, _ = strings.Cut(system, "\n\nThe repository's maintainers ask")
	schema := ""
	if f := req.ResponseFormat; f != nil && f.JSONSchema != nil {
		schema = string(f.JSONSchema.Schema)
	}
	switch {
	case strings.Contains(system, `"comments"`) || strings.Contains(schema, `"comments"`):
		return "review"
	case strings.Contains(strings.ToLower(system), "reply"):
		return "chat"
	}
	return "text"
}

// answer writes a plausible reply. A review prompt (the system message
// or the requested schema names "comments") gets a review citing real
// added lines of the annotated diff, formatted in the server's reply
// style; other prompts get prose naming the file.
func (s *Server) answer(req chatRequest) (text, finish string) {
	user := taskOf(req)
	path := "the change"
	if m := pathLine.FindStringSubmatch(user); m != nil {
		path = m[1]
	}
	format, schema := "", ""
	if f := req.ResponseFormat; f != nil {
		format = f.Type
		if f.JSONSchema != nil {
			schema = string(f.JSONSchema.Schema)
		}
	}
	switch kindOf(req) {
	case "review":
		return s.review(user, path, format, schema+"\n"+req.Messages[0].Content)
	case "chat":
		text = "Thanks for the question. Looking at " + path + ", the change keeps the existing behaviour and adds the new path guarded by its own checks; the tests in this PR cover the main case."
		if inj := s.style().injection(); inj != "" {
			text += " " + inj
		}
		return text, "stop"
	case "walkthrough":
		text = walkthrough(user)
		if inj := s.style().injection(); inj != "" {
			text += "\n\n" + inj
		}
		return text, "stop"
	}
	n := len(annotated.FindAllStringIndex(user, -1))
	text = fmt.Sprintf("%s: %d added lines. The change updates the implementation and keeps the public behaviour; it touches error handling and adds or adjusts tests where needed.", path, n)
	if inj := s.style().injection(); inj != "" {
		text += " " + inj
	}
	return text, "stop"
}

// style is the current reply style.
func (s *Server) style() ReplyStyle {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg.Replies
}

// wordings are the ways the fake words a finding about the code in %s:
// each names the code, so its substance stays the same.
var wordings = []string{
	"Consider whether `%s` handles the error and edge cases here; a test for this line would make the intent clear.",
	"Does `%s` cope with errors and edge cases? A test covering this line would show the intent.",
	"Check the error and edge-case handling around `%s`, and add a test for this line.",
}

// review answers a review prompt (asked: the system message and schema,
// which say whether the model may propose replacement lines). It comments
// on the two added lines (blank ones aside) whose (path, content) hash lowest, so a line
// keeps its finding, word for word, on every head it is in unchanged; the
// finding on every other line it picks proposes a replacement (the line
// with a note after it) when the prompt asks for one.
func (s *Server) review(user, path, format, asked string) (text, finish string) {
	style := s.style()
	s.mu.Lock()
	wording := s.cfg.Wording
	s.mu.Unlock()
	jsonAsked := format == "json_object" || format == "json_schema"
	lines := slices.DeleteFunc(annotated.FindAllStringSubmatch(user, -1), func(m []string) bool { return strings.TrimSpace(m[2]) == "" })
	cs := []map[string]any{} // strict structured outputs send an empty array, never null
	add := func(line int, body string, replacement any) {
		c := map[string]any{"line": line, "body": body}
		// Strict structured outputs send every property the schema has;
		// an optional one comes as null.
		if strings.Contains(asked, `"side"`) {
			c["side"] = "RIGHT"
		}
		if strings.Contains(asked, `"start_line"`) {
			c["start_line"] = nil
		}
		if strings.Contains(asked, `"replacement"`) {
			c["replacement"] = replacement
		}
		cs = append(cs, c)
	}
	hashOf := func(i int) uint64 {
		h := fnv.New64a()
		h.Write([]byte(path + "\x00" + lines[i][2]))
		return h.Sum64()
	}
	pick := make([]int, len(lines))
	for i := range pick {
		pick[i] = i
	}
	sort.SliceStable(pick, func(a, b int) bool { return hashOf(pick[a]) < hashOf(pick[b]) })
	for _, i := range pick[:min(2, len(pick))] {
		n, _ := strconv.Atoi(lines[i][1])
		code := strings.TrimSpace(lines[i][2])
		if len(code) > 60 {
			code = code[:60]
		}
		h := hashOf(i)
		body := fmt.Sprintf(wordings[(int(h%97)+wording)%len(wordings)], code)
		var replacement any
		if h%2 == 0 {
			r := strings.TrimRight(lines[i][2], " \t") + " // TODO: handle the error"
			if inj := style.injection(); inj != "" {
				r += "\n```\n" + inj + "\n````"
			}
			replacement = r
		}
		if inj := style.injection(); inj != "" {
			body += " " + inj
		}
		add(n, body, replacement)
	}
	if style == ReplyOutside && len(lines) > 0 {
		last, _ := strconv.Atoi(lines[len(lines)-1][1])
		add(last+500, "This line, far outside the diff, deserves a look as well.", nil)
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i]["line"].(int) < cs[j]["line"].(int) })
	summary := "Reviewed " + path + "."
	if inj := style.injection(); inj != "" {
		summary += " " + inj
	}
	reply := map[string]any{"summary": summary, "comments": cs}
	if style == ReplyLoose {
		for _, c := range cs {
			c["line"] = strconv.Itoa(c["line"].(int))
			c["path"], c["severity"], c["suggestion"] = path, "medium", "Return the error to the caller."
		}
		reply = map[string]any{"summary": summary, "findings": cs, "verdict": "comment"}
	}
	b, _ := json.Marshal(reply)
	js := string(b)
	switch {
	case style == ReplyCut:
		return js[:len(js)/2], "length"
	case jsonAsked:
		return js, "stop"
	case style == ReplyProse:
		var p strings.Builder
		fmt.Fprintf(&p, "I reviewed %s. ", path)
		for _, c := range cs {
			fmt.Fprintf(&p, "On line %d: %s ", c["line"], c["body"])
		}
		p.WriteString("Otherwise the change looks reasonable.")
		return p.String(), "stop"
	case style == ReplyFenced:
		return "Here is my review of " + path + ". Note the empty block `if err != nil {}` in the old code.\n\n```json\n" + js + "\n```\n\nLet me know if you need more detail.", "stop"
	}
	return js, "stop"
}

// lengthen repeats a prose answer until it holds at least n tokens
// (the caller cuts it to n); a review's JSON is left alone.
func (s *Server) lengthen(text string, n int64) string {
	if strings.HasPrefix(text, "{") || text == "" {
		return text
	}
	k, _ := s.codec.Count(text + " ")
	if k <= 0 {
		return text
	}
	return strings.Repeat(text+" ", int(n)/k+1)
}

// SetWording changes how later reviews word their findings
// (Config.Wording).
func (s *Server) SetWording(n int) {
	s.mu.Lock()
	s.cfg.Wording = n
	s.mu.Unlock()
}

// SetReplies changes the reply style of later requests.
func (s *Server) SetReplies(r ReplyStyle) {
	s.mu.Lock()
	s.cfg.Replies = r
	s.mu.Unlock()
}

// SetBatchWindow changes the completion window of batches created from
// now on (Config.BatchWindow).
func (s *Server) SetBatchWindow(d time.Duration) {
	s.mu.Lock()
	s.cfg.BatchWindow = d
	s.mu.Unlock()
}

// ModelStats are the counters of one model.
type ModelStats struct {
	Requests    int64 `json:"requests"`
	RateLimited int64 `json:"rate_limited"`
	Faults      int64 `json:"faults"`
	// LastFault is when the latest fault was injected (zero: none).
	LastFault        time.Time `json:"last_fault"`
	AdmittedTokens   int64     `json:"admitted_tokens"`
	CompletionTokens int64     `json:"completion_tokens"`
	// MaxWindowTokens is the largest admitted cost in any window of one
	// period; a provider that is never over its limit keeps it ≤ TPM + the
	// bucket's refill, which is what prq's bench compares to the limit.
	MaxWindowTokens int64 `json:"max_window_tokens"`
	TPM             int64 `json:"tpm"`
	RPM             int64 `json:"rpm"`
	// ResponseFormats counts requests by their response_format type
	// (json_schema, json_object, text; "none" without one), so tests see
	// whether structured output was asked for.
	ResponseFormats map[string]int64 `json:"response_formats"`
	// Answered counts whole answers; Repeats those whose prompt (the
	// messages and response format, hashed) was answered before: work
	// bought twice.
	Answered int64 `json:"answered"`
	Repeats  int64 `json:"repeats"`
	// PromptTokens counts the input tokens of the requests answered (as
	// their usage reports them: all of the prompt); CachedTokens those
	// served from the prompt cache (OpenAI's cached_tokens, Anthropic's
	// cache_read_input_tokens) and CacheWriteTokens those Anthropic's
	// cache wrote (cache_creation_input_tokens). CachedTokens/PromptTokens
	// is the share of input served from the cache.
	PromptTokens     int64 `json:"prompt_tokens"`
	CachedTokens     int64 `json:"cached_tokens"`
	CacheWriteTokens int64 `json:"cache_write_tokens"`
	// Flex counts flex requests (service_tier "flex"), FlexRefused those
	// refused as resource unavailable (not in RateLimited: no limit was
	// hit).
	Flex        int64 `json:"flex"`
	FlexRefused int64 `json:"flex_refused"`
	// Batch counts the batch APIs' work (batch.go), apart from the
	// synchronous counters above except ResponseFormats, Answered,
	// Repeats and CachedTokens, which count batch requests too.
	// Bill is what the answered requests were billed for, by lane
	// (LaneSync, LaneFlex, LaneBatch): what a bill in dollars is made of.
	Bill  map[string]Usage `json:"bill,omitempty"`
	Batch BatchStats       `json:"batch"`
}

// Stats returns the counters per model.
func (s *Server) Stats() map[string]ModelStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]ModelStats{}
	for name, st := range s.stats {
		m := s.models[name]
		formats := make(map[string]int64, len(st.formats))
		for k, v := range st.formats {
			formats[k] = v
		}
		out[name] = ModelStats{ResponseFormats: formats, Requests: st.Requests, RateLimited: st.RateLimited, Faults: st.Faults, LastFault: st.LastFault,
			AdmittedTokens: st.AdmittedTokens, CompletionTokens: st.CompletionToks,
			MaxWindowTokens: st.maxWindow, TPM: m.TPM, RPM: m.RPM, Answered: st.Answered, Repeats: st.Repeats,
			PromptTokens: st.PromptTokens, CachedTokens: st.CachedTokens, CacheWriteTokens: st.CacheWriteTokens,
			Flex: st.Flex, FlexRefused: st.FlexRefused, Bill: map[string]Usage{}}
		for lane, u := range st.bill {
			out[name].Bill[lane] = *u
		}
	}
	s.addBatchStats(out) // batch.go
	return out
}
