// Package webhook is prq's front door: it receives GitHub App webhooks,
// trusts nothing unsigned, answers within GitHub's 10 seconds without
// ever calling GitHub, and turns events into planned work: PR plans,
// chat replies, cancellations and plan changes. A delivery is never
// enqueued twice, and no 2xx is sent for work that was not saved.
//
// It owns verification, parsing and the mapping of events to jobs values.
// It does not enqueue, store or call GitHub itself: the Queue and Plans it
// is given (declared here, implemented by the wiring and the store) do.
package webhook

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/go-github/v56/github"

	"github.com/prq-dev/prq/internal/bodybudget"
	"github.com/prq-dev/prq/jobs"
)

// Queue takes the work events become.
type Queue interface {
	Plan(ctx context.Context, p jobs.Plan) (bool, error)
	Chat(ctx context.Context, c jobs.Chat) (bool, error)
	// Command enqueues a comment's command, once per comment.
	Command(ctx context.Context, c jobs.Command) (bool, error)
	Cancel(ctx context.Context, pr jobs.PR) error
	// CancelInstallation cancels the runs in progress of an installation,
	// or of its repositories repos only when repos is not empty.
	CancelInstallation(ctx context.Context, inst int64, repos []string) (int, error)
}

// Plans maps installations to tiers and records installation events.
type Plans interface {
	// Tenant returns the tier an installation's jobs run in, and why its
	// work must not run ("" when it may: it was uninstalled, suspended,
	// or refused a token by GitHub), from one read.
	Tenant(ctx context.Context, inst int64) (tier jobs.Tier, disabled string, err error)
	SetInstallation(ctx context.Context, inst int64, account string, accountID int64, action string) error
	SetAccountTier(ctx context.Context, accountID int64, tier jobs.Tier, reason string) error
	// AppThread reports whether the App replied in the review thread
	// whose root comment is root.
	AppThread(ctx context.Context, root int64) (bool, error)
}

// ChatLimiter caps the chat a user and a pull request can start (a
// *store.ChatLimiter). A comment over a limit is not allowed; refuse
// says it is the first one refused while the limit holds, which gets one
// polite reply; later ones are dropped. retryAt is when a comment fits
// again.
type ChatLimiter interface {
	AllowChat(ctx context.Context, pr jobs.PR, user string, commentID int64) (allowed, refuse bool, retryAt time.Time, err error)
}

// RepoSettings returns what a repository's configuration says of chat
// and drafts, as the last plan of one of its pull requests read it; known
// is false before any (a *store.Store).
type RepoSettings interface {
	RepoSettings(ctx context.Context, pr jobs.PR) (rs jobs.RepoSettings, known bool, err error)
}

// Config configures the receiver.
type Config struct {
	// Repos, when set, follows each repository's configuration: chat in
	// a repository whose .prq.yaml says chat: false is dropped before it
	// costs anything; a draft pull request is planned where drafts are
	// reviewed, or where the repository's settings are not known yet (the
	// planner reads them), and converting one to a draft cancels nothing
	// there. Unset, drafts are ignored and converting to a draft cancels.
	Repos RepoSettings
	// Secret is the webhook secret. Required: go-github's ValidatePayload
	// passes a request when both secret and signature are empty.
	Secret []byte
	// MaxBytes caps a body. Defaults to 25 MB, GitHub's maximum.
	MaxBytes int64
	// MaxInFlightBytes caps the bytes of bodies being read or checked at
	// once, across all requests, so unauthenticated floods cannot exhaust
	// memory (the signature can only be checked over the whole body). A
	// request that would go over it is answered 503 with Retry-After.
	// Defaults to MaxBytes plus 4 MB (one largest delivery and ordinary
	// ones beside it); never less than MaxBytes.
	MaxInFlightBytes int64
	// ReadTimeout bounds reading one body. Defaults to 10s: GitHub gives
	// up on a delivery after 10 seconds anyway.
	ReadTimeout time.Duration
	// AppSlug is the App's handle: comments that mention @slug talk to it.
	AppSlug string
	// SkipBotPRs ignores PRs opened by bots.
	SkipBotPRs bool
	// ChatAssociations are the author associations (GitHub's
	// author_association) whose comments can start chat, besides the pull
	// request's own author. Defaults to OWNER, MEMBER and COLLABORATOR:
	// anyone else who can comment on a public repository cannot spend
	// the installation's tokens.
	ChatAssociations []string
	// ChatLimiter, when set, caps chat per user and per pull request
	// before a chat job is enqueued. Defaults to no limits.
	ChatLimiter ChatLimiter
	// Replays, when set, refuses replays: X-GitHub-Delivery is not
	// signed, so a captured delivery could be sent again under a new id.
	// A signed body (with its event) taken under another id within
	// ReplayWindow is answered 200 duplicate, and one whose own time
	// (its pull request's or comment's updated_at) is older than the
	// window 200 stale. Unset, only the delivery id dedupes.
	Replays Replays
	// ReplayWindow is how long a taken body is remembered. Defaults to
	// 72h, the time GitHub lets a delivery be redelivered.
	ReplayWindow time.Duration
	// NowFunc is the clock of the stale check. Defaults to time.Now.
	NowFunc func() time.Time
}

