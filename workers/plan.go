package workers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"strings"
	"time"

	"github.com/hibiken/asynq"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/diff"
	"github.com/prq-dev/prq/ghapp"
	"github.com/prq-dev/prq/internal/repoconfig"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/llm"
	"github.com/prq-dev/prq/ratelimit"
	"github.com/prq-dev/prq/store"
)

// PlanStore records a planned run and its job ids (a *store.Store).
type PlanStore interface {
	GetRun(ctx context.Context, pr jobs.PR) (store.Run, error)
	StartRun(ctx context.Context, r store.Run, files []store.FileData) (previous string, started bool, err error)
	TaskIDs(ctx context.Context, pr jobs.PR, head string) ([]string, error)
	SetTaskIDs(ctx context.Context, pr jobs.PR, head string, ids []string) error
	// Lock serializes the plans of one pull request (see Planner.plan).
	Lock(ctx context.Context, pr jobs.PR, what, owner string, ttl time.Duration) (release func(), ok bool, err error)
}

// RepoSettings records what the webhook needs of a repository's
// configuration (a *store.Store).
type RepoSettings interface {
	SetRepoSettings(ctx context.Context, pr jobs.PR, rs jobs.RepoSettings) error
}

// Controls tells what commands said of a pull request's automatic
// reviews (a *store.Store).
type Controls interface {
	Control(ctx context.Context, pr jobs.PR) (store.Control, error)
}

// Plans looks up an installation's plan (a *store.Store).
type Plans interface {
	GetPlan(ctx context.Context, id int64) (store.Plan, error)
}

var (
	_ PlanStore    = (*store.Store)(nil)
	_ Plans        = (*store.Store)(nil)
	_ RepoSettings = (*store.Store)(nil)
	_ Controls     = (*store.Store)(nil)
)

