package workers_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/prq-dev/prq/ghapp"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/llm"
	"github.com/prq-dev/prq/ratelimit"
	"github.com/prq-dev/prq/workers"
)

// TestChatRefusalPostedOnceWithoutLLM: a comment over the chat limits
// gets one short reply, without an LLM call and without admission, and a
// rerun posts nothing more.
func TestChatRefusalPostedOnceWithoutLLM(t *testing.T) {
	t.Parallel()
	retryAt := time.Date(2030, 1, 2, 15, 4, 59, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		inst   int64
		review bool
		want   string
	}{
		{"conversation comment", 321, false, "comment @dev you've reached the chat limit; try again after 15:04 UTC."},
		{"diff comment", 322, true, "reply 5 you've reached the chat limit; try again after 15:04 UTC."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			st, adm := newStore(t), &fakeAdmission{}
			model := &fakeLLM{CompleteFunc: func(llm.Request) (llm.Response, error) {
				return llm.Response{}, errors.New("the refusal called the model")
			}}
			gh := &fakeGitHub{ReplyFunc: posted(91), CommentFunc: func(string) (int64, error) { return 92, nil }}
			r := newChat(t, st, adm, newCaller(t, adm, model, nil, nil), gh)
			c, _ := chatTask(testPR(t, tc.inst), tc.review)
			c.Refusal, c.RetryAt = true, retryAt.UnixMilli()
			task := asynq.NewTask(jobs.TypeChat, jobs.Marshal(c))
			for run := 1; run <= 2; run++ {
				if err := r.ProcessTask(ctx, task); err != nil {
					t.Fatalf("run %d: %v", run, err)
				}
			}
			if w := gh.Writes(); len(w) != 1 || !strings.HasPrefix(w[0], tc.want+"\n\n<!-- prq:reply to=11 ") {
				t.Fatalf("GitHub writes %q, want exactly one %q", w, tc.want)
			}
			if model.Calls() != 0 {
				t.Errorf("%d LLM calls for a refusal", model.Calls())
			}
			if ev := adm.Events(""); len(ev) != 0 {
				t.Errorf("a refusal touched admission: %q", ev)
			}
			if tc.review {
				if mine, err := st.AppThread(ctx, 5); err != nil || !mine {
					t.Errorf("thread 5 not marked as prq's (%v)", err)
				}
			}
			if _, ok := workers.TicketOf(jobs.TypeChat, task.Payload()); ok {
				t.Error("a refusal has an admission ticket (the reconciler would adopt it)")
			}
		})
	}
}

// TestChatRefusalRateLimitedWaitsWithoutAdmission: GitHub's rate limit
// delays a refusal as told; it is never held for admission.
func TestChatRefusalRateLimitedWaitsWithoutAdmission(t *testing.T) {
	t.Parallel()
	st, adm, model := newStore(t), &fakeAdmission{}, &fakeLLM{CompleteFunc: answer("never")}
	gh := &fakeGitHub{CommentFunc: func(string) (int64, error) {
		return 0, &ghapp.RateLimitedError{RetryAfter: 3 * time.Second, Secondary: true}
	}}
	c, _ := chatTask(testPR(t, 323), false)
	c.Refusal = true
	task := asynq.NewTask(jobs.TypeChat, jobs.Marshal(c))
	err := newChat(t, st, adm, newCaller(t, adm, model, nil, nil), gh).ProcessTask(context.Background(), task)
	if err == nil || workers.IsFailure(err) {
		t.Fatalf("ProcessTask = %v, want a wait that is not a failure", err)
	}
	if ev := adm.Events(""); len(ev) != 0 {
		t.Errorf("a refusal went to admission: %q", ev)
	}
	hold := 24 * time.Hour
	if d := workers.RetryDelay(hold)(1, err, task); d == hold || d <= 0 {
		t.Errorf("refusal retry delay %s, want GitHub's wait, not the hold", d)
	}
	c.Refusal = false
	if d := workers.RetryDelay(hold)(1, err, asynq.NewTask(jobs.TypeChat, jobs.Marshal(c))); d != hold {
		t.Errorf("an answer's retry delay %s, want the hold (back through admission)", d)
	}
}

func TestEnqueuerRefusalSkipsAdmission(t *testing.T) {
	t.Parallel()
	q, adm := &conflictQueue{seen: map[string]bool{}}, &fakeAdmission{}
	e := newEnqueuer(t, q, adm, newStore(t))
	c := jobs.Chat{PR: testPR(t, 324), CommentID: 77, Author: "dev", Refusal: true, Tier: jobs.TierFree}
	for i, want := range []bool{true, false} {
		got, err := e.Chat(context.Background(), c)
		if err != nil || got != want {
			t.Fatalf("delivery %d: enqueued %v (%v), want %v", i+1, got, err, want)
		}
	}
	if !q.seen[jobs.ChatTaskID(c)] {
		t.Error("the refusal was not enqueued under the chat's task id")
	}
	if ev := adm.Events(""); len(ev) != 0 {
		t.Errorf("a refusal went through admission: %q", ev)
	}
}

// TestChatQuotaOneApologyPerPR: a tier's chat quota is chat's own (the
// review quota is ample here), and a PR whose chat is over it gets one
// apology per quota window, not one per comment.
func TestChatQuotaOneApologyPerPR(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, adm, model := newStore(t), &fakeAdmission{}, &fakeLLM{CompleteFunc: answer("Because.")}
	gh := &fakeGitHub{ReplyFunc: posted(91), CommentFunc: func(string) (int64, error) { return 92, nil }}
	qu, err := ratelimit.NewQuota(redistest.Shared(t).Client(t), ratelimit.QuotaConfig{})
	if err != nil {
		t.Fatal(err)
	}
	tiers := map[jobs.Tier]workers.TierSpec{jobs.TierPaid: {QuotaTokens: 1_000_000, ChatQuotaTokens: 10}}
	r := newChat(t, st, adm, newCaller(t, adm, model, qu, tiers), gh)
	c, _ := chatTask(testPR(t, 325), false)
	for id := int64(11); id <= 14; id++ {
		c.CommentID = id
		if err := r.ProcessTask(ctx, asynq.NewTask(jobs.TypeChat, jobs.Marshal(c))); err != nil {
			t.Fatalf("comment %d: %v", id, err)
		}
	}
	w := gh.Writes()
	t.Logf("four comments over the chat quota: writes %q", w)
	if len(w) != 1 || !strings.HasPrefix(w[0], "comment @dev Sorry, I can't answer right now: skipped: quota reached") {
		t.Fatalf("writes %q, want one apology", w)
	}
	if model.Calls() != 0 {
		t.Errorf("%d LLM calls over the chat quota", model.Calls())
	}
}