// Replays remembers which delivery id took a signed body (a
// *store.Store). ClaimDelivery returns the id that holds digest, taking
// it for delivery when free; ReleaseDelivery frees it if delivery holds
// it (work not saved stays takeable).
type Replays interface {
	ClaimDelivery(ctx context.Context, digest, delivery string, window time.Duration) (string, error)
	ReleaseDelivery(ctx context.Context, digest, delivery string) error
}

// DefaultChatAssociations are who can talk to the bot by default.
var DefaultChatAssociations = []string{"OWNER", "MEMBER", "COLLABORATOR"}

// Handler is the webhook receiver.
type Handler struct {
	cfg    Config
	budget *bodybudget.Budget
	queue  Queue
	plans  Plans
	log    *slog.Logger
	// Count, when set, is told of each delivery's event and outcome.
	Count func(event, outcome string)
	// busy and unsigned are refusals an unauthenticated peer can cause
	// at will: logged once per interval each.
	busy, unsigned floodLog
}

// floodInterval is how often a flood of refusals anyone can cause
// (deliveries refused for the in-flight budget, unsigned requests) is
// logged: once, with how many; each is counted.
const floodInterval = 10 * time.Second

// floodLog logs one kind of refusal once per interval.
type floodLog struct {
	mu      sync.Mutex
	now     func() time.Time
	last    time.Time
	refused int // since last
}

// note counts a refusal and reports whether to log now, with how many
// were refused since the last line.
func (b *floodLog) note() (int, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refused++
	now := b.now()
	if !b.last.IsZero() && now.Sub(b.last) < floodInterval {
		return 0, false
	}
	n := b.refused
	b.last, b.refused = now, 0
	return n, true
}

// maxLogField is how much of a header or an error a log line keeps.
const maxLogField = 200

// clip cuts s to maxLogField bytes (at a rune boundary), saying how long
// it was: what a sender puts in a header must not grow the log.
func clip(s string) string {
	if len(s) <= maxLogField {
		return s
	}
	cut := maxLogField
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s…(%d bytes)", s[:cut], len(s))
}

// New returns the receiver; it refuses an empty secret.
func New(cfg Config, q Queue, plans Plans, log *slog.Logger) (*Handler, error) {
	if len(cfg.Secret) == 0 {
		return nil, errors.New("webhook: a non-empty secret is required (GITHUB_WEBHOOK_SECRET)")
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = 25 << 20
	}
	if cfg.MaxInFlightBytes <= 0 {
		cfg.MaxInFlightBytes = cfg.MaxBytes + 4<<20
	}
	if cfg.MaxInFlightBytes < cfg.MaxBytes {
		cfg.MaxInFlightBytes = cfg.MaxBytes
	}
	if cfg.ReadTimeout <= 0 {
		cfg.ReadTimeout = 10 * time.Second
	}
	if cfg.ReplayWindow <= 0 {
		cfg.ReplayWindow = 72 * time.Hour
	}
	if cfg.NowFunc == nil {
		cfg.NowFunc = time.Now
	}
	if cfg.ChatAssociations == nil {
		cfg.ChatAssociations = DefaultChatAssociations
	}
	// normalised in a copy: neither the caller's slice nor the default is written
	cfg.ChatAssociations = append([]string(nil), cfg.ChatAssociations...)
	for i, a := range cfg.ChatAssociations {
		a = strings.ToUpper(strings.TrimSpace(a))
		if !knownAssociations[a] {
			return nil, fmt.Errorf("webhook: chat association %q: want one of OWNER, MEMBER, COLLABORATOR, CONTRIBUTOR, FIRST_TIME_CONTRIBUTOR, FIRST_TIMER, NONE", cfg.ChatAssociations[i])
		}
		cfg.ChatAssociations[i] = a
	}
	return &Handler{cfg: cfg, budget: bodybudget.New(cfg.MaxInFlightBytes), queue: q, plans: plans, log: log,
		busy: floodLog{now: time.Now}, unsigned: floodLog{now: time.Now}}, nil
}