// PlannerConfig configures a Planner.
type PlannerConfig struct {
	// Store records the run. Required.
	Store PlanStore
	// Plans tells open-source plans, which include reviews whatever their
	// tier. Required.
	Plans Plans
	// Tickets submits the per-file jobs and drops a superseded head's.
	// Required.
	Tickets Tickets
	// GitHub reads the pull request. Required.
	GitHub PRReaders
	// Queue enqueues finalize when no file needs the LLM. Required.
	Queue TaskQueue
	// Models are the configured models; SummaryModel and ReviewModel
	// must be among them.
	Models                    map[string]Model
	SummaryModel, ReviewModel string
	// Tiers says which tiers get reviews.
	Tiers map[jobs.Tier]TierSpec
	// Exclude are path globs never reviewed.
	Exclude []string
	// MaxParts caps the calls one file's review may be split into; a file
	// that needs more is listed as not reviewed. Defaults to 20.
	MaxParts int
	// ContextTokens is how many tokens of the pull request's file list
	// and diffs every prompt of a head carries for context (see
	// sharedContext), at most a quarter of what the smaller model's
	// context window and input limits take. 0: none (the title and
	// description only). Negative (ContextAuto): AutoContextTokens where
	// every model of the head reads its prompt cache free of its input
	// limit (Model.CachedInputFree), else 0.
	ContextTokens int64
	// Checks, when set, shows the planned head as a queued check run.
	Checks *Checks
	// SkipBotPRs skips PRs opened by bots. Defaults to false here; the
	// command sets it from configuration (default true).
	SkipBotPRs bool
	// RepoConfig reads each repository's .prq.yaml (and its
	// organisation's prq.yaml) at the pull request's base commit: its
	// rules for automatic reviews, paths, instructions and language.
	// Defaults to false here; the command sets it from configuration
	// (github.repo_config, default true).
	RepoConfig bool
	// Settings, when set, records what the webhook needs of each
	// repository's configuration (a *store.Store).
	Settings RepoSettings
	// LastConfigs, when set, keeps each repository's last valid
	// configuration file: a file that cannot be used falls back to it
	// rather than to the layers beneath.
	LastConfigs LastConfigs
	// Controls, when set, tells pull requests whose automatic reviews
	// were paused or ignored by a command (a *store.Store).
	Controls Controls
	// Learnings, when set, are added to every review's instructions.
	Learnings LearningStore
	// AppSlug is the App's name: a line "@slug ignore" in a pull
	// request's description keeps it from automatic reviews.
	AppSlug string
	// Attempts counts each job's runs for its retry budget. Required.
	Attempts Attempter
	// Budget bounds each job's retries, GitHub rate-limit waits included.
	// Defaults to DefaultBatchBudget.
	Budget RetryBudget
	// GaveUpFunc, when set, counts jobs that spent their retry budget, by
	// job kind and reason (prq_jobs_gave_up_total).
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

// Planner handles pr:plan: it turns a PR event into per-file jobs (no
// LLM call).
type Planner struct {
	cfg    PlannerConfig
	repos  *repoConfigs
	gate   installGate
	tok    map[string]*ratelimit.Tokenizer
	budget budgetOf
}

// NewPlanner returns a Planner.
func NewPlanner(cfg PlannerConfig) (*Planner, error) {
	switch {
	case cfg.Store == nil:
		return nil, errors.New("workers: planner: Store is required")
	case cfg.Plans == nil:
		return nil, errors.New("workers: planner: Plans is required")
	case cfg.Tickets == nil:
		return nil, errors.New("workers: planner: Tickets is required")
	case cfg.GitHub == nil:
		return nil, errors.New("workers: planner: GitHub is required")
	case cfg.Queue == nil:
		return nil, errors.New("workers: planner: Queue is required")
	case cfg.Attempts == nil:
		return nil, errors.New("workers: planner: Attempts is required")
	}
	budget, err := cfg.Budget.orDefault(DefaultBatchBudget, "planner: Budget")
	if err != nil {
		return nil, err
	}
	cfg.Budget = budget
	if cfg.NowFunc == nil {
		cfg.NowFunc = time.Now
	}
	for _, g := range cfg.Exclude {
		if _, err := path.Match(strings.TrimSuffix(g, "/**"), "x"); err != nil {
			return nil, fmt.Errorf("workers: planner: Exclude glob %q: %w", g, err)
		}
	}
	ms, err := models(cfg.Models, cfg.SummaryModel, cfg.ReviewModel)
	if err != nil {
		return nil, err
	}
	cfg.Models = ms
	if cfg.MaxParts <= 0 {
		cfg.MaxParts = 20
	}
	tok, err := tokenizers(ms)
	if err != nil {
		return nil, err
	}
	cfg.Log = logOrDiscard(cfg.Log)
	return &Planner{cfg: cfg, tok: tok, repos: newRepoConfigs(cfg.NowFunc, cfg.LastConfigs), gate: installGate{state: cfg.Installs, count: cfg.LifecycleFunc, log: cfg.Log}, budget: budgetOf{attempts: cfg.Attempts, budget: cfg.Budget, gaveUp: cfg.GaveUpFunc, now: cfg.NowFunc, log: cfg.Log}}, nil
}

// ProcessTask lists the PR's files, filters them, records the run,
// supersedes the previous head's work, and submits summary and review
// jobs through admission.
// Its retries, GitHub's rate-limit waits included, stay within its
// budget.
func (p *Planner) ProcessTask(ctx context.Context, t *asynq.Task) error {
	var pl jobs.Plan
	if err := jobs.Unmarshal(t.Type(), t.Payload(), &pl); err != nil {
		return fmt.Errorf("%w: %v", asynq.SkipRetry, err)
	}
	if err := pl.PR.Validate(); err != nil {
		return fmt.Errorf("%w: %v", asynq.SkipRetry, err)
	}
	return p.budget.run(ctx, "plan", jobs.PlanTaskID(pl), func() error { return p.plan(ctx, pl) })
}

// planning is what the phases of one plan learn and hand on, in the
// order plan runs them.
type planning struct {
	pl            jobs.Plan
	gh            PRReader
	pr            ghapp.PullRequest
	rc            repoconfig.Config
	notice, guide string
	files         []ghapp.File
	prev          store.Run
	changed       map[string]bool // nil: review every file
	tier          TierSpec
	data          []store.FileData
	summaries     []jobs.File
	reviews       []jobs.File
	pc            prContext
	previous      string // the head the run superseded
	started       bool   // this plan started the run (not a retry)
	seq           int64
	ids           []string
}

// plan runs the phases of planning a pull request's head, in order: read
// the pull request and its configuration, decide whether to review it,
// list the files and pick those to summarize and review, build the
// context the head's prompts share, record the run (superseding the
// previous head), then submit its jobs.
func (p *Planner) plan(ctx context.Context, pl jobs.Plan) error {
	if err := p.gate.check(ctx, pl.PR.Installation, "plan"); err != nil {
		return err
	}
	// one plan of a pull request at a time: a plan reads the head from
	// GitHub, then starts its run; an older event's plan whose read came
	// before a push must not start its run after the newer event's
	release, ok, err := p.cfg.Store.Lock(ctx, pl.PR, "plan", jobs.PlanTaskID(pl), planLockTTL)
	if err != nil {
		return err
	}
	if !ok {
		return &RetryAfterError{After: planLockWait, Err: errors.New("another plan of the pull request is running")}
	}
	defer release()
	s := &planning{pl: pl}
	if gone, err := p.readPR(ctx, s); gone || err != nil {
		return err
	}
	if err := p.readConfig(ctx, s); err != nil {
		return err
	}
	if review, err := p.decide(ctx, s); !review || err != nil {
		return err
	}
	if err := p.listFiles(ctx, s); err != nil {
		return err
	}
	p.tierOf(ctx, s)
	p.selectFiles(s)
	p.promptContext(ctx, s)
	p.splitReviews(s)
	if wantsWalkthrough(s.rc.Walkthrough, s.data, len(s.summaries)) {
		// the last of the head's summary jobs
		s.summaries = append(s.summaries, jobs.File{PR: s.pl.PR, HeadSHA: s.pl.HeadSHA, Kind: jobs.KindSummary, Tier: s.pl.Tier, Model: p.cfg.SummaryModel, Walkthrough: true})
	}
	if done, err := p.recordRun(ctx, s); done || err != nil {
		return err
	}
	if err := p.submit(ctx, s); err != nil {
		return err
	}
	p.queued(ctx, s)
	p.cfg.Log.InfoContext(ctx, "pull request planned", "pr", pl.PR.String(), "head", short(pl.HeadSHA), "tier", pl.Tier,
		"files", len(s.files), "summaries", len(s.summaries), "reviews", len(s.reviews), "superseded", short(s.previous))
	if len(s.summaries)+len(s.reviews) == 0 {
		return enqueueFinalize(ctx, p.cfg.Queue, jobs.Finalize{PR: pl.PR, HeadSHA: pl.HeadSHA, Tier: pl.Tier, Run: s.seq})
	}
	return nil
}

// readPR reads the pull request from GitHub; gone reports that it no
// longer exists (nothing to plan).
func (p *Planner) readPR(ctx context.Context, s *planning) (gone bool, err error) {
	pl := s.pl
	if s.gh, err = p.cfg.GitHub.PRReader(pl.PR.Installation); err != nil {
		return false, fmt.Errorf("%w: %v", asynq.SkipRetry, err)
	}
	s.pr, err = s.gh.PR(ctx, pl.PR.Owner, pl.PR.Repo, pl.PR.Number)
	if errors.Is(err, ghapp.ErrNotFound) {
		p.cfg.Log.InfoContext(ctx, "pull request is gone; nothing to plan", "pr", pl.PR.String())
		return true, nil
	}
	if err != nil {
		return false, p.gate.refused(ctx, pl.PR.Installation, ghRetry(err))
	}
	return false, nil
}

// readConfig reads the repository's configuration and guidelines at the
// base of an open pull request still at the event's head, and records
// the repository's settings; otherwise the defaults hold.
func (p *Planner) readConfig(ctx context.Context, s *planning) error {
	cfg, pl, pr := &p.cfg, s.pl, s.pr
	s.rc = repoconfig.Default()
	if !cfg.RepoConfig || pr.State != "open" || pr.HeadSHA != pl.HeadSHA {
		return nil
	}
	var err error
	if s.rc, s.notice, err = p.repos.effective(ctx, s.gh, pl.PR.Installation, pl.PR.Owner, pl.PR.Repo, pr.BaseSHA); err != nil {
		return p.gate.refused(ctx, pl.PR.Installation, ghRetry(err))
	}
	if s.guide, err = p.repos.guidelinesOf(ctx, s.gh, pl.PR.Owner, pl.PR.Repo, pr.BaseSHA, s.rc); err != nil {
		return p.gate.refused(ctx, pl.PR.Installation, ghRetry(err))
	}
	if s.notice != "" {
		cfg.Log.WarnContext(ctx, "repository configuration could not be used", "pr", pl.PR.String(), "problem", s.notice)
	}
	if cfg.Settings != nil {
		return cfg.Settings.SetRepoSettings(ctx, pl.PR, jobs.RepoSettings{ChatOff: !s.rc.Chat, Drafts: s.rc.Drafts,
			Instructions: withGuidelines(s.rc.RepoInstructions(), s.guide), Language: s.rc.Language})
	}
	return nil
}

// decide reports whether the head is to be reviewed, logging why not.
func (p *Planner) decide(ctx context.Context, s *planning) (bool, error) {
	cfg, log, pl, pr := &p.cfg, p.cfg.Log, s.pl, s.pr
	// a command asks for a review whatever the rules for automatic ones
	asked := pl.Action == jobs.ActionReview || pl.Action == jobs.ActionFullReview
	skip := ""
	if !asked {
		var err error
		if skip, err = p.automaticSkip(ctx, pl.PR, pr, s.rc); err != nil {
			return false, err
		}
	}
	switch {
	case pr.State != "open":
		log.InfoContext(ctx, "pull request is closed; skipped", "pr", pl.PR.String())
		return false, nil
	case skip != "":
		log.InfoContext(ctx, "automatic review skipped", "pr", pl.PR.String(), "reason", skip, "config", describe(s.rc.Sources))
		return false, nil
	case pr.HeadSHA != pl.HeadSHA:
		log.InfoContext(ctx, "pull request moved on; a newer event plans it", "pr", pl.PR.String(), "event_head", pl.HeadSHA, "head", pr.HeadSHA)
		return false, nil
	case pr.AuthorIsBot && cfg.SkipBotPRs && !asked:
		log.InfoContext(ctx, "pull request opened by a bot; skipped", "pr", pl.PR.String(), "author", pr.Author)
		return false, nil
	}
	return true, nil
}

// listFiles lists the pull request's files, reads the previous run and,
// for an incremental review, which files changed since its last
// reviewed commit.
func (p *Planner) listFiles(ctx context.Context, s *planning) error {
	pl := s.pl
	var err error
	if s.files, err = s.gh.Files(ctx, pl.PR.Owner, pl.PR.Repo, pl.PR.Number); err != nil {
		return p.gate.refused(ctx, pl.PR.Installation, ghRetry(err))
	}
	if s.prev, err = p.cfg.Store.GetRun(ctx, pl.PR); err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	// Incremental: on a new push, review only what changed since the
	// last reviewed commit.
	incremental := pl.Action == "synchronize" || pl.Action == jobs.ActionReview || pl.Action == jobs.ActionResume
	if s.prev.LastReviewed == "" || s.prev.LastReviewed == pl.HeadSHA || !incremental {
		return nil
	}
	cmp, err := s.gh.Compare(ctx, pl.PR.Owner, pl.PR.Repo, s.prev.LastReviewed, pl.HeadSHA)
	switch {
	case err == nil:
		s.changed = map[string]bool{}
		for _, f := range cmp {
			s.changed[f.Filename] = true
		}
	case errors.Is(err, ghapp.ErrNotFound): // force-push: review everything
	case errors.Is(err, ghapp.ErrCompareTruncated):
		// files past GitHub's cap would pass as unchanged: review everything
		p.cfg.Log.InfoContext(ctx, "comparison truncated by GitHub; reviewing every file", "pr", pl.PR.String(), "err", err)
	default:
		return p.gate.refused(ctx, pl.PR.Installation, ghRetry(err))
	}
	return nil
}

// tierOf sets what the plan's tier does, as the installation's plan
// adjusts it.
func (p *Planner) tierOf(ctx context.Context, s *planning) {
	s.tier = p.cfg.Tiers[s.pl.Tier]
	plan, err := p.cfg.Plans.GetPlan(ctx, s.pl.PR.Installation)
	switch {
	case err == nil:
		if plan.Reason == "open_source_user" {
			s.tier.Review = true // open-source plans include reviews whatever their tier
		}
	default:
		p.cfg.Log.WarnContext(ctx, "could not read the installation's plan; planned by its tier", "pr", s.pl.PR.String(), "err", err)
	}
}

// selectFiles records every file of the pull request, with why it is
// skipped if it is, and lists the summary and review jobs of the rest.
func (p *Planner) selectFiles(s *planning) {
	cfg, pl, rc := &p.cfg, s.pl, s.rc
	taken := 0 // files reviewed, for reviews.max_files
	for i, f := range s.files {
		fd := store.FileData{Path: f.Filename, Status: f.Status, Additions: f.Additions, Deletions: f.Deletions, Index: i}
		if f.Patch != nil {
			fd.Patch = *f.Patch
		}
		g, ex := excluded(f.Filename, cfg.Exclude)
		repoEx := rc.Excluded(f.Filename)
		switch {
		case f.Patch == nil:
			fd.SkipReason = "binary or too large for a patch"
		case f.Status == "removed":
			fd.SkipReason = "removed"
		case ex:
			fd.SkipReason = "excluded by " + g
		case repoEx != "":
			fd.SkipReason = repoEx
		case rc.MaxFiles > 0 && taken >= rc.MaxFiles:
			fd.SkipReason = fmt.Sprintf("not reviewed: over the %d files of .prq.yaml reviews.max_files", rc.MaxFiles)
		case s.changed != nil && !s.changed[f.Filename]:
			fd.SkipReason = "unchanged since " + short(s.prev.LastReviewed)
		}
		if fd.SkipReason == "" || strings.HasPrefix(fd.SkipReason, "unchanged since") {
			taken++
		}
		fd.Instructions = rc.InstructionsFor(f.Filename)
		s.data = append(s.data, fd)
		if fd.SkipReason != "" {
			continue
		}
		s.summaries = append(s.summaries, jobs.File{PR: pl.PR, HeadSHA: pl.HeadSHA, Kind: jobs.KindSummary, Tier: pl.Tier, Path: f.Filename, Index: i, Model: cfg.SummaryModel})
		if s.tier.Review {
			s.reviews = append(s.reviews, jobs.File{PR: pl.PR, HeadSHA: pl.HeadSHA, Kind: jobs.KindReview, Tier: pl.Tier, Path: f.Filename, Index: i, Model: cfg.ReviewModel})
		}
	}
}

// promptContext builds what every prompt of the head shares: the
// maintainers' instructions for all its files (with the repository's
// guidelines and learnings), and the pull request's context.
func (p *Planner) promptContext(ctx context.Context, s *planning) {
	cfg := &p.cfg
	s.pc = contextOf(s.pr.Title, s.pr.Body).withRepo(withLearnings(withGuidelines(headInstructions(s.rc.RepoInstructions(), s.data), s.guide), p.learnings(ctx, s.pl.PR)), s.rc.Language)
	in := []Model{cfg.Models[cfg.SummaryModel]}
	if len(s.reviews) > 0 {
		in = append(in, cfg.Models[cfg.ReviewModel])
	}
	s.pc = s.pc.withShared(sharedContext(s.pc, s.data, contextBudget(contextWanted(cfg.ContextTokens, in...), in...)))
}

// splitReviews makes a review of a file too large for one call several
// jobs, one per part; a file over the hard cap is not reviewed at all.
func (p *Planner) splitReviews(s *planning) {
	cfg := &p.cfg
	var split []jobs.File
	for _, f := range s.reviews {
		fd := &s.data[f.Index]
		d, err := diff.Parse(fd.Patch)
		if err != nil {
			split = append(split, f) // the job records that the patch could not be read
			continue
		}
		parts, err := reviewParts(s.pc, *fd, d, cfg.Models[f.Model], p.tok[f.Model])
		switch {
		case err != nil:
			split = append(split, f)
		case len(parts) > cfg.MaxParts:
			fd.SkipReason = fmt.Sprintf("not reviewed: its diff needs %d calls, over the limit of %d (max_review_parts)", len(parts), cfg.MaxParts)
		case len(parts) == 1:
			split = append(split, f)
		default:
			for k := range parts {
				part := f
				part.Part, part.Parts = k+1, len(parts)
				split = append(split, part)
			}
		}
	}
	s.reviews = split
}

// recordRun starts the head's run, supersedes the previous head's and
// reads the run's sequence; done reports a retried plan whose jobs exist
// already (or that has none), so there is nothing to submit.
func (p *Planner) recordRun(ctx context.Context, s *planning) (done bool, err error) {
	cfg, pl, pc := &p.cfg, s.pl, s.pc
	walkthrough := len(s.summaries) > 0 && s.summaries[len(s.summaries)-1].Walkthrough
	run := store.Run{PR: pl.PR, Head: pl.HeadSHA, Base: s.pr.BaseSHA, Tier: pl.Tier, SummaryTotal: len(s.summaries), ReviewTotal: len(s.reviews), Walkthrough: walkthrough,
		Title: pc.title, Body: pc.body, Instructions: pc.instructions, Language: pc.language, ConfigNotice: s.notice, Round: pl.Round, Context: pc.shared}
	if s.previous, s.started, err = cfg.Store.StartRun(ctx, run, s.data); err != nil {
		return false, err
	}
	if !s.started {
		// planned already (a retried plan): make sure its jobs exist
		ids, err := cfg.Store.TaskIDs(ctx, pl.PR, pl.HeadSHA)
		if err != nil || len(ids) > 0 || len(s.summaries)+len(s.reviews) == 0 {
			return true, err
		}
	}
	if s.previous != "" {
		supersede(ctx, cfg.Store, cfg.Tickets, cfg.Log, pl.PR, s.previous)
		if cfg.Checks != nil {
			cfg.Checks.Superseded(ctx, pl.PR, s.previous, pl.HeadSHA)
		}
	}
	cur, err := cfg.Store.GetRun(ctx, pl.PR)
	if err != nil {
		return false, err
	}
	s.seq = cur.CreatedAt.UnixMilli()
	return false, nil
}

// submit submits the head's summary jobs, then its review jobs, and
// records their ids. The jobs admitted through tickets are submitted
// together (Tickets.SubmitMany: each held, then a model's tickets
// registered in one step), in that order.
func (p *Planner) submit(ctx context.Context, s *planning) error {
	var subs []admission.Submission
	if err := p.submitFiles(ctx, s, s.summaries, jobs.TypeSummary, &subs); err != nil {
		return err
	}
	if err := p.submitFiles(ctx, s, s.reviews, jobs.TypeReview, &subs); err != nil {
		return err
	}
	if len(subs) > 0 {
		if _, err := p.cfg.Tickets.SubmitMany(ctx, subs); err != nil {
			return err
		}
	}
	return p.cfg.Store.SetTaskIDs(ctx, s.pl.PR, s.pl.HeadSHA, s.ids)
}

// submitFiles prepares one kind's jobs: each to be admitted through a
// ticket (added to subs), or on the batch lane enqueued at once.
func (p *Planner) submitFiles(ctx context.Context, s *planning, list []jobs.File, typ string, subs *[]admission.Submission) error {
	cfg := &p.cfg
	for k := range list {
		f := &list[k]
		f.Total, f.PRSeq, f.Created = len(list), s.seq, time.Now().UnixMilli()
		var fd store.FileData
		var pm prompt
		var err error
		if f.Walkthrough {
			fd.Index = walkthroughFile
			pm, err = walkthroughPrompt(s.pc, s.data, cfg.Models[f.Model], p.tok[f.Model])
		} else {
			fd = s.data[f.Index]
			pm, err = buildFilePrompt(f.Kind, s.pc, fd, cfg.Models[f.Model], p.tok[f.Model], f.Part)
		}
		if err != nil {
			// the job records why it could not run; estimate little
			pm.estimate = 1
		}
		f.Estimate, f.EstimateOutput = pm.estimate, pm.output
		f.Index = k
		ticket := fileTicket(*f)
		s.ids = append(s.ids, ticket.ID)
		payload := jobs.Marshal(fileRef{File: *f, FileIndex: fd.Index})
		task, opts := asynq.NewTask(typ, payload), []asynq.Option{asynq.MaxRetry(8), asynq.Timeout(fileTaskTimeout(s.tier))}
		if s.tier.Batch && cfg.Models[f.Model].Batch {
			// the batch lane: not admitted; it runs at once and hands
			// its request over (FileWorker.viaBatch)
			opts = append(opts, asynq.TaskID(ticket.ID), asynq.Queue(ticket.Queue))
			if _, err := cfg.Queue.EnqueueContext(ctx, task, opts...); err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) {
				return err
			}
			continue
		}
		*subs = append(*subs, admission.Submission{Task: task, Ticket: ticket, Opts: opts})
	}
	return nil
}

