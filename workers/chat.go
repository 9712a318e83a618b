package workers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/hibiken/asynq"

	"github.com/prq-dev/prq/internal/render"
	"github.com/prq-dev/prq/internal/safemd"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/ratelimit"
	"github.com/prq-dev/prq/store"
)

// Replies records what was posted, so a comment is answered once, and
// marks prq's review threads (a *store.Store).
type Replies interface {
	Posted(ctx context.Context, pr jobs.PR, what string) (int64, error)
	// PostedDraft is Posted of what and the draft kept for it
	// (Drafts.Draft), in one read.
	PostedDraft(ctx context.Context, pr jobs.PR, what string) (id int64, draft string, err error)
	SetPosted(ctx context.Context, pr jobs.PR, what string, id int64) error
	MarkThread(ctx context.Context, root int64) error
}

// Drafts keeps a reply between the LLM call and posting it, so a retried
// post makes no second call (a *store.Store).
type Drafts interface {
	Draft(ctx context.Context, pr jobs.PR, what string) (string, error)
	SetDraft(ctx context.Context, pr jobs.PR, what, text string) error
}

// Turns paces an installation's GitHub writes (a *Pacer).
type Turns interface {
	Do(ctx context.Context, installation int64, class WriteClass, write func() error) error
}

var (
	_ Replies = (*store.Store)(nil)
	_ Drafts  = (*store.Store)(nil)
	_ Turns   = (*Pacer)(nil)
)

// ChatResponderConfig configures a ChatResponder.
type ChatResponderConfig struct {
	// Replies and Drafts record the answer. Required.
	Replies Replies
	Drafts  Drafts
	// Ledger records the job's start. Required.
	Ledger Ledger
	// Requeue puts a reply GitHub refused for now back in admission.
	// Required.
	Requeue Requeue
	// Caller makes the LLM call. Required.
	Caller *Caller
	// GitHub posts the reply. Required.
	GitHub Repliers
	// Turns paces the post among the installation's writes. Required.
	Turns Turns
	// Models are the configured models (the jobs name theirs).
	Models map[string]Model
	// Markers make the hidden marker each reply carries, by which a reply
	// posted before a crash is found again.
	Markers render.Markers
	// Backoff is the first delay before a failed post goes back to
	// admission; it doubles. Defaults to 2s.
	Backoff time.Duration
	// Attempts counts each reply's runs for its retry budget. Required.
	Attempts Attempter
	// Budget bounds each reply's retries. Defaults to DefaultChatBudget.
	Budget RetryBudget
	// GaveUpFunc, when set, counts replies that spent their retry budget,
	// by reason (prq_jobs_gave_up_total, kind chat).
	GaveUpFunc func(kind, reason string)
	// NowFunc is the clock of the retry budget. Defaults to time.Now.
	NowFunc func() time.Time
	// Installs, when set, stops the work of an installation that was
	// uninstalled or suspended, or that GitHub refuses a token.
	Installs InstallState
	// LifecycleFunc, when set, counts jobs dropped for their installation
	// (prq_lifecycle_total, event job_skipped).
	LifecycleFunc func(event, reason string)
	// Log defaults to discarding.
	Log *slog.Logger
}

// ChatResponder handles chat:reply: it answers a comment that talks to
// the bot, once: in the review thread for a diff comment, as a
// conversation comment otherwise.
type ChatResponder struct {
	cfg  ChatResponderConfig
	gate installGate
	tok  map[string]*ratelimit.Tokenizer
}

// NewChatResponder returns a ChatResponder.
func NewChatResponder(cfg ChatResponderConfig) (*ChatResponder, error) {
	switch {
	case cfg.Replies == nil || cfg.Drafts == nil:
		return nil, errors.New("workers: chat responder: Replies and Drafts are required")
	case cfg.Ledger == nil:
		return nil, errors.New("workers: chat responder: Ledger is required")
	case cfg.Requeue == nil:
		return nil, errors.New("workers: chat responder: Requeue is required")
	case cfg.Caller == nil:
		return nil, errors.New("workers: chat responder: Caller is required")
	case cfg.GitHub == nil:
		return nil, errors.New("workers: chat responder: GitHub is required")
	case cfg.Turns == nil:
		return nil, errors.New("workers: chat responder: Turns is required")
	case cfg.Backoff < 0:
		return nil, errors.New("workers: chat responder: Backoff must not be negative")
	case cfg.Attempts == nil:
		return nil, errors.New("workers: chat responder: Attempts is required")
	}
	budget, err := cfg.Budget.orDefault(DefaultChatBudget, "chat responder: Budget")
	if err != nil {
		return nil, err
	}
	cfg.Budget = budget
	if cfg.NowFunc == nil {
		cfg.NowFunc = time.Now
	}
	if cfg.Backoff == 0 {
		cfg.Backoff = 2 * time.Second
	}
	ms, err := models(cfg.Models)
	if err != nil {
		return nil, err
	}
	cfg.Models = ms
	tok, err := tokenizers(ms)
	if err != nil {
		return nil, err
	}
	cfg.Log = logOrDiscard(cfg.Log)
	return &ChatResponder{cfg: cfg, tok: tok, gate: installGate{state: cfg.Installs, count: cfg.LifecycleFunc, log: cfg.Log}}, nil
}