// Errors of verification.
var (
	ErrNoSignature  = errors.New("webhook: missing X-Hub-Signature-256")
	ErrBadSignature = errors.New("webhook: signature does not match")
)

// VerifySignature checks X-Hub-Signature-256 over the raw body in
// constant time. The sha1 header alone is not accepted.
func VerifySignature(secret, body []byte, header string) error {
	if len(secret) == 0 {
		return errors.New("webhook: empty secret")
	}
	hexSig, ok := strings.CutPrefix(header, "sha256=")
	if header == "" {
		return ErrNoSignature
	}
	if !ok {
		return ErrBadSignature
	}
	got, err := hex.DecodeString(hexSig)
	if err != nil || len(got) != sha256.Size {
		return ErrBadSignature
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	if !hmac.Equal(got, mac.Sum(nil)) {
		return ErrBadSignature
	}
	return nil
}

// Sign returns the X-Hub-Signature-256 value of body (for senders and tests).
func Sign(secret, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// outcome is what a delivery led to.
type outcome struct {
	status int
	what   string
}

// reply answers a request and logs a refusal with bounded fields.
// signed says the body's signature was verified: refusals before that
// are anyone's to cause, so they are logged once per interval with how
// many, like the busy ones; a signed one is logged each time.
func (h *Handler) reply(w http.ResponseWriter, r *http.Request, event string, o outcome, err error, signed bool) {
	if h.Count != nil {
		h.Count(event, o.what)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(o.status)
	body := map[string]string{"result": o.what}
	if err != nil {
		body["error"] = err.Error()
	}
	json.NewEncoder(w).Encode(body)
	switch {
	case errors.Is(err, ErrBusy):
		if n, ok := h.busy.note(); ok {
			h.log.WarnContext(r.Context(), "webhook busy: deliveries refused for the in-flight budget", "refused", n,
				"max_in_flight_bytes", h.cfg.MaxInFlightBytes, "logged_every", floodInterval)
		}
	case err != nil && !signed:
		if n, ok := h.unsigned.note(); ok {
			h.log.InfoContext(r.Context(), "webhook refused unsigned requests", "refused", n, "logged_every", floodInterval,
				"last_status", o.status, "last_event", clip(event), "last_delivery", clip(r.Header.Get("X-GitHub-Delivery")),
				"last_err", clip(err.Error()))
		}
	case err != nil:
		level := slog.LevelInfo
		if o.status >= 500 {
			level = slog.LevelError
		}
		h.log.Log(r.Context(), level, "webhook refused", "status", o.status, "event", clip(event),
			"delivery", clip(r.Header.Get("X-GitHub-Delivery")), "err", clip(err.Error()))
	}
}

// ServeHTTP handles POST /webhook.
// intake takes a delivery's body, answering what it refuses (not a POST,
// too large, the intake busy, unreadable) itself: ok is false then.
// release returns the body's bytes to the intake budget.
func (h *Handler) intake(w http.ResponseWriter, r *http.Request, event string) (body []byte, release func(), ok bool) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		h.reply(w, r, event, outcome{http.StatusMethodNotAllowed, "method not allowed"}, errors.New("webhooks are POSTed"), false)
		return nil, func() {}, false
	}
	body, release, err := h.readBody(w, r)
	if err == nil {
		return body, release, true
	}
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		h.reply(w, r, event, outcome{http.StatusRequestEntityTooLarge, "too large"}, fmt.Errorf("body over %d bytes", h.cfg.MaxBytes), false)
	case errors.Is(err, ErrBusy):
		w.Header().Set("Retry-After", "1")
		h.reply(w, r, event, outcome{http.StatusServiceUnavailable, "busy"}, err, false)
	default:
		h.reply(w, r, event, outcome{http.StatusBadRequest, "unreadable"}, fmt.Errorf("read body: %v", err), false)
	}
	return nil, release, false
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if p := recover(); p != nil { // a bug, not the sender's fault: say so, keep serving
			h.log.ErrorContext(r.Context(), "webhook handler panicked", "panic", fmt.Sprint(p), "event", clip(r.Header.Get("X-GitHub-Event")))
			http.Error(w, `{"result":"internal error"}`, http.StatusInternalServerError)
		}
	}()
	event := r.Header.Get("X-GitHub-Event")
	body, release, ok := h.intake(w, r, event)
	defer release()
	if !ok {
		return
	}
	if err := VerifySignature(h.cfg.Secret, body, r.Header.Get("X-Hub-Signature-256")); err != nil {
		h.reply(w, r, event, outcome{http.StatusUnauthorized, "bad signature"}, err, false)
		return
	}
	delivery := r.Header.Get("X-GitHub-Delivery")
	switch {
	case event == "":
		h.reply(w, r, event, outcome{http.StatusBadRequest, "malformed"}, errors.New("missing X-GitHub-Event"), true)
		return
	case delivery == "" || len(delivery) > 100 || strings.ContainsAny(delivery, "{}|:\x00 "):
		h.reply(w, r, event, outcome{http.StatusBadRequest, "malformed"}, errors.New("missing or malformed X-GitHub-Delivery"), true)
		return
	}
	payload, err := jsonPayload(r.Header.Get("Content-Type"), body)
	if err != nil {
		status := http.StatusBadRequest
		if errors.Is(err, errContentType) {
			status = http.StatusUnsupportedMediaType
		}
		h.reply(w, r, event, outcome{status, "malformed"}, err, true)
		return
	}
	o, err := h.accept(r.Context(), event, delivery, body, payload)
	h.reply(w, r, event, o, err, true)
}

