package workers_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/ghapp"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/llm"
	"github.com/prq-dev/prq/llmcall"
	"github.com/prq-dev/prq/ratelimit"
	"github.com/prq-dev/prq/store"
	"github.com/prq-dev/prq/workers"
)

// fakeAdmission records what the handlers tell admission; a nil
// function field means success.
type fakeAdmission struct {
	mu     sync.Mutex
	events []string

	SubmitFunc     func(t admission.Ticket) (bool, error)
	SettleFunc     func(id string, c ratelimit.Cost) error
	StartedFunc    func(id string) error
	RegisterAtFunc func(t admission.Ticket, at time.Time) error
	PauseFunc      func(model string) error
	models         []string
	registered     []admission.Ticket
	// paused are the paused models (Paused)
	paused map[string]string
	// CallingErr fails Calling; bucket is what Bucket gives (nil: none).
	CallingErr error
	bucket     *ratelimit.Bucket
}

var (
	_ workers.Admitter = (*fakeAdmission)(nil)
	_ workers.Ledger   = (*fakeAdmission)(nil)
	_ workers.Requeue  = (*fakeAdmission)(nil)
	_ workers.Provider = (*fakeAdmission)(nil)
	_ workers.Tickets  = (*fakeAdmission)(nil)
)

func (f *fakeAdmission) record(format string, a ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, fmt.Sprintf(format, a...))
}

// Events returns the recorded events that start with prefix.
func (f *fakeAdmission) Events(prefix string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, e := range f.events {
		if strings.HasPrefix(e, prefix) {
			out = append(out, e)
		}
	}
	return out
}

func (f *fakeAdmission) Submit(_ context.Context, task *asynq.Task, t admission.Ticket, _ ...asynq.Option) (bool, error) {
	f.record("submit %s %s", task.Type(), t.ID)
	if f.SubmitFunc != nil {
		return f.SubmitFunc(t)
	}
	return true, nil
}

func (f *fakeAdmission) SubmitMany(ctx context.Context, subs []admission.Submission) ([]bool, error) {
	out := make([]bool, len(subs))
	for i, sub := range subs {
		ok, err := f.Submit(ctx, sub.Task, sub.Ticket, sub.Opts...)
		if err != nil {
			return out, err
		}
		out[i] = ok
	}
	return out, nil
}

// Paused returns the models set paused.
func (f *fakeAdmission) Paused(context.Context) map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.paused)
}

func (f *fakeAdmission) Register(_ context.Context, t admission.Ticket) (bool, error) {
	f.record("register %s", t.ID)
	f.mu.Lock()
	f.registered = append(f.registered, t)
	f.mu.Unlock()
	return true, nil
}

// Registered returns the tickets registered, in order.
func (f *fakeAdmission) Registered() []admission.Ticket {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.registered)
}

func (f *fakeAdmission) RegisterAt(_ context.Context, t admission.Ticket, at time.Time) error {
	f.record("registerAt %s", t.ID)
	if f.RegisterAtFunc != nil {
		return f.RegisterAtFunc(t, at)
	}
	return nil
}

func (f *fakeAdmission) Started(_ context.Context, model, id string) error {
	f.record("started %s", id)
	if f.StartedFunc != nil {
		return f.StartedFunc(id)
	}
	return nil
}

func (f *fakeAdmission) Settle(_ context.Context, model, id string, c ratelimit.Cost) error {
	f.record("settle %s %d", id, c.Tokens)
	if f.SettleFunc != nil {
		return f.SettleFunc(id, c)
	}
	return nil
}

func (f *fakeAdmission) Cancel(_ context.Context, model, id string) (bool, error) {
	f.record("cancel %s %s", model, id)
	return true, nil
}

func (f *fakeAdmission) DeleteTask(queue, id string) { f.record("delete %s %s", queue, id) }

func (f *fakeAdmission) Pause(_ context.Context, model, reason string, d time.Duration) error {
	f.record("pause %s", model)
	if f.PauseFunc != nil {
		return f.PauseFunc(model)
	}
	return nil
}

func (f *fakeAdmission) PauseKey(_ context.Context, model string, key int, reason string, d time.Duration) error {
	f.record("pausekey %s %d", model, key)
	return nil
}

func (f *fakeAdmission) KeyOf(context.Context, string, string) (int, error) { return 0, nil }

// Calling records that a job's call is about to be sent (admission moves
// a window's charge there).
func (f *fakeAdmission) Calling(_ context.Context, model, id string) error {
	f.record("calling %s", id)
	return f.CallingErr
}

