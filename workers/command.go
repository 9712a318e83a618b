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

	"github.com/prq-dev/prq/ghapp"
	"github.com/prq-dev/prq/internal/render"
	"github.com/prq-dev/prq/internal/repoconfig"
	"github.com/prq-dev/prq/internal/safemd"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
)

// CommandStore is what commands read and change (a *store.Store).
type CommandStore interface {
	GetRun(ctx context.Context, pr jobs.PR) (store.Run, error)
	Control(ctx context.Context, pr jobs.PR) (store.Control, error)
	SetPaused(ctx context.Context, pr jobs.PR, paused bool) error
	SetIgnored(ctx context.Context, pr jobs.PR) error
	Posted(ctx context.Context, pr jobs.PR, what string) (int64, error)
	SetPosted(ctx context.Context, pr jobs.PR, what string, id int64) error
	Files(ctx context.Context, pr jobs.PR, head string) (map[int]store.FileData, error)
	Results(ctx context.Context, pr jobs.PR, head string) ([]store.Result, error)
	PostedFindings(ctx context.Context, pr jobs.PR) (map[string]store.PostedFinding, error)
	ClosePostedFinding(ctx context.Context, pr jobs.PR, key string) error
}

// Reactor reacts to comments (a *ghapp.Client).
type Reactor interface {
	React(ctx context.Context, owner, repo string, n int, commentID int64, review bool, content string) error
}

// Commanders hands out what a command uses of an installation's GitHub.
type Commanders interface {
	PRReaders
	Repliers
	ReviewWriters
	Reactor(installation int64) (Reactor, error)
}

var (
	_ CommandStore = (*store.Store)(nil)
	_ Reactor      = ghForge{}
	_ Commanders   = Installations{}
)

// Reactor returns the installation's client as a Reactor.
func (i Installations) Reactor(installation int64) (Reactor, error) {
	return i.forge(installation)
}

// CommandRunnerConfig configures a CommandRunner.
type CommandRunnerConfig struct {
	// Store records what commands change. Required.
	Store CommandStore
	// GitHub reads the pull request, answers and reacts. Required.
	GitHub Commanders
	// Queue enqueues the plans review commands ask for. Required.
	Queue TaskQueue
	// Turns paces the installation's writes. Required.
	Turns Turns
	// Markers mark the answer, so a retry finds it.
	Markers render.Markers
	// AppSlug is the App's name in "@slug command" (help's text).
	AppSlug string
	// Planner, when set, reads the repository configuration `config`
	// shows (the planner's own reader and cache).
	Planner *Planner
	// Line, when set, tells where a waiting pull request stands
	// (`status`).
	Line *QueueReporter
	// Learnings, when set, keeps what learn and forget change.
	Learnings LearningStore
	// Retention keeps an enqueued plan's id (a retried command enqueues
	// it once). Defaults to 24h.
	Retention time.Duration
	// ErrorFunc, when set, counts failed reactions
	// (prq_github_decoration_errors_total, kind reaction).
	ErrorFunc func(kind, status string)
	// Log defaults to discarding.
	Log *slog.Logger
}

// CommandRunner handles pr:command: a command given in a comment, run
// once per comment, acknowledged with reactions (eyes when taken,
// rocket when done, confused when refused) and answered in a reply.
type CommandRunner struct {
	cfg CommandRunnerConfig
}

// NewCommandRunner returns a CommandRunner.
func NewCommandRunner(cfg CommandRunnerConfig) (*CommandRunner, error) {
	switch {
	case cfg.Store == nil:
		return nil, errors.New("workers: command runner: Store is required")
	case cfg.GitHub == nil:
		return nil, errors.New("workers: command runner: GitHub is required")
	case cfg.Queue == nil:
		return nil, errors.New("workers: command runner: Queue is required")
	case cfg.Turns == nil:
		return nil, errors.New("workers: command runner: Turns is required")
	}
	if cfg.Retention <= 0 {
		cfg.Retention = 24 * time.Hour
	}
	if cfg.AppSlug == "" {
		cfg.AppSlug = "prq"
	}
	cfg.Log = logOrDiscard(cfg.Log)
	return &CommandRunner{cfg: cfg}, nil
}