// queued tells the checks a run this plan started has jobs queued, with
// the slow lane they wait in and when they are due, if any.
func (p *Planner) queued(ctx context.Context, s *planning) {
	cfg, n := &p.cfg, len(s.summaries)+len(s.reviews)
	if cfg.Checks == nil || !s.started || n == 0 {
		return
	}
	lane := ""
	for _, m := range []Model{cfg.Models[cfg.SummaryModel], cfg.Models[cfg.ReviewModel]} {
		switch {
		case m.Name == cfg.ReviewModel && len(s.reviews) == 0:
		case s.tier.Batch && m.Batch:
			lane = LaneBatch
		case s.tier.Flex && m.Flex && lane == "":
			lane = LaneFlex
		}
	}
	var due time.Time
	if lane != "" {
		due = cfg.NowFunc().Add(s.tier.laneWait())
	}
	cfg.Checks.Queued(ctx, s.pl.PR, s.pl.HeadSHA, n, lane, due)
}

// ContextAuto asks for a head's shared context by its models
// (contextWanted).
const ContextAuto = -1

// AutoContextTokens is the shared context ContextAuto gives a head
// whose models read their prompt cache free of their input limits.
const AutoContextTokens = 2000

// contextWanted is the shared context a head asks for: want, or, for
// ContextAuto, AutoContextTokens where every model reads its prompt
// cache free of its input limit (Anthropic: a cache read costs a tenth
// of the input price and none of the limit) and none elsewhere (OpenAI
// counts cached tokens toward TPM: context there costs throughput, and
// at gpt-4o's half price for cached input more dollars than it saves).
func contextWanted(want int64, models ...Model) int64 {
	if want >= 0 {
		return want
	}
	for _, m := range models {
		if !m.CachedInputFree {
			return 0
		}
	}
	return AutoContextTokens
}