// Sent records that a job's request was written (admission moves a
// window's charge there).
func (f *fakeAdmission) Sent(_ context.Context, model, id string, after time.Duration) error {
	f.record("sent %s", id)
	return nil
}

func (f *fakeAdmission) SettleCall(ctx context.Context, model, id string, c ratelimit.Cost, way admission.CallWay) error {
	return f.Settle(ctx, model, id, c)
}

func (f *fakeAdmission) Bucket(string) (*ratelimit.Bucket, bool) { return f.bucket, f.bucket != nil }

func (f *fakeAdmission) Models() []string { return f.models }

// fakeLLM answers with CompleteFunc and counts calls.
type fakeLLM struct {
	mu           sync.Mutex
	calls        int
	CompleteFunc func(r llm.Request) (llm.Response, error)
}

var _ workers.LLM = (*fakeLLM)(nil)

func (f *fakeLLM) Complete(_ context.Context, r llm.Request) (llm.Response, error) {
	f.mu.Lock()
	f.calls++
	f.mu.Unlock()
	return f.CompleteFunc(r)
}

func (f *fakeLLM) Calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

func answer(text string) func(llm.Request) (llm.Response, error) {
	return func(llm.Request) (llm.Response, error) {
		return llm.Response{Text: text, PromptTokens: 100, OutputTokens: 20}, nil
	}
}

func fail(kind error) func(llm.Request) (llm.Response, error) {
	return func(llm.Request) (llm.Response, error) {
		return llm.Response{}, &llm.Error{Kind: kind, Status: 500, Message: "provider says no"}
	}
}

// fakeGitHub is one installation's GitHub; each factory hands it out.
type fakeGitHub struct {
	mu     sync.Mutex
	writes []string
	posted []postedReply

	PRFunc            func() (ghapp.PullRequest, error)
	FilesFunc         func() ([]ghapp.File, error)
	CompareFunc       func(base, head string) ([]ghapp.File, error)
	ContentsFunc      func(repo, path, ref string) (ghapp.FileContent, error) // nil: no file anywhere
	UpsertCommentFunc func(knownID int64, body string) (int64, error)
	HasReviewFunc     func(marker string) (int64, error)
	CreateReviewFunc  func(body string, comments []ghapp.ReviewComment) (int64, error)
	ReplyFunc         func(commentID int64, body string) (int64, error)
	CommentFunc       func(body string) (int64, error)
	// ThreadsFunc and ResolveFunc: nil is a pull request without threads.
	ThreadsFunc func() ([]ghapp.ReviewThread, error)
	ResolveFunc func(threadID string) error
	// OwnCommentsFunc and VotesFunc: nil is a pull request without
	// comments of prq's.
	OwnCommentsFunc func() ([]ghapp.OwnReviewComment, error)
	VotesFunc       func(commentID int64) (ghapp.Votes, error)
}

var (
	_ workers.PRReader      = (*fakeGitHub)(nil)
	_ workers.ReviewWriter  = (*fakeGitHub)(nil)
	_ workers.Replier       = (*fakeGitHub)(nil)
	_ workers.PRReaders     = (*fakeGitHub)(nil)
	_ workers.ReviewWriters = (*fakeGitHub)(nil)
	_ workers.Repliers      = (*fakeGitHub)(nil)
)

func (g *fakeGitHub) PRReader(int64) (workers.PRReader, error)         { return g, nil }
func (g *fakeGitHub) ReviewWriter(int64) (workers.ReviewWriter, error) { return g, nil }
func (g *fakeGitHub) Replier(int64) (workers.Replier, error)           { return g, nil }

func (g *fakeGitHub) write(format string, a ...any) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.writes = append(g.writes, fmt.Sprintf(format, a...))
}

// Writes returns the content-creating calls made.
func (g *fakeGitHub) Writes() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.writes...)
}

func (g *fakeGitHub) PR(context.Context, string, string, int) (ghapp.PullRequest, error) {
	return g.PRFunc()
}

func (g *fakeGitHub) Files(context.Context, string, string, int) ([]ghapp.File, error) {
	return g.FilesFunc()
}

func (g *fakeGitHub) Compare(_ context.Context, _, _, base, head string) ([]ghapp.File, error) {
	return g.CompareFunc(base, head)
}

func (g *fakeGitHub) Contents(_ context.Context, _, repo, path, ref string) (ghapp.FileContent, error) {
	if g.ContentsFunc == nil {
		return ghapp.FileContent{}, ghapp.ErrNotFound
	}
	return g.ContentsFunc(repo, path, ref)
}

func (g *fakeGitHub) UpsertComment(_ context.Context, _, _ string, _ int, knownID int64, _, body string) (int64, error) {
	g.write("upsert")
	return g.UpsertCommentFunc(knownID, body)
}

