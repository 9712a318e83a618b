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
	"github.com/prq-dev/prq/internal/render"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/llm"
	"github.com/prq-dev/prq/ratelimit"
	"github.com/prq-dev/prq/store"
	"github.com/prq-dev/prq/workers"
)

// newPacer returns a real pacer on the package's Redis with a short gap.
func newPacer(t *testing.T) *workers.Pacer {
	t.Helper()
	p := workers.NewPacer(redistest.Shared(t).Client(t), nil)
	p.Gap = time.Millisecond
	return p
}

func newChat(t *testing.T, st *store.Store, adm *fakeAdmission, c *workers.Caller, gh *fakeGitHub) *workers.ChatResponder {
	t.Helper()
	r, err := workers.NewChatResponder(workers.ChatResponderConfig{Attempts: newAttempts(t), Replies: st, Drafts: st, Ledger: adm, Requeue: adm, Caller: c,
		GitHub: gh, Turns: newPacer(t), Models: testModels})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func chatTask(pr jobs.PR, review bool) (jobs.Chat, *asynq.Task) {
	c := jobs.Chat{PR: pr, CommentID: 11, Review: review, Author: "dev", Body: "@prq why b?", Tier: jobs.TierPaid, Model: "gpt-4o-mini", Estimate: 300}
	if review {
		c.InReplyTo, c.Path, c.Line, c.DiffHunk = 5, "a.go", 2, patchA
	}
	return c, asynq.NewTask(jobs.TypeChat, jobs.Marshal(c))
}

func posted(id int64) func(int64, string) (int64, error) {
	return func(int64, string) (int64, error) { return id, nil }
}

func TestChatResponder(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		inst      int64
		review    bool
		llm       func(llm.Request) (llm.Response, error)
		quota     int64
		wantWrite string // the one GitHub write, by prefix
		back      bool
	}{
		{name: "conversation comment answered, author mentioned", inst: 301, llm: answer("Because."), wantWrite: "comment @dev Because."},
		{name: "model text made inert", inst: 306, llm: answer("ask @acme/security-team ![x](https://evil.example/p.png) <img src=x>"), wantWrite: "comment @dev ask `@acme/security-team` !\\[x\\](`https://evil.example/p.png)` &lt;img src=x&gt;"},
		{name: "diff comment answered in its thread", inst: 302, review: true, llm: answer("Because."), wantWrite: "reply 5 Because."},
		{name: "quota refused: an apology, no call", inst: 303, llm: answer("never"), quota: 10, wantWrite: "comment @dev Sorry, I can't answer right now: skipped: quota reached"},
		{name: "permanent failure: an apology", inst: 304, llm: fail(llm.ErrPermanent), wantWrite: "comment @dev Sorry, I can't answer right now: the model provider refused the request (ref "},
		{name: "provider 429: back to admission, nothing posted", inst: 305, llm: fail(llm.ErrRateLimited), back: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			st, adm, model := newStore(t), &fakeAdmission{}, &fakeLLM{CompleteFunc: tc.llm}
			gh := &fakeGitHub{ReplyFunc: posted(91), CommentFunc: func(string) (int64, error) { return 92, nil }}
			var quota workers.Quota
			tiers := map[jobs.Tier]workers.TierSpec{}
			if tc.quota > 0 {
				qu, err := ratelimit.NewQuota(redistest.Shared(t).Client(t), ratelimit.QuotaConfig{})
				if err != nil {
					t.Fatal(err)
				}
				quota, tiers[jobs.TierPaid] = qu, workers.TierSpec{QuotaTokens: tc.quota}
			}
			r := newChat(t, st, adm, newCaller(t, adm, model, quota, tiers), gh)
			c, task := chatTask(testPR(t, tc.inst), tc.review)
			err := r.ProcessTask(ctx, task)
			if tc.back {
				if err == nil || workers.IsFailure(err) {
					t.Fatalf("ProcessTask = %v, want back to admission", err)
				}
				if got := adm.Events("register"); len(got) != 1 || got[0] != "register "+jobs.ChatTaskID(c) {
					t.Errorf("registered %q", got)
				}
				if w := gh.Writes(); len(w) != 0 {
					t.Errorf("posted %q before the answer exists", w)
				}
				return
			}
			if err != nil {
				t.Fatalf("ProcessTask: %v", err)
			}
			if w := gh.Writes(); len(w) != 1 || !strings.HasPrefix(w[0], tc.wantWrite) {
				t.Fatalf("GitHub writes %q, want one %q…", w, tc.wantWrite)
			}
			calls := model.Calls()
			// exactly once: a redelivered job neither calls nor posts again
			if err := r.ProcessTask(ctx, task); err != nil {
				t.Fatal(err)
			}
			if w := gh.Writes(); len(w) != 1 || model.Calls() != calls {
				t.Errorf("a rerun wrote %q and made %d more calls", w, model.Calls()-calls)
			}
			if tc.review {
				if mine, err := st.AppThread(ctx, 5); err != nil || !mine {
					t.Errorf("thread 5 not marked as prq's (%v)", err)
				}
			}
		})
	}
}