// stale is a signed delivery older than the replay window.
var stale = outcome{http.StatusOK, "stale"}

// accept dispatches a signed delivery once per body: the same body (and
// event) taken under another delivery id within the window is a replay.
func (h *Handler) accept(ctx context.Context, event, delivery string, body, payload []byte) (outcome, error) {
	if h.cfg.Replays == nil || event == "ping" {
		return h.dispatch(ctx, event, delivery, payload)
	}
	if h.stale(payload) {
		return stale, nil
	}
	mac := sha256.New()
	mac.Write([]byte(event))
	mac.Write([]byte{0})
	mac.Write(body)
	digest := hex.EncodeToString(mac.Sum(nil))
	held, err := h.cfg.Replays.ClaimDelivery(ctx, digest, delivery, h.cfg.ReplayWindow)
	if err != nil {
		return unavailable(err)
	}
	if held != delivery {
		return duplicate, nil
	}
	o, err := h.dispatch(ctx, event, delivery, payload)
	if o.status >= 300 {
		if rerr := h.cfg.Replays.ReleaseDelivery(context.WithoutCancel(ctx), digest, delivery); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}
	return o, err
}

// stale reports whether a payload's own time, its pull request's or
// comment's updated_at, is older than the replay window: a replay the
// claims no longer remember. A payload without one is not stale.
func (h *Handler) stale(payload []byte) bool {
	type stamped struct {
		UpdatedAt string `json:"updated_at"`
	}
	var p struct {
		PullRequest *stamped `json:"pull_request"`
		Comment     *stamped `json:"comment"`
	}
	if json.Unmarshal(payload, &p) != nil {
		return false
	}
	var last time.Time
	for _, s := range []*stamped{p.PullRequest, p.Comment} {
		if s == nil {
			continue
		}
		if t, err := time.Parse(time.RFC3339, s.UpdatedAt); err == nil && t.After(last) {
			last = t
		}
	}
	return !last.IsZero() && h.cfg.NowFunc().Sub(last) > h.cfg.ReplayWindow
}

// ErrBusy is returned when bodies already being read use up
// MaxInFlightBytes: the request is answered 503 with Retry-After.
var ErrBusy = errors.New("webhook: too many bytes in flight; retry shortly")

// readBody reads the whole body within the size cap, the read deadline
// and the in-flight budget, charged as bytes arrive (never for a
// declared Content-Length alone: a connection that declares a large body
// and sends nothing holds nothing). release gives the body's bytes back
// to the budget; call it when the body is no longer needed (always safe).
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request) (body []byte, release func(), err error) {
	// A deadline for this body alone; a server without deadline support
	// (httptest's recorder) keeps its own limits.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(h.cfg.ReadTimeout))
	body, release, err = h.budget.Read(http.MaxBytesReader(w, r.Body, h.cfg.MaxBytes), r.ContentLength, h.cfg.MaxBytes)
	switch {
	case errors.Is(err, bodybudget.ErrTooLarge):
		err = &http.MaxBytesError{Limit: h.cfg.MaxBytes}
	case errors.Is(err, bodybudget.ErrFull):
		err = ErrBusy
	}
	return body, release, err
}

var errContentType = errors.New("content type must be application/json or application/x-www-form-urlencoded")