// ProcessTask runs a command: its effect once, its answer once, its
// reactions as decorations (a failed reaction is counted and logged,
// never a failed command).
func (r *CommandRunner) ProcessTask(ctx context.Context, t *asynq.Task) error {
	var c jobs.Command
	if err := jobs.Unmarshal(t.Type(), t.Payload(), &c); err != nil {
		return fmt.Errorf("%w: %v", asynq.SkipRetry, err)
	}
	if err := c.PR.Validate(); err != nil {
		return fmt.Errorf("%w: %v", asynq.SkipRetry, err)
	}
	log := r.cfg.Log
	if c.Refused != "" {
		log.InfoContext(ctx, "command refused", "pr", c.PR.String(), "command", c.Name, "author", c.Author, "why", c.Refused)
		r.react(ctx, c, ghapp.ReactionRefused)
		return nil
	}
	r.react(ctx, c, ghapp.ReactionTaken)
	done := "command:" + strconv.FormatInt(c.CommentID, 10)
	answer, err := r.run(ctx, c, done)
	var refused *refusedCommand
	switch {
	case errors.As(err, &refused):
		answer = refused.why
	case errors.Is(err, ghapp.ErrNotFound):
		log.InfoContext(ctx, "pull request is gone; command dropped", "pr", c.PR.String(), "command", c.Name)
		return nil
	case err != nil:
		return ghRetry(err)
	}
	if err := r.answer(ctx, c, done, answer); err != nil {
		if errors.Is(err, ghapp.ErrUnprocessable) || errors.Is(err, ghapp.ErrNotFound) {
			// GitHub will never take this answer: say so on the comment
			log.WarnContext(ctx, "GitHub refused the command's answer; the command is acknowledged as failed", "pr", c.PR.String(), "command", c.Name, "err", err)
			r.react(ctx, c, ghapp.ReactionRefused)
			return nil
		}
		return ghRetry(err)
	}
	if refused != nil {
		r.react(ctx, c, ghapp.ReactionRefused)
	} else {
		r.react(ctx, c, ghapp.ReactionDone)
	}
	log.InfoContext(ctx, "command done", "pr", c.PR.String(), "command", c.Name, "author", c.Author, "refused", refused != nil)
	return nil
}

// refusedCommand is a command that cannot be carried out, and why (the
// answer says so).
type refusedCommand struct{ why string }

func (e *refusedCommand) Error() string { return e.why }

