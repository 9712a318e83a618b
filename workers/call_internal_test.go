package workers

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/llm"
	"github.com/prq-dev/prq/llmcall"
	"github.com/prq-dev/prq/ratelimit"
)

// requeueAt records when a ticket comes back; the other sides succeed.
type requeueAt struct {
	at       []time.Time
	now      int // registered at once
	settled  int
	failWith error
}

var (
	_ Ledger   = (*requeueAt)(nil)
	_ Requeue  = (*requeueAt)(nil)
	_ Provider = (*requeueAt)(nil)
)

func (r *requeueAt) Started(context.Context, string, string) error { return nil }
func (r *requeueAt) Settle(context.Context, string, string, ratelimit.Cost) error {
	r.settled++
	return nil
}
func (r *requeueAt) Register(context.Context, admission.Ticket) (bool, error) {
	r.now++
	return true, nil
}
func (r *requeueAt) RegisterAt(_ context.Context, _ admission.Ticket, at time.Time) error {
	r.at = append(r.at, at)
	return r.failWith
}
func (r *requeueAt) Bucket(string) (*ratelimit.Bucket, bool) { return nil, false }
func (r *requeueAt) Pause(context.Context, string, string, time.Duration) error {
	return nil
}
func (r *requeueAt) PauseKey(context.Context, string, int, string, time.Duration) error {
	return nil
}
func (r *requeueAt) KeyOf(context.Context, string, string) (int, error) { return 0, nil }

type llmFunc func(context.Context, llm.Request) (llm.Response, error)

func (f llmFunc) Complete(ctx context.Context, r llm.Request) (llm.Response, error) { return f(ctx, r) }

// A transient failure with retries left goes back through admission no
// earlier than the doubled backoff, and counts as a failure (so retries
// stay bounded); a failed re-registration says so.
func TestCallTransientBacksOffThroughAdmission(t *testing.T) {
	t.Parallel()
	transient := llmFunc(func(context.Context, llm.Request) (llm.Response, error) {
		return llm.Response{}, &llm.Error{Kind: llm.ErrTransient, Status: 502}
	})
	for _, tc := range []struct {
		name   string
		regErr error
	}{
		{name: "registered again after the backoff"},
		{name: "re-registration failed", regErr: errors.New("redis down")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			adm := &requeueAt{failWith: tc.regErr}
			c, err := NewCaller(CallerConfig{LLM: transient, Ledger: adm, Requeue: adm, Provider: adm, Backoff: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			before := time.Now()
			_, err = c.call(context.Background(), callSpec{ticket: admission.Ticket{ID: "summary-x", Model: "gpt-4o-mini"},
				model: Model{Model: llmcall.Model{Name: "gpt-4o-mini"}}.withDefaults(), retried: 2, maxRetry: 8})
			if !errors.Is(err, llm.ErrTransient) || !IsFailure(err) {
				t.Fatalf("call = %v, want the transient failure, counted", err)
			}
			var skip *ended
			if errors.As(err, &skip) && skip.step == endSkip {
				t.Fatalf("a transient failure with retries left was recorded as final: %v", err)
			}
			if len(adm.at) != 1 || adm.at[0].Before(before.Add(4*time.Hour)) {
				t.Fatalf("registered at %v, want once, 4h (backoff doubled twice) from now", adm.at)
			}
			if tc.regErr != nil && !strings.Contains(err.Error(), "re-registering failed") {
				t.Errorf("error %q hides the failed re-registration", err)
			}
		})
	}
}

// A transient failure with asynq retries left still ends the job once
// its budget is spent: no return to admission, a generic reason.
func TestCallTransientWithinBudgetOnly(t *testing.T) {
	t.Parallel()
	transient := llmFunc(func(context.Context, llm.Request) (llm.Response, error) {
		return llm.Response{}, &llm.Error{Kind: llm.ErrTransient, Status: 502, Message: "upstream https://internal.example/x"}
	})
	adm := &requeueAt{}
	c, err := NewCaller(CallerConfig{LLM: transient, Ledger: adm, Requeue: adm, Provider: adm})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	_, err = c.call(context.Background(), callSpec{ticket: admission.Ticket{ID: "summary-x", Model: "gpt-4o-mini"},
		model: Model{Model: llmcall.Model{Name: "gpt-4o-mini"}}.withDefaults(), retried: 2, maxRetry: 8,
		attempt: attempt{n: 5, since: now.Add(-time.Minute), now: now, budget: RetryBudget{MaxAttempts: 5, MaxAge: time.Hour}}})
	var skip *ended
	if !errors.As(err, &skip) || skip.step != endSkip || skip.gaveUp != GaveUpTransient || !skip.failed {
		t.Fatalf("call = %v, want a failed result that gave up (transient)", err)
	}
	if want := "gave up after 5 attempts over 1m0s: the provider kept failing"; skip.reason != want {
		t.Errorf("reason %q, want %q", skip.reason, want)
	}
	if len(adm.at) != 0 {
		t.Errorf("went back to admission at %v after giving up", adm.at)
	}
}

// A call abandoned at the model's first-byte limit goes back through
// admission at once: it waited out the limit already. The limit is the
// model's.
func TestCallFirstByteRetriedAtOnce(t *testing.T) {
	t.Parallel()
	var sent time.Duration
	hung := llmFunc(func(_ context.Context, r llm.Request) (llm.Response, error) {
		sent = r.FirstByte
		return llm.Response{}, &llm.Error{Kind: llm.ErrTransient, Code: llm.CodeFirstByte}
	})
	adm := &requeueAt{}
	c, err := NewCaller(CallerConfig{LLM: hung, Ledger: adm, Requeue: adm, Provider: adm, Backoff: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.call(context.Background(), callSpec{ticket: admission.Ticket{ID: "summary-x", Model: "gpt-4o-mini"},
		model: Model{Model: llmcall.Model{Name: "gpt-4o-mini", FirstByte: 7 * time.Second}}.withDefaults(), retried: 2, maxRetry: 8})
	if !errors.Is(err, llm.ErrTransient) || !IsFailure(err) {
		t.Fatalf("call = %v, want the transient failure, counted", err)
	}
	if sent != 7*time.Second {
		t.Errorf("the call was sent with a first-byte limit of %s, want the model's 7s", sent)
	}
	if adm.now != 1 || len(adm.at) != 0 {
		t.Fatalf("registered at once %d times, later at %v; want once at once", adm.now, adm.at)
	}
}