// jsonPayload returns the JSON of a delivery, which GitHub sends as JSON
// or as a form field "payload".
func jsonPayload(contentType string, body []byte) ([]byte, error) {
	mt, _, err := mime.ParseMediaType(contentType)
	if contentType == "" {
		mt, err = "application/json", nil
	}
	if err != nil {
		return nil, errContentType
	}
	switch mt {
	case "application/json":
	case "application/x-www-form-urlencoded":
		form, err := url.ParseQuery(string(body))
		if err != nil {
			return nil, fmt.Errorf("malformed form body: %v", err)
		}
		body = []byte(form.Get("payload"))
	default:
		return nil, errContentType
	}
	if !utf8.Valid(body) {
		return nil, errors.New("payload is not valid UTF-8")
	}
	if !json.Valid(body) {
		return nil, errors.New("payload is not valid JSON")
	}
	return body, nil
}

var (
	accepted  = outcome{http.StatusAccepted, "enqueued"}
	duplicate = outcome{http.StatusOK, "duplicate"}
	ignored   = outcome{http.StatusOK, "ignored"}
	recorded  = outcome{http.StatusOK, "recorded"}
	cancelled = outcome{http.StatusOK, "cancelled"}
)

func unavailable(err error) (outcome, error) {
	return outcome{http.StatusServiceUnavailable, "unavailable"}, fmt.Errorf("work not saved: %w", err)
}

func malformed(format string, a ...any) (outcome, error) {
	return outcome{http.StatusBadRequest, "malformed"}, fmt.Errorf(format, a...)
}

// dispatch turns an event into work.
func (h *Handler) dispatch(ctx context.Context, event, delivery string, payload []byte) (outcome, error) {
	if event == "ping" {
		return outcome{http.StatusOK, "pong"}, nil
	}
	if github.EventForType(event) == nil {
		return ignored, nil // an event go-github does not know: nothing prq acts on
	}
	parsed, err := github.ParseWebHook(event, payload)
	if err != nil {
		return malformed("payload of %s: %v", event, err)
	}
	switch e := parsed.(type) {
	case *github.PullRequestEvent:
		return h.pullRequest(ctx, delivery, e)
	case *github.IssueCommentEvent:
		return h.issueComment(ctx, delivery, e)
	case *github.PullRequestReviewCommentEvent:
		return h.reviewComment(ctx, delivery, e)
	case *github.InstallationEvent:
		inst := e.GetInstallation()
		if inst.GetID() <= 0 {
			return malformed("installation event without installation id")
		}
		// recorded first, so jobs already running find it disabled
		if err := h.plans.SetInstallation(ctx, inst.GetID(), inst.GetAccount().GetLogin(), inst.GetAccount().GetID(), e.GetAction()); err != nil {
			return unavailable(err)
		}
		if a := e.GetAction(); a == "deleted" || a == "suspend" {
			if _, err := h.queue.CancelInstallation(ctx, inst.GetID(), nil); err != nil {
				return unavailable(err)
			}
			return cancelled, nil
		}
		return recorded, nil
	case *github.InstallationRepositoriesEvent:
		inst := e.GetInstallation()
		if inst.GetID() <= 0 {
			return malformed("installation_repositories event without installation id")
		}
		if err := h.plans.SetInstallation(ctx, inst.GetID(), inst.GetAccount().GetLogin(), inst.GetAccount().GetID(), "repositories_"+e.GetAction()); err != nil {
			return unavailable(err)
		}
		if e.GetAction() == "removed" {
			var repos []string
			for _, r := range e.RepositoriesRemoved {
				if r.GetName() != "" {
					repos = append(repos, r.GetName())
				}
			}
			if len(repos) == 0 {
				return recorded, nil
			}
			if _, err := h.queue.CancelInstallation(ctx, inst.GetID(), repos); err != nil {
				return unavailable(err)
			}
			return cancelled, nil
		}
		return recorded, nil
	case *github.MarketplacePurchaseEvent:
		mp := e.GetMarketplacePurchase()
		acct := mp.GetAccount().GetID()
		if acct <= 0 {
			return malformed("marketplace_purchase without account id")
		}
		tier, reason := marketplaceTier(e.GetAction(), mp)
		if err := h.plans.SetAccountTier(ctx, acct, tier, reason); err != nil {
			return unavailable(err)
		}
		return recorded, nil
	}
	return ignored, nil
}