// run carries out the command once (a retry after its effect only
// answers) and returns the answer.
func (r *CommandRunner) run(ctx context.Context, c jobs.Command, done string) (string, error) {
	cfg := &r.cfg
	slug := "@" + cfg.AppSlug
	switch c.Name {
	case jobs.CommandHelp:
		return help(slug), nil
	case jobs.CommandPause:
		if err := cfg.Store.SetPaused(ctx, c.PR, true); err != nil {
			return "", err
		}
		return fmt.Sprintf("Automatic reviews of this pull request are paused; `%s resume` resumes them.", slug), nil
	case jobs.CommandIgnore:
		if err := cfg.Store.SetIgnored(ctx, c.PR); err != nil {
			return "", err
		}
		return fmt.Sprintf("This pull request will not be reviewed automatically; `%s review` still reviews it when asked.", slug), nil
	case jobs.CommandStatus:
		return r.status(ctx, c)
	case jobs.CommandSummary:
		return r.summary(ctx, c)
	case jobs.CommandConfig:
		return r.config(ctx, c)
	case jobs.CommandLearn, jobs.CommandLearnings, jobs.CommandForget:
		return r.learningCommand(ctx, c, done)
	case jobs.CommandResolve:
		return r.resolve(ctx, c)
	}
	// the commands that review: they read the pull request's head
	gh, err := cfg.GitHub.PRReader(c.PR.Installation)
	if err != nil {
		return "", fmt.Errorf("%w: %v", asynq.SkipRetry, err)
	}
	pr, err := gh.PR(ctx, c.PR.Owner, c.PR.Repo, c.PR.Number)
	if err != nil {
		return "", err
	}
	if pr.State != "open" {
		return "", &refusedCommand{"This pull request is closed: nothing to review."}
	}
	run, err := cfg.Store.GetRun(ctx, c.PR)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return "", err
	}
	plan := jobs.Plan{PR: c.PR, HeadSHA: pr.HeadSHA, BaseSHA: pr.BaseSHA, Delivery: "cmd-" + strconv.FormatInt(c.CommentID, 10), Tier: c.Tier}
	// a retry after the plan was enqueued: the run is this command's own
	// work now, not a reason to refuse it
	planned, err := cfg.Store.Posted(ctx, c.PR, done+":planned")
	if err != nil {
		return "", err
	}
	if planned != 0 {
		return fmt.Sprintf("Reviewing %s (asked for by this comment).", short(pr.HeadSHA)), nil
	}
	var answer string
	switch c.Name {
	case jobs.CommandResume:
		if err := cfg.Store.SetPaused(ctx, c.PR, false); err != nil {
			return "", err
		}
		plan.Action = jobs.ActionResume
		answer = fmt.Sprintf("Automatic reviews resumed; %s is planned as a push would be.", short(pr.HeadSHA))
		if run.Head == pr.HeadSHA && run.State != store.StateCancelled {
			return "Automatic reviews resumed; " + short(pr.HeadSHA) + " is reviewed already.", nil
		}
	case jobs.CommandReview:
		if run.Head == pr.HeadSHA && run.State != store.StateCancelled {
			what := "reviewed"
			if run.State == store.StateRunning {
				what = "being reviewed"
			}
			return "", &refusedCommand{fmt.Sprintf("%s is %s already; `%s full review` reviews every file again.", short(pr.HeadSHA), what, slug)}
		}
		plan.Action = jobs.ActionReview
		answer = fmt.Sprintf("Reviewing %s.", short(pr.HeadSHA))
		if run.LastReviewed != "" && run.LastReviewed != pr.HeadSHA {
			answer = fmt.Sprintf("Reviewing what changed from %s to %s.", short(run.LastReviewed), short(pr.HeadSHA))
		}
	case jobs.CommandFullReview:
		if run.Head == pr.HeadSHA && run.Round != "" && run.State != store.StateCancelled {
			// one full review a head: each buys every file again
			return "", &refusedCommand{fmt.Sprintf("%s has had its full review; a push gets a new one.", short(pr.HeadSHA))}
		}
		plan.Action, plan.Round = jobs.ActionFullReview, "-r"+strconv.FormatInt(c.CommentID, 10)
		answer = fmt.Sprintf("Reviewing every file at %s again, from scratch.", short(pr.HeadSHA))
	default:
		return "", &refusedCommand{fmt.Sprintf("`%s` is not a command I know; `%s help` lists them.", c.Name, slug)}
	}
	// a full review's plan restarts the head's run in a round of its own
	// (the live run's waiting work dropped as it starts)
	if _, err := cfg.Queue.EnqueueContext(ctx, asynq.NewTask(jobs.TypePlan, jobs.Marshal(plan)), asynq.TaskID(jobs.PlanTaskID(plan)),
		asynq.Queue(plan.Tier.Queue()), asynq.Retention(cfg.Retention), asynq.MaxRetry(10), asynq.Timeout(5*time.Minute)); err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) {
		return "", fmt.Errorf("enqueue plan: %w", err)
	}
	return answer, cfg.Store.SetPosted(ctx, c.PR, done+":planned", 1)
}

func help(slug string) string {
	return strings.Join([]string{
		"Commands, each on a line of its own in a comment: `" + slug + " <command>`",
		"",
		"- `review`: review what changed since the last review (or the whole pull request, if none).",
		"- `full review`: review every file again, from scratch.",
		"- `pause`, `resume`: stop and restart automatic reviews of this pull request.",
		"- `ignore`: never review it automatically (a line `" + slug + " ignore` in the description does the same).",
		"- `summary`: the summary of the last reviewed head again, here.",
		"- `status`: where its review stands.",
		"- `config`: the repository configuration in effect (`.prq.yaml`).",
		"- `learn <text>`, `learn --org <text>`: tell later reviews of this repository (or of every repository of the organisation) something; `learnings` lists what they are told, `forget N` removes one.",
		"- `resolve`: resolve my open review threads on this pull request (not those a person answered in).",
		"- `help`: this list.",
		"",
		"Anything else that mentions me is a question, and I answer it.",
	}, "\n")
}