func TestChatResponderGitHubRateLimitKeepsTheDraft(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, adm, model := newStore(t), &fakeAdmission{}, &fakeLLM{CompleteFunc: answer("Because.")}
	limited := true
	gh := &fakeGitHub{CommentFunc: func(string) (int64, error) {
		if limited {
			return 0, &ghapp.RateLimitedError{RetryAfter: time.Second, Secondary: true}
		}
		return 93, nil
	}}
	r := newChat(t, st, adm, newCaller(t, adm, model, nil, nil), gh)
	c, task := chatTask(testPR(t, 311), false)
	err := r.ProcessTask(ctx, task)
	if err == nil || workers.IsFailure(err) {
		t.Fatalf("ProcessTask = %v, want back to admission", err)
	}
	if got := adm.Events("registerAt"); len(got) != 1 || got[0] != "registerAt "+jobs.ChatTaskID(c) {
		t.Fatalf("registered later %q, want the ticket once", got)
	}
	// the pacer holds the installation's writers back for the second GitHub asked
	limited = false
	if err := r.ProcessTask(ctx, task); err != nil {
		t.Fatal(err)
	}
	if model.Calls() != 1 {
		t.Errorf("%d LLM calls, want 1: the draft is posted, not asked again", model.Calls())
	}
	if w := gh.Writes(); len(w) != 2 || !strings.HasPrefix(w[1], "comment @dev Because.\n\n<!-- prq:reply ") {
		t.Errorf("writes %q", w)
	}
	// the repost came back through admission but made no call: its
	// reservation is settled to zero (before, it was never settled)
	id := jobs.ChatTaskID(c)
	if got := adm.Events("settle"); len(got) != 2 || got[1] != "settle "+id+" 0" {
		t.Errorf("settled %q, want the call's use, then zero for the repost", got)
	}
}

func TestChatResponderPRGoneIsDropped(t *testing.T) {
	t.Parallel()
	st, adm, model := newStore(t), &fakeAdmission{}, &fakeLLM{CompleteFunc: answer("Because.")}
	gh := &fakeGitHub{CommentFunc: func(string) (int64, error) { return 0, ghapp.ErrNotFound }}
	_, task := chatTask(testPR(t, 312), false)
	if err := newChat(t, st, adm, newCaller(t, adm, model, nil, nil), gh).ProcessTask(context.Background(), task); err != nil {
		t.Fatalf("ProcessTask = %v, want the job dropped", err)
	}
	if got := adm.Events("registerAt"); len(got) != 0 {
		t.Errorf("a dropped job went back to admission: %q", got)
	}
}

func TestChatResponderGitHubFailureRetries(t *testing.T) {
	t.Parallel()
	st, adm, model := newStore(t), &fakeAdmission{}, &fakeLLM{CompleteFunc: answer("Because.")}
	boom := &ghapp.TransientError{Err: errors.New("502 bad gateway")}
	gh := &fakeGitHub{CommentFunc: func(string) (int64, error) { return 0, boom }}
	_, task := chatTask(testPR(t, 313), false)
	err := newChat(t, st, adm, newCaller(t, adm, model, nil, nil), gh).ProcessTask(context.Background(), task)
	if !errors.Is(err, boom) || !workers.IsFailure(err) {
		t.Fatalf("ProcessTask = %v, want the GitHub failure, counted", err)
	}
}

// failingReplies is the real store whose recording of a posted reply
// fails while down: the process died between posting and recording.
type failingReplies struct {
	*store.Store
	down bool
}

func (f *failingReplies) SetPosted(ctx context.Context, pr jobs.PR, what string, id int64) error {
	if f.down {
		return errors.New("redis: connection reset")
	}
	return f.Store.SetPosted(ctx, pr, what, id)
}

// TestChatReplyOnceAcrossACrashBetweenPostAndRecord: the reply is posted,
// then recording it fails; the retried job finds the reply on GitHub by
// its hidden marker and posts nothing more (before: a second reply).
func TestChatReplyOnceAcrossACrashBetweenPostAndRecord(t *testing.T) {
	t.Parallel()
	for _, review := range []bool{false, true} {
		ctx := context.Background()
		st, adm, model := newStore(t), &fakeAdmission{}, &fakeLLM{CompleteFunc: answer("Because.")}
		gh := &fakeGitHub{ReplyFunc: posted(91), CommentFunc: func(string) (int64, error) { return 92, nil }}
		replies := &failingReplies{Store: st, down: true}
		r, err := workers.NewChatResponder(workers.ChatResponderConfig{Attempts: newAttempts(t), Replies: replies, Drafts: st, Ledger: adm, Requeue: adm,
			Caller: newCaller(t, adm, model, nil, nil), GitHub: gh, Turns: newPacer(t), Models: testModels, Markers: render.NewMarkers([]byte("s"))})
		if err != nil {
			t.Fatal(err)
		}
		pr := testPR(t, 321)
		if review {
			pr.Number = 8
		}
		_, task := chatTask(pr, review)
		if err := r.ProcessTask(ctx, task); err == nil {
			t.Fatal("ProcessTask succeeded although the reply was not recorded")
		}
		replies.down = false
		if err := r.ProcessTask(ctx, task); err != nil {
			t.Fatalf("retry: %v", err)
		}
		if w := gh.Writes(); len(w) != 1 {
			t.Errorf("review=%v: GitHub writes %q, want the reply once", review, w)
		}
		if model.Calls() != 1 {
			t.Errorf("review=%v: %d LLM calls, want 1", review, model.Calls())
		}
		if id, err := st.Posted(ctx, pr, "reply:11"); err != nil || id == 0 {
			t.Errorf("review=%v: reply not recorded after the retry (%d, %v)", review, id, err)
		}
	}
}