// marketplaceTier maps a Marketplace plan to a tier.
func marketplaceTier(action string, mp *github.MarketplacePurchase) (jobs.Tier, string) {
	if action == "cancelled" {
		return jobs.TierFree, "marketplace_cancelled"
	}
	if mp.GetOnFreeTrial() {
		return jobs.TierTrial, "trial_user"
	}
	plan := mp.GetPlan()
	if plan.GetPriceModel() == "FREE" || (plan.GetMonthlyPriceInCents() == 0 && plan.GetYearlyPriceInCents() == 0) {
		return jobs.TierFree, "free_user"
	}
	return jobs.TierPaid, "paid_user"
}

func prRef(inst int64, repo *github.Repository, number int) (jobs.PR, error) {
	pr := jobs.PR{Installation: inst, Owner: repo.GetOwner().GetLogin(), Repo: repo.GetName(), Number: number}
	if inst <= 0 {
		return pr, errors.New("no installation: not a GitHub App delivery")
	}
	return pr, pr.Validate()
}

func (h *Handler) pullRequest(ctx context.Context, delivery string, e *github.PullRequestEvent) (outcome, error) {
	pr := e.GetPullRequest()
	switch e.GetAction() {
	case "converted_to_draft", "closed", "opened", "reopened", "ready_for_review", "synchronize":
	case "edited":
		// a new base changes the diff: reviewed again in full; a title or
		// body edit changes nothing prq reviews
		if e.GetChanges().GetBase() == nil {
			return ignored, nil
		}
	default:
		return ignored, nil
	}
	ref, err := prRef(e.GetInstallation().GetID(), e.GetRepo(), e.GetNumber())
	if err != nil {
		return malformed("pull_request: %v", err)
	}
	planDrafts := false
	if h.cfg.Repos != nil && (pr.GetDraft() || e.GetAction() == "converted_to_draft") {
		rs, known, err := h.cfg.Repos.RepoSettings(ctx, ref)
		if err != nil {
			return unavailable(err)
		}
		planDrafts = rs.Drafts || !known
	}
	switch a := e.GetAction(); {
	case a == "converted_to_draft" && planDrafts:
		return ignored, nil // drafts are reviewed here: the work goes on
	case a == "converted_to_draft", a == "closed":
		if err := h.queue.Cancel(ctx, ref); err != nil {
			return unavailable(err)
		}
		return cancelled, nil
	}
	switch {
	case pr.GetDraft() && !planDrafts, pr.GetState() == "closed":
		return ignored, nil
	case h.cfg.SkipBotPRs && pr.GetUser().GetType() == "Bot":
		return ignored, nil
	case pr.GetHead().GetSHA() == "":
		return malformed("pull_request without head sha")
	}
	return h.enqueuePlan(ctx, jobs.Plan{PR: ref, HeadSHA: pr.GetHead().GetSHA(), BaseSHA: pr.GetBase().GetSHA(), Before: e.GetBefore(),
		Action: e.GetAction(), Delivery: delivery})
}

// enqueuePlan saves a plan for p's pull request, whichever forge sent it,
// at its tenant's tier: nothing for a disabled tenant, duplicate for a
// plan saved already.
func (h *Handler) enqueuePlan(ctx context.Context, p jobs.Plan) (outcome, error) {
	tier, o, err := h.tenant(ctx, p.PR.Installation)
	if o != nil || err != nil {
		return *o, err
	}
	p.Tier = tier
	ok, err := h.queue.Plan(ctx, p)
	if err != nil {
		return unavailable(err)
	}
	if !ok {
		return duplicate, nil
	}
	return accepted, nil
}

// mentions reports whether body addresses @slug.
func (h *Handler) mentions(body string) bool {
	if h.cfg.AppSlug == "" {
		return false
	}
	at := "@" + strings.ToLower(h.cfg.AppSlug)
	b := strings.ToLower(body)
	for i := strings.Index(b, at); i >= 0; {
		end := i + len(at)
		if end == len(b) || !isHandleChar(b[end]) {
			return true
		}
		next := strings.Index(b[end:], at)
		if next < 0 {
			break
		}
		i = end + next
	}
	return false
}

func isHandleChar(c byte) bool {
	return c == '-' || c == '_' || c == '[' || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')
}

var knownAssociations = map[string]bool{"OWNER": true, "MEMBER": true, "COLLABORATOR": true, "CONTRIBUTOR": true,
	"FIRST_TIME_CONTRIBUTOR": true, "FIRST_TIMER": true, "NONE": true, "MANNEQUIN": true}