// contextBudget is how many tokens of diffs a head's shared context
// carries: want, at most a quarter of what each model's context window
// and its input limits' burst take (the file's own diff and the output
// need the rest).
func contextBudget(want int64, models ...Model) int64 {
	for _, m := range models {
		want = min(want, budget(m)/4)
		if l := m.Limits; l != nil {
			for _, burst := range []int64{l.TokensPerPeriod, l.BurstTokens, l.InputTokensPerPeriod, l.BurstInputTokens} {
				if burst > 0 {
					want = min(want, (burst-m.MaxOutput)/4)
				}
			}
		}
	}
	return max(want, 0)
}

// automaticSkip returns why a pull request gets no automatic review
// ("" when it does): a command paused or ignored it, its description
// says "@slug ignore", or the repository's rules skip it.
func (p *Planner) automaticSkip(ctx context.Context, ref jobs.PR, pr ghapp.PullRequest, rc repoconfig.Config) (string, error) {
	if p.cfg.Controls != nil {
		ctl, err := p.cfg.Controls.Control(ctx, ref)
		if err != nil {
			return "", err
		}
		switch {
		case ctl.Ignored:
			return "ignored by a command", nil
		case ctl.Paused:
			return "paused by a command", nil
		}
	}
	if p.cfg.AppSlug != "" {
		line := strings.ToLower("@" + p.cfg.AppSlug + " ignore")
		for _, l := range strings.Split(pr.Body, "\n") {
			if strings.ToLower(strings.TrimSpace(l)) == line {
				return "the description says @" + p.cfg.AppSlug + " ignore", nil
			}
		}
	}
	return rc.Skip(repoconfig.PR{Draft: pr.Draft, Title: pr.Title, Author: pr.Author, BaseRef: pr.BaseRef, Labels: pr.Labels}), nil
}

