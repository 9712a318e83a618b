package workers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/hibiken/asynq"

	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/ratelimit"
	"github.com/prq-dev/prq/store"
)

// FileStore reads a planned file and records its result (a *store.Store).
type FileStore interface {
	Current(ctx context.Context, pr jobs.PR, head string) (bool, error)
	File(ctx context.Context, pr jobs.PR, head string, index int) (store.FileData, error)
	CompleteFile(ctx context.Context, pr jobs.PR, head string, r store.Result) (last bool, err error)
}

var _ FileStore = (*store.Store)(nil)

// FileWorkerConfig configures a FileWorker.
type FileWorkerConfig struct {
	// Store reads the file and records its result. Required.
	Store FileStore
	// Ledger records the job's start and settles a job that makes no
	// call. Required.
	Ledger Ledger
	// Caller makes the LLM call. Required.
	Caller *Caller
	// Queue enqueues finalize after the head's last file. Required.
	Queue TaskQueue
	// Models are the configured models (the jobs name theirs).
	Models map[string]Model
	// Log defaults to discarding.
	Log *slog.Logger
}

// FileWorker handles file:summary and file:review: it summarises or
// reviews one file of a PR.
type FileWorker struct {
	cfg FileWorkerConfig
	tok map[string]*ratelimit.Tokenizer
}

// NewFileWorker returns a FileWorker.
func NewFileWorker(cfg FileWorkerConfig) (*FileWorker, error) {
	switch {
	case cfg.Store == nil:
		return nil, errors.New("workers: file worker: Store is required")
	case cfg.Ledger == nil:
		return nil, errors.New("workers: file worker: Ledger is required")
	case cfg.Caller == nil:
		return nil, errors.New("workers: file worker: Caller is required")
	case cfg.Queue == nil:
		return nil, errors.New("workers: file worker: Queue is required")
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
	return &FileWorker{cfg: cfg, tok: tok}, nil
}

// ProcessTask runs one admitted file job. Whatever happens, it records a
// result (or a reason it has none) exactly once, and the last file of the
// head triggers finalize.
func (w *FileWorker) ProcessTask(ctx context.Context, t *asynq.Task) error {
	cfg, log := &w.cfg, w.cfg.Log
	var ref fileRef
	if err := jobs.Unmarshal(t.Type(), t.Payload(), &ref); err != nil {
		return fmt.Errorf("%w: %v", asynq.SkipRetry, err)
	}
	f := ref.File
	ticket := fileTicket(f)
	started(ctx, cfg.Ledger, log, ticket)
	current, err := cfg.Store.Current(ctx, f.PR, f.HeadSHA)
	if err != nil {
		return err
	}
	if !current {
		settle(ctx, cfg.Ledger, log, ticket, ratelimit.Cost{Requests: 1, Tokens: f.Estimate})
		return fmt.Errorf("stale job of a superseded head: %w", asynq.RevokeTask)
	}
	fd, err := cfg.Store.File(ctx, f.PR, f.HeadSHA, ref.FileIndex)
	if err != nil {
		return err
	}
	res := store.Result{Kind: f.Kind, Path: fd.Path, Index: f.Index}
	m, ok := cfg.Models[f.Model]
	if !ok {
		settle(ctx, cfg.Ledger, log, ticket, ratelimit.Cost{Requests: 1, Tokens: f.Estimate})
		res.Skipped = "model " + f.Model + " is not configured"
		return w.complete(ctx, f, res)
	}
	pm, perr := buildFilePrompt(f.Kind, f.PR.String(), fd, m, w.tok[f.Model])
	if perr != nil {
		settle(ctx, cfg.Ledger, log, ticket, ratelimit.Cost{Requests: 1, Tokens: f.Estimate})
		res.Skipped = "too large for " + f.Model
		if !errors.Is(perr, errTooLarge) {
			res.Skipped = "patch could not be read: " + perr.Error()
		}
		return w.complete(ctx, f, res)
	}
	out, err := cfg.Caller.call(ctx, callSpec{ticket: ticket, kind: f.Kind, tier: f.Tier, inst: f.PR.Installation, prompt: pm, model: m, retried: retried(ctx), maxRetry: maxRetry(ctx)})
	if err != nil {
		var skip *skipError
		if errors.As(err, &skip) {
			res.Skipped = skip.reason
			return w.complete(ctx, f, res)
		}
		return err
	}
	res.Tokens = out.PromptTokens + out.OutputTokens
	if pm.truncated > 0 {
		res.Skipped = fmt.Sprintf("partial: %d hunks did not fit the model", pm.truncated)
	}
	switch f.Kind {
	case jobs.KindReview:
		summary, comments, perr := parseReview(out.Text, fd)
		if perr != nil {
			log.WarnContext(ctx, "review reply unusable; recorded without comments", "pr", f.PR.String(), "path", fd.Path, "err", perr)
			res.Skipped = "the model's review could not be read"
		}
		res.Text, res.Comments = summary, comments
	default:
		res.Text = out.Text
	}
	return w.complete(ctx, f, res)
}

func (w *FileWorker) complete(ctx context.Context, f jobs.File, res store.Result) error {
	last, err := w.cfg.Store.CompleteFile(ctx, f.PR, f.HeadSHA, res)
	if err != nil {
		return err
	}
	if last {
		return enqueueFinalize(ctx, w.cfg.Queue, jobs.Finalize{PR: f.PR, HeadSHA: f.HeadSHA, Tier: f.Tier})
	}
	return nil
}