// mayChat reports whether a commenter may start chat: the pull request's
// author, or an author association the configuration allows.
func (h *Handler) mayChat(commenter *github.User, association string, prAuthor *github.User) bool {
	if commenter.GetLogin() != "" && strings.EqualFold(commenter.GetLogin(), prAuthor.GetLogin()) {
		return true
	}
	for _, a := range h.cfg.ChatAssociations {
		if strings.EqualFold(a, association) {
			return true
		}
	}
	return false
}

// notAllowed is a comment to the bot from someone who may not chat.
var notAllowed = outcome{http.StatusOK, "not allowed"}

// Outcomes of chat over a limit: the first comment refused while the
// limit holds gets a polite reply; later ones are dropped silently.
var (
	chatRefused = outcome{http.StatusAccepted, "chat limited: refusal enqueued"}
	chatOff     = outcome{http.StatusOK, "chat off by .prq.yaml"}
	chatDropped = outcome{http.StatusOK, "chat limited: dropped"}
)

// fromApp reports whether a comment is the App's own.
func (h *Handler) fromApp(u *github.User) bool {
	login := strings.ToLower(u.GetLogin())
	return h.cfg.AppSlug != "" && login == strings.ToLower(h.cfg.AppSlug)+"[bot]"
}

func (h *Handler) issueComment(ctx context.Context, delivery string, e *github.IssueCommentEvent) (outcome, error) {
	if e.GetAction() != "created" || e.GetIssue() == nil || !e.GetIssue().IsPullRequest() {
		return ignored, nil
	}
	c := e.GetComment()
	if h.fromApp(c.GetUser()) || c.GetUser().GetType() == "Bot" || !h.mentions(c.GetBody()) {
		return ignored, nil
	}
	allowed := h.mayChat(c.GetUser(), c.GetAuthorAssociation(), e.GetIssue().GetUser())
	name, args, isCommand := h.commandOf(c.GetBody())
	allowed = allowed && mayChange(name, args, c.GetAuthorAssociation())
	if !allowed && !isCommand {
		return notAllowed, nil
	}
	ref, err := prRef(e.GetInstallation().GetID(), e.GetRepo(), e.GetIssue().GetNumber())
	if err != nil {
		return malformed("issue_comment: %v", err)
	}
	if c.GetID() <= 0 {
		return malformed("issue_comment without comment id")
	}
	if isCommand {
		return h.runCommand(ctx, jobs.Command{PR: ref, CommentID: c.GetID(), Author: c.GetUser().GetLogin(), Name: name, Args: args, Link: c.GetHTMLURL(), Delivery: delivery}, allowed)
	}
	return h.chat(ctx, jobs.Chat{PR: ref, CommentID: c.GetID(), Author: c.GetUser().GetLogin(), Body: c.GetBody(), Delivery: delivery})
}

func (h *Handler) reviewComment(ctx context.Context, delivery string, e *github.PullRequestReviewCommentEvent) (outcome, error) {
	if e.GetAction() != "created" {
		return ignored, nil
	}
	c := e.GetComment()
	if h.fromApp(c.GetUser()) || c.GetUser().GetType() == "Bot" {
		return ignored, nil
	}
	if !h.mentions(c.GetBody()) {
		// a reply in a thread the App answered in talks to it too
		if c.GetInReplyTo() == 0 {
			return ignored, nil
		}
		ours, err := h.plans.AppThread(ctx, c.GetInReplyTo())
		if err != nil {
			return unavailable(err)
		}
		if !ours {
			return ignored, nil
		}
	}
	allowed := h.mayChat(c.GetUser(), c.GetAuthorAssociation(), e.GetPullRequest().GetUser())
	name, args, isCommand := "", "", false
	if h.mentions(c.GetBody()) {
		name, args, isCommand = h.commandOf(c.GetBody())
	}
	allowed = allowed && mayChange(name, args, c.GetAuthorAssociation())
	if !allowed && !isCommand {
		return notAllowed, nil
	}
	ref, err := prRef(e.GetInstallation().GetID(), e.GetRepo(), e.GetPullRequest().GetNumber())
	if err != nil {
		return malformed("pull_request_review_comment: %v", err)
	}
	if c.GetID() <= 0 {
		return malformed("pull_request_review_comment without comment id")
	}
	if isCommand {
		return h.runCommand(ctx, jobs.Command{PR: ref, CommentID: c.GetID(), Review: true, Author: c.GetUser().GetLogin(), Name: name, Args: args, Path: c.GetPath(), Link: c.GetHTMLURL(), Delivery: delivery}, allowed)
	}
	return h.chat(ctx, jobs.Chat{PR: ref, CommentID: c.GetID(), InReplyTo: c.GetInReplyTo(), Review: true, Author: c.GetUser().GetLogin(),
		Body: c.GetBody(), Path: c.GetPath(), DiffHunk: c.GetDiffHunk(), Line: c.GetLine(), Delivery: delivery})
}

