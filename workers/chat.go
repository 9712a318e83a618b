package workers

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/hibiken/asynq"

	"github.com/prq-dev/prq/jobs"
)

// chat answers a comment that talks to the bot, once: in the review
// thread for a diff comment, as a conversation comment otherwise.
func (w *Workers) chat(ctx context.Context, t *asynq.Task) error {
	var c jobs.Chat
	if err := jobs.Unmarshal(t.Type(), t.Payload(), &c); err != nil {
		return fmt.Errorf("%w: %v", asynq.SkipRetry, err)
	}
	ticket := ChatTicket(c)
	w.sched.Started(ctx, c.Model, ticket.ID)
	what := "reply:" + strconv.FormatInt(c.CommentID, 10)
	if id, err := w.store.Posted(ctx, c.PR, what); err != nil {
		return err
	} else if id != 0 {
		return nil // answered already
	}
	body, err := w.store.Draft(ctx, c.PR, what)
	if err != nil {
		return err
	}
	if body == "" {
		m := w.cfg.Models[c.Model]
		pm, err := buildChatPrompt(c, m, w.tok[c.Model])
		if err != nil {
			return fmt.Errorf("%w: %v", asynq.SkipRetry, err)
		}
		out, err := w.call(ctx, callSpec{ticket: ticket, kind: jobs.KindChat, tier: c.Tier, inst: c.PR.Installation, prompt: pm, model: m, retried: retried(ctx), maxRetry: maxRetry(ctx)})
		var skip *skipError
		switch {
		case errors.As(err, &skip):
			body = "Sorry, I can't answer right now: " + skip.reason + "."
		case err != nil:
			return err
		default:
			body = out.Text
		}
		if !c.Review {
			body = fmt.Sprintf("@%s %s", c.Author, body)
		}
		if err := w.store.SetDraft(ctx, c.PR, what, body); err != nil {
			return err
		}
	}
	gh, err := w.gh.Client(c.PR.Installation)
	if err != nil {
		return fmt.Errorf("%w: %v", asynq.SkipRetry, err)
	}
	var id int64
	err = w.pacer.Do(ctx, c.PR.Installation, func() error {
		var err error
		if c.Review {
			root := c.CommentID
			if c.InReplyTo != 0 {
				root = c.InReplyTo
			}
			id, err = gh.Reply(ctx, c.PR.Owner, c.PR.Repo, c.PR.Number, root, body)
		} else {
			id, err = gh.Comment(ctx, c.PR.Owner, c.PR.Repo, c.PR.Number, body)
		}
		return err
	})
	var ra *RetryAfterError
	if errors.As(err, &ra) {
		// GitHub said wait: come back through admission then (the draft
		// is kept, so no second LLM call)
		return w.backToAdmission(ctx, ticket, ra.After, err)
	}
	if err != nil {
		if gerr := w.ghFailed(ctx, c.PR, "chat reply", err); gerr != nil {
			if retried(ctx) < maxRetry(ctx) {
				w.sched.RegisterAt(ctx, ticket, time.Now().Add(w.cfg.Backoff*time.Duration(1<<min(retried(ctx), 8))))
			}
			return gerr
		}
		return nil
	}
	if c.Review {
		root := c.CommentID
		if c.InReplyTo != 0 {
			root = c.InReplyTo
		}
		if err := w.store.MarkThread(ctx, root); err != nil {
			return err
		}
	}
	return w.store.SetPosted(ctx, c.PR, what, id)
}