// status says where the pull request's review stands.
func (r *CommandRunner) status(ctx context.Context, c jobs.Command) (string, error) {
	ctl, err := r.cfg.Store.Control(ctx, c.PR)
	if err != nil {
		return "", err
	}
	run, err := r.cfg.Store.GetRun(ctx, c.PR)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return "", err
	}
	var b strings.Builder
	switch {
	case errors.Is(err, store.ErrNotFound):
		b.WriteString("Not reviewed yet.")
	case run.State == store.StateDone:
		files, _ := run.FileSummaries()
		fmt.Fprintf(&b, "%s is reviewed: %d files summarised, %d reviews.", short(run.Head), files, run.ReviewDone)
	case run.State == store.StateCancelled:
		fmt.Fprintf(&b, "The review of %s was stopped (the pull request was closed, turned into a draft, or is being reviewed again).", short(run.Head))
	default:
		done, total := run.SummaryDone+run.ReviewDone, run.SummaryTotal+run.ReviewTotal
		fmt.Fprintf(&b, "%s is being reviewed: %d of %d jobs done (tier %s); the rest wait their turn at the provider's limit.", short(run.Head), done, total, run.Tier)
		if run.WaitingUntil.After(time.Now()) {
			fmt.Fprintf(&b, " The installation's quota for this period is spent: the review resumes by itself when it resets, at %s.",
				run.WaitingUntil.UTC().Format("2006-01-02 15:04 UTC"))
		} else if r.cfg.Line != nil {
			if p, waiting, err := r.cfg.Line.Where(ctx, run); err != nil {
				r.cfg.Log.WarnContext(ctx, "could not read where the pull request waits", "pr", c.PR.String(), "err", err)
			} else if waiting {
				_, text := QueueText(p)
				b.WriteString(" " + text)
			}
		}
	}
	if ctl.Paused {
		fmt.Fprintf(&b, " Automatic reviews are paused (`@%s resume`).", r.cfg.AppSlug)
	}
	if ctl.Ignored {
		b.WriteString(" This pull request is ignored: it is reviewed only when asked.")
	}
	if run.ConfigNotice != "" {
		b.WriteString(" The repository configuration could not all be used: " + safemd.Line(run.ConfigNotice, c.PR.Owner+"/"+c.PR.Repo))
	}
	return b.String(), nil
}

// summary answers with the summary of the last reviewed head, rendered
// again from its kept results (no call, nothing spent): the summary
// comment at the top of a long conversation, brought down to it.
func (r *CommandRunner) summary(ctx context.Context, c jobs.Command) (string, error) {
	run, err := r.cfg.Store.GetRun(ctx, c.PR)
	if errors.Is(err, store.ErrNotFound) {
		return "", &refusedCommand{"Not reviewed yet: there is no summary to show."}
	}
	if err != nil {
		return "", err
	}
	note := ""
	if run.State != store.StateDone {
		done, total := run.SummaryDone+run.ReviewDone, run.SummaryTotal+run.ReviewTotal
		if run.LastReviewed == "" || run.LastReviewed == run.Head {
			return "", &refusedCommand{fmt.Sprintf("No summary of %s yet: it is being reviewed (%d of %d jobs done); the summary comment is written when it is done.",
				short(run.Head), done, total)}
		}
		// the last reviewed head's, while a newer one is reviewed
		note = fmt.Sprintf("\n\n_%s, pushed since, is being reviewed (%d of %d jobs done)._", short(run.Head), done, total)
		run.Head = run.LastReviewed
	}
	files, err := r.cfg.Store.Files(ctx, c.PR, run.Head)
	if err != nil {
		return "", err
	}
	results, err := r.cfg.Store.Results(ctx, c.PR, run.Head)
	if err != nil {
		return "", err
	}
	if len(files) == 0 && len(results) == 0 {
		return "", &refusedCommand{fmt.Sprintf("The results of %s are no longer kept; `@%s full review` reviews it again.", short(run.Head), r.cfg.AppSlug)}
	}
	sum, _ := summaryOf(run, files, results, nil)
	const room = 2000 // the answer's own words and its marker
	parts := sum.Parts(render.MaxBody - room)
	text := fmt.Sprintf("The summary of %s, as in the summary comment:\n\n%s", short(run.Head), parts[0])
	if len(parts) > 1 {
		text += fmt.Sprintf("\n\n_The summary goes on in %d more comments at the top of this pull request._", len(parts)-1)
	}
	return text + note, nil
}