// command returns the command a comment gives: a line of it that is the
// bot's mention followed by one of jobs.Commands and nothing else (any
// case, spaces collapsed, a final . or ! dropped). Anything else that
// mentions the bot is chat.
func (h *Handler) command(body string) (string, bool) {
	if h.cfg.AppSlug == "" {
		return "", false
	}
	at := "@" + strings.ToLower(h.cfg.AppSlug)
	for _, line := range strings.Split(body, "\n") {
		rest, ok := strings.CutPrefix(strings.ToLower(strings.TrimSpace(line)), at)
		if !ok || (rest != "" && rest[0] != ' ' && rest[0] != '\t') {
			continue
		}
		words := strings.Join(strings.Fields(strings.TrimRight(strings.TrimSpace(rest), ".!")), " ")
		for _, c := range jobs.Commands {
			if words == c {
				return c, true
			}
		}
	}
	return "", false
}

// Outcomes of commands.
var (
	commandTaken   = outcome{http.StatusAccepted, "command enqueued"}
	commandRefused = outcome{http.StatusAccepted, "command refused: acknowledged"}
)

// runCommand enqueues a comment's command; one from someone who may not
// give commands, or over the chat limits, is enqueued refused (it is
// only acknowledged, at no cost), and later ones over the limits are
// dropped.
func (h *Handler) runCommand(ctx context.Context, c jobs.Command, allowed bool) (outcome, error) {
	tier, o, err := h.tenant(ctx, c.PR.Installation)
	if o != nil || err != nil {
		return *o, err
	}
	c.Tier = tier
	done := commandTaken
	if h.cfg.ChatLimiter != nil {
		// everyone's commands count against the chat limits, refused ones
		// too: past them, one more is acknowledged and the rest dropped
		ok, refuse, _, err := h.cfg.ChatLimiter.AllowChat(ctx, c.PR, c.Author, c.CommentID)
		if err != nil {
			return unavailable(err)
		}
		if !ok {
			if !refuse {
				return chatDropped, nil
			}
			c.Refused, done = "over the chat limits", commandRefused
		}
	}
	if !allowed {
		c.Refused, done = "only the pull request's author and "+strings.Join(h.cfg.ChatAssociations, ", ")+" may give commands", commandRefused
	}
	ok, err := h.queue.Command(ctx, c)
	if err != nil {
		return unavailable(err)
	}
	if !ok {
		return duplicate, nil
	}
	return done, nil
}

// disabled is work of an installation that was uninstalled or suspended,
// or that GitHub refuses a token: nothing is enqueued (counted by the
// deliveries' outcome).
var disabled = outcome{http.StatusOK, "installation disabled"}

// tenant returns the tier inst's work is enqueued at, or, when it may
// not be enqueued, the outcome to answer.
func (h *Handler) tenant(ctx context.Context, inst int64) (jobs.Tier, *outcome, error) {
	tier, why, err := h.plans.Tenant(ctx, inst)
	if err != nil {
		o, err := unavailable(err)
		return "", &o, err
	}
	if why != "" {
		return "", &disabled, nil
	}
	return tier, nil, nil
}

func (h *Handler) chat(ctx context.Context, c jobs.Chat) (outcome, error) {
	tier, o, err := h.tenant(ctx, c.PR.Installation)
	if o != nil || err != nil {
		return *o, err
	}
	c.Tier = tier
	if h.cfg.Repos != nil {
		rs, _, err := h.cfg.Repos.RepoSettings(ctx, c.PR)
		if err != nil {
			return unavailable(err)
		}
		if rs.ChatOff {
			return chatOff, nil
		}
		c.Instructions, c.Language = rs.Instructions, rs.Language
	}
	done := accepted
	if h.cfg.ChatLimiter != nil {
		allowed, refuse, retryAt, err := h.cfg.ChatLimiter.AllowChat(ctx, c.PR, c.Author, c.CommentID)
		if err != nil {
			return unavailable(err)
		}
		if !allowed {
			if !refuse {
				return chatDropped, nil
			}
			c.Refusal, c.RetryAt, done = true, retryAt.UnixMilli(), chatRefused
		}
	}
	ok, err := h.queue.Chat(ctx, c)
	if err != nil {
		return unavailable(err)
	}
	if !ok {
		return duplicate, nil
	}
	return done, nil
}