// ProcessTask answers one admitted chat job, or posts the one polite
// refusal of a comment over the chat limits (a job that went through no
// admission and makes no LLM call).
func (r *ChatResponder) ProcessTask(ctx context.Context, t *asynq.Task) error {
	cfg, log := &r.cfg, r.cfg.Log
	var c jobs.Chat
	if err := jobs.Unmarshal(t.Type(), t.Payload(), &c); err != nil {
		return fmt.Errorf("%w: %v", asynq.SkipRetry, err)
	}
	ticket := ChatTicket(c)
	if !c.Refusal {
		started(ctx, cfg.Ledger, log, ticket)
	}
	if err := r.gate.check(ctx, c.PR.Installation, string(jobs.KindChat)); err != nil {
		if !c.Refusal {
			settle(ctx, cfg.Ledger, log, ticket, ratelimit.Cost{}) // no call: all refunded
		}
		return err
	}
	at, err := budgeted(ctx, cfg.Attempts, ticket.ID, c.Created, cfg.Budget, cfg.NowFunc())
	if err != nil {
		return err
	}
	err = r.answer(ctx, c, at)
	var reason string
	if reason, err = giveUpIfSpent(at, err); reason != "" && cfg.GaveUpFunc != nil {
		cfg.GaveUpFunc(string(jobs.KindChat), reason)
	}
	if err == nil || errors.Is(err, asynq.SkipRetry) || errors.Is(err, asynq.RevokeTask) {
		if ferr := cfg.Attempts.Forget(ctx, ticket.ID); ferr != nil {
			log.WarnContext(ctx, "could not forget a finished job's attempts", "task", ticket.ID, "err", ferr)
		}
	}
	return err
}

// answer answers a comment once: its reply drafted (called, or
// refused), posted, and recorded as posted.
func (r *ChatResponder) answer(ctx context.Context, c jobs.Chat, at attempt) error {
	what := "reply:" + strconv.FormatInt(c.CommentID, 10)
	id, kept, err := r.cfg.Replies.PostedDraft(ctx, c.PR, what)
	if err != nil {
		return err
	} else if id != 0 {
		return nil // answered already
	}
	body, apology, err := r.draft(ctx, c, at, what, kept)
	if err != nil || body == "" {
		return err
	}
	id, posted, err := r.post(ctx, c, at, body)
	if !posted {
		return err
	}
	return r.recordPosted(ctx, c, what, apology, id)
}

// draft is the reply to post, kept as a draft so that a retried post
// makes no second call: the one drafted already (kept), a refusal, or
// the model's answer (or an apology for a skipped call: apology names
// it). An empty body with no error: nothing to post (the PR was told).
func (r *ChatResponder) draft(ctx context.Context, c jobs.Chat, at attempt, what, kept string) (body, apology string, err error) {
	cfg := &r.cfg
	body = kept
	switch {
	case body != "" && !c.Refusal:
		// a retry posting the reply drafted already: it came back through
		// admission but makes no call, so its reservation is all refunded
		settle(ctx, cfg.Ledger, cfg.Log, ChatTicket(c), ratelimit.Cost{})
		return body, "", nil
	case body != "":
		return body, "", nil
	case c.Refusal:
		body = refusal(c)
	default:
		if body, apology, err = r.reply(ctx, c, at); err != nil || body == "" {
			return "", "", err
		}
	}
	if !c.Review {
		body = fmt.Sprintf("@%s %s", c.Author, body)
	}
	if err := cfg.Drafts.SetDraft(ctx, c.PR, what, body); err != nil {
		return "", "", err
	}
	return body, apology, nil
}

// reply calls the model: its text, made inert, or an apology for a
// skipped call (once per PR and quota window: apology names it; an
// empty body when the PR was told already).
func (r *ChatResponder) reply(ctx context.Context, c jobs.Chat, at attempt) (body, apology string, err error) {
	cfg := &r.cfg
	m, ok := cfg.Models[c.Model]
	if !ok {
		return "", "", fmt.Errorf("%w: model %q is not configured", asynq.SkipRetry, c.Model)
	}
	pm, err := buildChatPrompt(c, m, r.tok[c.Model])
	if err != nil {
		return "", "", fmt.Errorf("%w: %v", asynq.SkipRetry, err)
	}
	out, err := cfg.Caller.call(ctx, callSpec{ticket: ChatTicket(c), kind: jobs.KindChat, tier: c.Tier, inst: c.PR.Installation, prompt: pm, model: m, retried: retried(ctx), maxRetry: maxRetry(ctx), attempt: at})
	var skip *ended
	switch {
	case errors.As(err, &skip) && skip.step == endSkip:
		if skip.gaveUp != "" && cfg.GaveUpFunc != nil {
			cfg.GaveUpFunc(string(jobs.KindChat), skip.gaveUp)
		}
		if strings.HasPrefix(skip.reason, quotaSkip) {
			// one apology per PR and quota window, not one per comment
			apology = "chat-quota:" + skip.reason
			if id, err := cfg.Replies.Posted(ctx, c.PR, apology); err != nil {
				return "", "", err
			} else if id != 0 {
				cfg.Log.InfoContext(ctx, "chat over quota; the PR was told already", "pr", c.PR.String(), "comment", c.CommentID)
				return "", "", nil
			}
		}
		return "Sorry, I can't answer right now: " + skip.reason + ".", apology, nil
	case err != nil:
		return "", "", err
	}
	// the model's text, inert: no live mention, image, HTML or outside
	// link (the asker's mention is prq's own)
	return safemd.Text(out.Text, c.PR.Owner+"/"+c.PR.Repo), "", nil
}