// config shows the repository configuration in effect at the pull
// request's base.
func (r *CommandRunner) config(ctx context.Context, c jobs.Command) (string, error) {
	if r.cfg.Planner == nil || !r.cfg.Planner.cfg.RepoConfig {
		return "", &refusedCommand{"This prq reads no repository configuration (its operator set `github.repo_config: false`)."}
	}
	gh, err := r.cfg.GitHub.PRReader(c.PR.Installation)
	if err != nil {
		return "", fmt.Errorf("%w: %v", asynq.SkipRetry, err)
	}
	pr, err := gh.PR(ctx, c.PR.Owner, c.PR.Repo, c.PR.Number)
	if err != nil {
		return "", err
	}
	rc, notice, err := r.cfg.Planner.repos.effective(ctx, gh, c.PR.Installation, c.PR.Owner, c.PR.Repo, pr.BaseSHA)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "The configuration in effect at %s (the base of this pull request): %s.\n\n", short(pr.BaseSHA), describe(rc.Sources))
	if notice != "" {
		b.WriteString("> [!WARNING]\n> " + safemd.Line(notice, c.PR.Owner+"/"+c.PR.Repo) + "\n\n")
	}
	y := rc.YAML()
	if len(y) > maxConfigAnswer {
		// GitHub takes 65,536 characters a comment
		y = firstBytes(y, maxConfigAnswer) + "\n# … cut here: the rest does not fit a comment\n"
	}
	b.WriteString(fence(y, "yaml"))
	g, err := r.guidelinesAnswer(ctx, gh, c.PR, pr.BaseSHA, rc)
	if err != nil {
		return "", err
	}
	b.WriteString("\n" + g)
	if skip := rc.Skip(repoconfig.PR{Draft: pr.Draft, Title: pr.Title, Author: pr.Author, BaseRef: pr.BaseRef, Labels: pr.Labels}); skip != "" {
		fmt.Fprintf(&b, "\nThis pull request is not reviewed automatically: %s.\n", skip)
	}
	return b.String(), nil
}

// fence puts text in a fenced code block longer than any backtick run
// in it, so nothing in it ends the block early.
func fence(text, lang string) string {
	run, longest := 0, 0
	for _, r := range text {
		if r == '`' {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	f := strings.Repeat("`", max(3, longest+1))
	return f + lang + "\n" + strings.TrimSuffix(text, "\n") + "\n" + f + "\n"
}

// maxConfigAnswer is how much of the rendered configuration `config`
// shows, well inside GitHub's limit on a comment.
const maxConfigAnswer = 50000

// answer posts the command's answer once: in the review thread for a
// diff comment, else as a comment naming its author.
func (r *CommandRunner) answer(ctx context.Context, c jobs.Command, done, text string) error {
	cfg := &r.cfg
	if id, err := cfg.Store.Posted(ctx, c.PR, done); err != nil || id != 0 {
		return err
	}
	gh, err := cfg.GitHub.Replier(c.PR.Installation)
	if err != nil {
		return fmt.Errorf("%w: %v", asynq.SkipRetry, err)
	}
	marker := cfg.Markers.Reply(c.PR.Key(), c.CommentID)
	body := text
	if !c.Review {
		body = "@" + c.Author + " " + text
	}
	var id int64
	err = cfg.Turns.Do(ctx, c.PR.Installation, ChatWrite, func() error {
		var err error
		// a run before this one may have posted and crashed before recording
		if id, err = gh.HasReply(ctx, c.PR.Owner, c.PR.Repo, c.PR.Number, c.Review, marker); err != nil || id != 0 {
			return err
		}
		if c.Review {
			id, err = gh.Reply(ctx, c.PR.Owner, c.PR.Repo, c.PR.Number, c.CommentID, body+"\n\n"+marker)
		} else {
			id, err = gh.Comment(ctx, c.PR.Owner, c.PR.Repo, c.PR.Number, body+"\n\n"+marker)
		}
		return err
	})
	if err != nil {
		return err
	}
	return cfg.Store.SetPosted(ctx, c.PR, done, id)
}

// react is a decoration: its failure is counted and logged, and the
// command goes on.
func (r *CommandRunner) react(ctx context.Context, c jobs.Command, content string) {
	gh, err := r.cfg.GitHub.Reactor(c.PR.Installation)
	if err == nil {
		err = gh.React(ctx, c.PR.Owner, c.PR.Repo, c.PR.Number, c.CommentID, c.Review, content)
	}
	if err == nil {
		return
	}
	if r.cfg.ErrorFunc != nil {
		r.cfg.ErrorFunc("reaction", decorationStatus(err))
	}
	r.cfg.Log.WarnContext(ctx, "could not react to the command's comment; the command goes on", "pr", c.PR.String(), "comment", c.CommentID, "reaction", content, "err", err)
}