// fileRef is a per-file job's payload: the job and the file's index in
// the plan's stored files (Index in jobs.File is the job's position among
// its kind, which orders admission).
type fileRef struct {
	jobs.File
	FileIndex int `json:"file_index"`
}

// taskIDs lists a head's job ids (a *store.Store).
type taskIDs interface {
	TaskIDs(ctx context.Context, pr jobs.PR, head string) ([]string, error)
}

// supersede drops a replaced head's waiting work: tickets out of
// admission, held tasks deleted. A stale job that still starts exits
// without effects (the store says its head is not current), so a
// failure here is logged and costs only a wasted admission.
func supersede(ctx context.Context, st taskIDs, tk Tickets, log *slog.Logger, pr jobs.PR, head string) {
	ids, err := st.TaskIDs(ctx, pr, head)
	if err != nil {
		log.WarnContext(ctx, "could not list superseded jobs; they exit as stale when they run", "pr", pr.String(), "err", err)
		return
	}
	dropped := 0
	for _, id := range ids {
		for _, model := range tk.Models() {
			ok, err := tk.Cancel(ctx, model, id)
			if err != nil {
				log.WarnContext(ctx, "could not drop a superseded ticket; the job exits as stale when it runs", "pr", pr.String(), "task", id, "model", model, "err", err)
			}
			if ok {
				dropped++
			}
		}
		for _, q := range []string{jobs.QueuePaid, jobs.QueueTrial, jobs.QueueFree} {
			tk.DeleteTask(q, id)
		}
	}
	log.InfoContext(ctx, "superseded work dropped", "pr", pr.String(), "head", short(head), "tickets", dropped, "jobs", len(ids))
}

// The plan lock: held while a plan reads the pull request and starts its
// run (seconds; it expires after planLockTTL if its process dies); a plan
// that finds it held tries again after planLockWait.
const (
	planLockTTL  = 2 * time.Minute
	planLockWait = time.Second
)

// fileTaskTimeout bounds a file job's run: 10 minutes, and for a tier
// on the flex lane past flex's call timeout (llm.FlexTimeout), which
// queues.
func fileTaskTimeout(t TierSpec) time.Duration {
	if t.Flex {
		return llm.FlexTimeout + 5*time.Minute
	}
	return 10 * time.Minute
}