func (g *fakeGitHub) HasReview(_ context.Context, _, _ string, _ int, marker string) (int64, error) {
	return g.HasReviewFunc(marker)
}

func (g *fakeGitHub) CreateReview(_ context.Context, _, _ string, _ int, _, body string, comments []ghapp.ReviewComment) (int64, error) {
	g.write("review %d", len(comments))
	return g.CreateReviewFunc(body, comments)
}

func (g *fakeGitHub) Reply(_ context.Context, _, _ string, _ int, commentID int64, body string) (int64, error) {
	g.write("reply %d %s", commentID, body)
	id, err := g.ReplyFunc(commentID, body)
	g.keep(err, id, "reply", body)
	return id, err
}

func (g *fakeGitHub) ReviewThreads(context.Context, string, string, int) ([]ghapp.ReviewThread, error) {
	if g.ThreadsFunc == nil {
		return nil, nil
	}
	return g.ThreadsFunc()
}

func (g *fakeGitHub) ResolveThread(_ context.Context, id string) error {
	g.write("resolve %s", id)
	if g.ResolveFunc == nil {
		return nil
	}
	return g.ResolveFunc(id)
}

func (g *fakeGitHub) OwnReviewComments(context.Context, string, string, int) ([]ghapp.OwnReviewComment, error) {
	if g.OwnCommentsFunc == nil {
		return nil, nil
	}
	return g.OwnCommentsFunc()
}

func (g *fakeGitHub) CommentVotes(_ context.Context, _, _ string, _ int, id int64) (ghapp.Votes, error) {
	if g.VotesFunc == nil {
		return ghapp.Votes{}, nil
	}
	return g.VotesFunc(id)
}

func (g *fakeGitHub) Comment(_ context.Context, _, _ string, _ int, body string) (int64, error) {
	g.write("comment %s", body)
	id, err := g.CommentFunc(body)
	g.keep(err, id, "comment", body)
	return id, err
}

// keep remembers a reply GitHub took, for HasReply.
func (g *fakeGitHub) keep(err error, id int64, where, body string) {
	if err != nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.posted = append(g.posted, postedReply{id: id, where: where, body: body})
}

// HasReply finds a reply GitHub took by its marker, where GitHub lists
// it: review comments for a diff thread's reply, else conversation
// comments.
func (g *fakeGitHub) HasReply(_ context.Context, _, _ string, _ int, review bool, marker string) (int64, error) {
	where := "comment"
	if review {
		where = "reply"
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, p := range g.posted {
		if p.where == where && strings.Contains(p.body, marker) {
			return p.id, nil
		}
	}
	return 0, nil
}

type postedReply struct {
	id          int64
	where, body string
}

// fakeQueue records enqueued tasks.
type fakeQueue struct {
	mu    sync.Mutex
	tasks []string
}

var _ workers.TaskQueue = (*fakeQueue)(nil)

func (q *fakeQueue) EnqueueContext(_ context.Context, task *asynq.Task, _ ...asynq.Option) (*asynq.TaskInfo, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.tasks = append(q.tasks, task.Type())
	return &asynq.TaskInfo{Type: task.Type()}, nil
}

func (q *fakeQueue) Tasks() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]string(nil), q.tasks...)
}

// newStore returns a store on the package's real Redis.
func newStore(t *testing.T) *store.Store {
	t.Helper()
	return store.New(redistest.Shared(t).Client(t), jobs.TierFree)
}

var testModels = map[string]workers.Model{"gpt-4o-mini": {Model: llmcall.Model{Name: "gpt-4o-mini"}}, "gpt-4o": {Model: llmcall.Model{Name: "gpt-4o"}}}

// newCaller returns a Caller on the fakes.
func newCaller(t *testing.T, adm *fakeAdmission, l *fakeLLM, q workers.Quota, tiers map[jobs.Tier]workers.TierSpec) *workers.Caller {
	t.Helper()
	c, err := workers.NewCaller(workers.CallerConfig{LLM: l, Ledger: adm, Requeue: adm, Provider: adm, Quota: q, Tiers: tiers})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// testPR is a PR of its own per test, so tests can run in parallel.
func testPR(t *testing.T, inst int64) jobs.PR {
	return jobs.PR{Installation: inst, Owner: "o", Repo: strings.ReplaceAll(t.Name(), "/", "-"), Number: 7}
}

func ptr[T any](v T) *T { return &v }

// newAttempts counts runs on the package's real Redis.
func newAttempts(t *testing.T) *workers.Attempts {
	t.Helper()
	return workers.NewAttempts(redistest.Shared(t).Client(t))
}