// threadRoot is the comment a reply to c answers in its thread.
func threadRoot(c jobs.Chat) int64 {
	if c.InReplyTo != 0 {
		return c.InReplyTo
	}
	return c.CommentID
}

// post posts body, paced among the installation's writes, once: a run
// that posted and crashed before recording is found by its marker.
// Not posted: the job ends with err (GitHub said wait: back through
// admission; a failure: retried, the draft kept).
func (r *ChatResponder) post(ctx context.Context, c jobs.Chat, at attempt, body string) (id int64, posted bool, err error) {
	cfg := &r.cfg
	gh, err := cfg.GitHub.Replier(c.PR.Installation)
	if err != nil {
		return 0, false, fmt.Errorf("%w: %v", asynq.SkipRetry, err)
	}
	marker := cfg.Markers.Reply(c.PR.Key(), c.CommentID)
	err = cfg.Turns.Do(ctx, c.PR.Installation, ChatWrite, func() error {
		var err error
		// a run before this one may have posted and crashed before
		// recording: find its reply by marker (a first run cannot have)
		if at.n > 1 {
			if id, err = gh.HasReply(ctx, c.PR.Owner, c.PR.Repo, c.PR.Number, c.Review, marker); err != nil || id != 0 {
				return err
			}
		}
		if c.Review {
			id, err = gh.Reply(ctx, c.PR.Owner, c.PR.Repo, c.PR.Number, threadRoot(c), body+"\n\n"+marker)
		} else {
			id, err = gh.Comment(ctx, c.PR.Owner, c.PR.Repo, c.PR.Number, body+"\n\n"+marker)
		}
		return err
	})
	if err == nil {
		return id, true, nil
	}
	return 0, false, r.postFailed(ctx, c, at, err)
}

// postFailed is how a job whose post failed ends: waiting as GitHub
// said, through admission (the draft is kept, so no second LLM call),
// stopped for a refused installation, or retried with backoff.
func (r *ChatResponder) postFailed(ctx context.Context, c jobs.Chat, at attempt, err error) error {
	cfg, ticket := &r.cfg, ChatTicket(c)
	var ra *RetryAfterError
	if errors.As(err, &ra) && c.Refusal && !at.spent() {
		return err // asynq waits as told (RetryDelay): no admission
	}
	if errors.As(err, &ra) && !at.spent() {
		return backToAdmission(ctx, cfg.Requeue, ticket, ra.After, err)
	}
	if rerr := r.gate.refused(ctx, c.PR.Installation, err); rerr != err {
		return rerr
	}
	gerr := ghFailed(ctx, cfg.Log, c.PR, "chat reply", err)
	if gerr == nil {
		return nil
	}
	if n := retried(ctx); n < maxRetry(ctx) && !at.spent() && !c.Refusal {
		// asynq holds the task again; its ticket comes back after the backoff
		if rerr := cfg.Requeue.RegisterAt(ctx, ticket, time.Now().Add(cfg.Backoff*time.Duration(1<<min(n, 8)))); rerr != nil {
			cfg.Log.WarnContext(ctx, "could not put the chat reply back in admission; the reconciler adopts the held task", "task", ticket.ID, "err", rerr)
		}
	}
	return gerr
}

// recordPosted records a posted reply: its thread marked prq's, the
// PR's apology for its quota, the comment answered.
func (r *ChatResponder) recordPosted(ctx context.Context, c jobs.Chat, what, apology string, id int64) error {
	cfg := &r.cfg
	if c.Review {
		mark := threadRoot(c)
		if c.Thread != 0 {
			mark = c.Thread // a GitLab discussion
		}
		if err := cfg.Replies.MarkThread(ctx, mark); err != nil {
			return err
		}
	}
	if apology != "" {
		if err := cfg.Replies.SetPosted(ctx, c.PR, apology, id); err != nil {
			return err
		}
	}
	return cfg.Replies.SetPosted(ctx, c.PR, what, id)
}

// quotaSkip starts the reason of a call skipped for the tenant's quota.
const quotaSkip = store.QuotaSkipPrefix + " reached"

// refusal is the one reply to a comment over the chat limits.
func refusal(c jobs.Chat) string {
	if c.RetryAt <= 0 {
		return "you've reached the chat limit; please try again later."
	}
	return "you've reached the chat limit; try again after " + time.UnixMilli(c.RetryAt).UTC().Format("15:04") + " UTC."
}
