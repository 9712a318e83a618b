package store

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/jobs"
)

// FileData is one file of a PR run as planned: its patch and whether it
// is summarised and reviewed, or skipped and why.
type FileData struct {
	Path       string `json:"path"`
	Status     string `json:"status"`
	Additions  int    `json:"additions"`
	Deletions  int    `json:"deletions"`
	Patch      string `json:"patch,omitempty"`
	SkipReason string `json:"skip_reason,omitempty"`
	Index      int    `json:"index"`
	// Instructions are the repository's instructions for this file's
	// path, as its prompts carry them.
	Instructions string `json:"instructions,omitempty"`
}

// Comment is one review comment on a diff line.
type Comment struct {
	Path      string `json:"path"`
	Line      int    `json:"line"`
	StartLine int    `json:"start_line,omitempty"`
	Side      string `json:"side"`
	Body      string `json:"body"`
	// Key identifies the finding across the pull request's heads
	// (review.Key): one already posted and still open is not posted
	// again.
	Key string `json:"key,omitempty"`
	// Lines is the content of the lines the comment is about (a push
	// that changes them addresses the finding).
	Lines []string `json:"lines,omitempty"`
	// Suggestion, when set, replaces the comment's lines: posted as a
	// committable suggestion.
	Suggestion *string `json:"suggestion,omitempty"`
}

// Result is a finished per-file job.
type Result struct {
	Kind     jobs.Kind `json:"kind"`
	Path     string    `json:"path"`
	Index    int       `json:"index"`
	Text     string    `json:"text,omitempty"`
	Comments []Comment `json:"comments,omitempty"`
	Skipped  string    `json:"skipped,omitempty"` // why no LLM result, for the summary
	Tokens   int64     `json:"tokens,omitempty"`
	// Cost is what the call cost at its model's prices, in dollars (0:
	// not priced, or no call).
	Cost float64 `json:"cost,omitempty"`
	// Failed: the job ran but has no usable result (Skipped says why);
	// shown as a failure, never as a clean file.
	Failed bool `json:"failed,omitempty"`
	// Notes are review findings that sit on no line of the diff.
	Notes []Note `json:"notes,omitempty"`
	// Part of Parts: one part of a file reviewed in several calls.
	Part  int `json:"part,omitempty"`
	Parts int `json:"parts,omitempty"`
	// Run, when set, is the run the job was planned in (its start, unix
	// ms: jobs.File.PRSeq): a result of an earlier run of the head
	// (reopened, or its base edited, while the job was in flight) is not
	// counted.
	Run int64 `json:"run,omitempty"`
	// Fallback, when set, is the model that made the result: a fallback
	// of the one the job was planned for, which could not serve it.
	Fallback string `json:"fallback,omitempty"`
	// Walkthrough: the head's walkthrough (a summary of the pull request
	// as a whole, Path empty), not a file's.
	Walkthrough bool `json:"walkthrough,omitempty"`
	// Model is the model that made the result (its findings' acceptance
	// is counted under it); empty in results recorded before it existed.
	Model string `json:"model,omitempty"`
}

// Note is a review finding that belongs to no line of the diff.
type Note struct {
	Line int    `json:"line,omitempty"`
	Body string `json:"body"`
}

// QuotaSkipPrefix starts the Skipped reason of a job refused by its
// tenant's quota: the run counts those files (Run.SkippedQuota).
const QuotaSkipPrefix = "skipped: quota"

// Run is a PR's current planned head and its progress.
type Run struct {
	PR           jobs.PR   `json:"pr"`
	Head         string    `json:"head"`
	Base         string    `json:"base"`
	Tier         jobs.Tier `json:"tier"`
	State        string    `json:"state"` // running, done, cancelled
	SummaryTotal int       `json:"summary_total"`
	SummaryDone  int       `json:"summary_done"`
	ReviewTotal  int       `json:"review_total"`
	ReviewDone   int       `json:"review_done"`
	Finalized    bool      `json:"finalized"`
	CreatedAt    time.Time `json:"created_at"`
	LastReviewed string    `json:"last_reviewed,omitempty"`
	// Title and Body are the pull request's, Body cut to what prompts use.
	Title        string `json:"title,omitempty"`
	Body         string `json:"body,omitempty"`
	SkippedQuota int    `json:"skipped_quota,omitempty"`
	// Instructions and Language are the repository's configuration's
	// (.prq.yaml), as every prompt of the head carries them;
	// ConfigNotice says which configuration file could not be used, and
	// why ("" when none).
	Instructions string `json:"instructions,omitempty"`
	Language     string `json:"language,omitempty"`
	ConfigNotice string `json:"config_notice,omitempty"`
	// Round names a head reviewed again on request ("full review"): its
	// review is published anew ("" for the first).
	Round         string   `json:"round,omitempty"`
	TaskIDsQueued []string `json:"-"`
	// Walkthrough: one of the SummaryTotal summary jobs is the head's
	// walkthrough, not a file's.
	Walkthrough bool `json:"walkthrough,omitempty"`
	// DoneAt is when the head's last file was recorded (zero until then).
	DoneAt time.Time `json:"done_at,omitempty"`
	// Stuck is set once the reconciler found the run running past its
	// bound (MarkStuck).
	Stuck bool `json:"stuck,omitempty"`
	// WaitingUntil is when the tenant's spent quota resets, while a job
	// of the head waits for it (SetWaiting; zero when none waits): the
	// run's life bound counts from there.
	WaitingUntil time.Time `json:"waiting_until,omitempty"`
	// Context is the part of the head's prompts they all share (its
	// title, description, files and diffs). StartRun keeps it beside
	// the head's files, not in the run: FileAndContext reads it with a
	// file; GetRun leaves it empty.
	Context string `json:"-"`
}

// FileSummaries are how many of the head's files were summarised and are
// to be: the summary jobs, its walkthrough aside.
func (r Run) FileSummaries() (done, total int) {
	total = r.SummaryTotal
	if r.Walkthrough {
		total--
	}
	return min(r.SummaryDone, total), total
}

// AllDone reports whether every planned file of the run has a result.
func (r Run) AllDone() bool { return r.SummaryDone >= r.SummaryTotal && r.ReviewDone >= r.ReviewTotal }

// Run states.
const (
	StateRunning   = "running"
	StateDone      = "done"
	StateCancelled = "cancelled"
)

func prTag(pr jobs.PR) string  { return "{prq:pr:" + pr.Key() + "}" }
func runKey(pr jobs.PR) string { return prTag(pr) + ":run" }
func filesKey(pr jobs.PR, h string) string {
	return prTag(pr) + ":files:" + h
}
func resultsKey(pr jobs.PR, h string) string { return prTag(pr) + ":results:" + h }
func postedKey(pr jobs.PR) string            { return prTag(pr) + ":posted" }
func tasksKey(pr jobs.PR, h string) string   { return prTag(pr) + ":tasks:" + h }

const activeIndex = "prq:prs:active"

//go:embed complete.lua
var completeSource string

var completeScript = redis.NewScript(completeSource)

// waitingScript: KEYS the run hash, then the head's other keys; ARGV
// head, until (unix ms), keep (ms): each existing key lives at least keep.
var waitingScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'head') ~= ARGV[1] then return 0 end
local cur = tonumber(redis.call('HGET', KEYS[1], 'waiting_until') or '0') or 0
if tonumber(ARGV[2]) > cur then redis.call('HSET', KEYS[1], 'waiting_until', ARGV[2]) end
local keep = tonumber(ARGV[3])
for _, k in ipairs(KEYS) do
  local ttl = redis.call('PTTL', k)
  if ttl >= 0 and ttl < keep then redis.call('PEXPIRE', k, keep) end
end
return 1`)

//go:embed start.lua
var startSource string

var startScript = redis.NewScript(startSource)

// StartRun records a planned head of a PR with its files. It returns the
// previous head when this one supersedes it, and started=false when this
// head was planned already (a re-run plan job changes nothing).
func (s *Store) StartRun(ctx context.Context, r Run, files []FileData) (previous string, started bool, err error) {
	r.State = StateRunning
	r.CreatedAt = s.NowFunc().UTC()
	// strings only: Lua's numbers would print large integers inexactly
	fields := map[string]string{
		"pr": string(mustJSON(r.PR)), "head": r.Head, "base": r.Base, "tier": string(r.Tier), "state": r.State,
		"summary_total": strconv.Itoa(r.SummaryTotal), "summary_done": "0", "review_total": strconv.Itoa(r.ReviewTotal), "review_done": "0",
		"finalized": "0", "created": strconv.FormatInt(r.CreatedAt.UnixMilli(), 10), "last_reviewed": r.LastReviewed, "skipped_quota": "0",
		"title": r.Title, "body": r.Body, "instructions": r.Instructions, "language": r.Language, "config_notice": r.ConfigNotice, "round": r.Round,
		"walkthrough": strconv.FormatBool(r.Walkthrough),
	}
	args := []any{r.Head, s.RunTTL.Milliseconds(), string(mustJSON(fields))}
	for _, f := range files {
		args = append(args, strconv.Itoa(f.Index), string(mustJSON(f)))
	}
	if r.Context != "" {
		args = append(args, contextField, r.Context)
	}
	// one script on the PR's hash slot: read and write in one step
	res, err := startScript.Run(ctx, s.rdb, []string{runKey(r.PR), filesKey(r.PR, r.Head), resultsKey(r.PR, r.Head), postedKey(r.PR)}, args...).Slice()
	if err != nil {
		return "", false, fmt.Errorf("store: start run %s: %w", r.PR, err)
	}
	if n, _ := res[0].(int64); n == 0 {
		return "", false, nil
	}
	previous, _ = res[1].(string)
	// the active index lives in another slot (Redis Cluster refuses CROSSSLOT)
	if err := s.rdb.ZAdd(ctx, activeIndex, redis.Z{Score: float64(r.CreatedAt.UnixMilli()), Member: string(mustJSON(r.PR))}).Err(); err != nil {
		return "", false, fmt.Errorf("store: start run %s: %w", r.PR, err)
	}
	return previous, true, nil
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// GetRun returns a PR's current run.
func (s *Store) GetRun(ctx context.Context, pr jobs.PR) (Run, error) {
	return runOf(pr, s.rdb.HGetAll(ctx, runKey(pr)))
}

// runOf decodes a run's hash as read by cmd.
func runOf(pr jobs.PR, cmd *redis.MapStringStringCmd) (Run, error) {
	m, err := cmd.Result()
	if err != nil {
		return Run{}, fmt.Errorf("store: get run %s: %w", pr, err)
	}
	if len(m) == 0 {
		return Run{}, ErrNotFound
	}
	atoi := func(k string) int { n, _ := strconv.Atoi(m[k]); return n }
	created, _ := strconv.ParseInt(m["created"], 10, 64)
	var doneAt time.Time
	if ms, err := strconv.ParseInt(m["done_at"], 10, 64); err == nil && ms > 0 {
		doneAt = time.UnixMilli(ms).UTC()
	}
	var waiting time.Time
	if ms, err := strconv.ParseInt(m["waiting_until"], 10, 64); err == nil && ms > 0 {
		waiting = time.UnixMilli(ms).UTC()
	}
	return Run{DoneAt: doneAt, WaitingUntil: waiting, Stuck: m["stuck"] == m["head"] && m["head"] != "",
		PR: pr, Head: m["head"], Base: m["base"], Tier: jobs.Tier(m["tier"]), State: m["state"],
		SummaryTotal: atoi("summary_total"), SummaryDone: atoi("summary_done"),
		ReviewTotal: atoi("review_total"), ReviewDone: atoi("review_done"),
		Finalized: m["finalized"] == "1", CreatedAt: time.UnixMilli(created).UTC(),
		LastReviewed: m["last_reviewed"], SkippedQuota: atoi("skipped_quota"), Title: m["title"], Body: m["body"],
		Instructions: m["instructions"], Language: m["language"], ConfigNotice: m["config_notice"], Round: m["round"],
		Walkthrough: m["walkthrough"] == "true",
	}, nil
}

// SetWaiting records that a job of head waits for its tenant's quota
// to reset at until (the latest such time is kept). A head that is no
// longer the run's is left alone.
func (s *Store) SetWaiting(ctx context.Context, pr jobs.PR, head string, until time.Time) error {
	// the head's data outlives the wait by RunTTL, however long the
	// quota's period (a month's is longer than RunTTL)
	keep := max(until.Sub(s.NowFunc()), 0) + s.RunTTL
	keys := []string{runKey(pr), filesKey(pr, head), resultsKey(pr, head), tasksKey(pr, head), postedKey(pr), settingsKey(pr), controlKey(pr)}
	if err := waitingScript.Run(ctx, s.rdb, keys, head, until.UnixMilli(), keep.Milliseconds()).Err(); err != nil {
		return fmt.Errorf("store: set waiting %s: %w", pr, err)
	}
	return nil
}

// Current reports whether head is the PR's live head (not superseded or
// cancelled): a stale job exits without effects.
func (s *Store) Current(ctx context.Context, pr jobs.PR, head string) (bool, error) {
	vals, err := s.rdb.HMGet(ctx, runKey(pr), "head", "state").Result()
	if err != nil {
		return false, fmt.Errorf("store: current %s: %w", pr, err)
	}
	h, _ := vals[0].(string)
	st, _ := vals[1].(string)
	return h == head && st != StateCancelled, nil
}

// Cancel marks a PR's run cancelled (closed or turned draft) and returns
// the head whose work should be dropped.
func (s *Store) Cancel(ctx context.Context, pr jobs.PR) (string, error) {
	run, err := s.GetRun(ctx, pr)
	if err != nil {
		return "", err
	}
	if err := s.rdb.HSet(ctx, runKey(pr), "state", StateCancelled).Err(); err != nil {
		return "", fmt.Errorf("store: cancel %s: %w", pr, err)
	}
	s.rdb.ZRem(ctx, activeIndex, string(mustJSON(pr)))
	return run.Head, nil
}

// contextField is the field of a head's files hash that holds the
// head's shared prompt context (Run.Context); the others are files, by
// index.
const contextField = "context"

// Files returns the planned files of a head, by index.
func (s *Store) Files(ctx context.Context, pr jobs.PR, head string) (map[int]FileData, error) {
	m, err := s.rdb.HGetAll(ctx, filesKey(pr, head)).Result()
	if err != nil {
		return nil, fmt.Errorf("store: files %s: %w", pr, err)
	}
	out := make(map[int]FileData, len(m))
	for k, v := range m {
		if k == contextField {
			continue
		}
		var f FileData
		if err := json.Unmarshal([]byte(v), &f); err != nil {
			return nil, fmt.Errorf("store: file %s %s: %w", pr, k, err)
		}
		out[f.Index] = f
	}
	return out, nil
}

// File returns one planned file.
func (s *Store) File(ctx context.Context, pr jobs.PR, head string, index int) (FileData, error) {
	b, err := s.rdb.HGet(ctx, filesKey(pr, head), strconv.Itoa(index)).Bytes()
	if errors.Is(err, redis.Nil) {
		return FileData{}, ErrNotFound
	}
	if err != nil {
		return FileData{}, fmt.Errorf("store: file %s %d: %w", pr, index, err)
	}
	var f FileData
	if err := json.Unmarshal(b, &f); err != nil {
		return FileData{}, fmt.Errorf("store: file %s %d: %w", pr, index, err)
	}
	return f, nil
}

// FileAndContext returns one planned file and its head's shared prompt
// context (Run.Context; "" for a head planned without one), in one
// round trip.
func (s *Store) FileAndContext(ctx context.Context, pr jobs.PR, head string, index int) (FileData, string, error) {
	return fileOf(pr, index, s.rdb.HMGet(ctx, filesKey(pr, head), strconv.Itoa(index), contextField))
}

// fileOf decodes a file and the head's shared context as read by cmd.
func fileOf(pr jobs.PR, index int, cmd *redis.SliceCmd) (FileData, string, error) {
	vals, err := cmd.Result()
	if err != nil {
		return FileData{}, "", fmt.Errorf("store: file %s %d: %w", pr, index, err)
	}
	b, ok := vals[0].(string)
	if !ok {
		return FileData{}, "", ErrNotFound
	}
	var f FileData
	if err := json.Unmarshal([]byte(b), &f); err != nil {
		return FileData{}, "", fmt.Errorf("store: file %s %d: %w", pr, index, err)
	}
	shared, _ := vals[1].(string)
	return f, shared, nil
}

// CompleteFile records a per-file result once. It reports whether this
// completion was the PR head's last outstanding file, in which case the
// caller enqueues finalize: exactly one caller ever sees last=true.
func (s *Store) CompleteFile(ctx context.Context, pr jobs.PR, head string, r Result) (last bool, err error) {
	b, _ := json.Marshal(r)
	quota := 0
	if strings.HasPrefix(r.Skipped, QuotaSkipPrefix) {
		quota = 1
	}
	res, err := completeScript.Run(ctx, s.rdb, []string{runKey(pr), resultsKey(pr, head)},
		head, string(r.Kind)+":"+strconv.Itoa(r.Index), b, string(r.Kind), quota, s.RunTTL.Milliseconds(), s.NowFunc().UnixMilli(), r.Run).Int()
	if err != nil {
		return false, fmt.Errorf("store: complete file %s %s: %w", pr, r.Path, err)
	}
	return res == 2, nil
}

// FileJobRead names what a file job reads before its call.
type FileJobRead struct {
	PR   jobs.PR
	Head string
	// Kind and Index name the job's result: whether it is recorded.
	Kind  jobs.Kind
	Index int
	// File, when NoFile is false, is the index of the file read with the
	// head's shared context (a walkthrough reads its head's files apart).
	File   int
	NoFile bool
	// Installation, when ReadInstallation is set, is the installation
	// whose state is read too (as Disabled reads it).
	Installation     int64
	ReadInstallation bool
}

// FileJobState is what ReadFileJob found, each part with the error its
// own read would return: RunErr is ErrNotFound for a run gone, FileErr
// for a file not stored.
type FileJobState struct {
	Disabled    string // why the installation's work may not run; "" runs
	DisabledErr error
	Run         Run
	RunErr      error
	Done        bool // the job's result is recorded: a retry makes no second call
	DoneErr     error
	File        FileData
	Shared      string
	FileErr     error
}

// ReadFileJob reads in one round trip what a file job checks before its
// call: its installation's state, its run, whether its result is
// recorded, its file and the head's shared context. The caller decides
// in which order the answers count; a part it never reaches costs one
// command in the same round trip.
func (s *Store) ReadFileJob(ctx context.Context, r FileJobRead) FileJobState {
	pipe := s.rdb.Pipeline()
	var inst *redis.StringCmd
	if r.ReadInstallation {
		inst = pipe.Get(ctx, instKey(r.Installation))
	}
	run := pipe.HGetAll(ctx, runKey(r.PR))
	done := pipe.HExists(ctx, resultsKey(r.PR, r.Head), string(r.Kind)+":"+strconv.Itoa(r.Index))
	var file *redis.SliceCmd
	if !r.NoFile {
		file = pipe.HMGet(ctx, filesKey(r.PR, r.Head), strconv.Itoa(r.File), contextField)
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error, read below
	var st FileJobState
	if inst != nil {
		p, err := s.planOf(r.Installation, inst)
		st.Disabled, st.DisabledErr = disabledOf(p), err
	}
	st.Run, st.RunErr = runOf(r.PR, run)
	if st.Done, st.DoneErr = done.Result(); st.DoneErr != nil {
		st.DoneErr = fmt.Errorf("store: has result %s: %w", r.PR, st.DoneErr)
	}
	if file != nil {
		st.File, st.Shared, st.FileErr = fileOf(r.PR, r.File, file)
	}
	return st
}

// CarryResults keeps, with a published head's results, the results it
// carried from earlier reviewed heads for files it left unchanged, so the
// next head carries them on (across any number of pushes). They are
// stored beside the head's own results under "carried:<path>:<kind>"
// and returned by Results; they count toward no total.
func (s *Store) CarryResults(ctx context.Context, pr jobs.PR, head string, rs []Result) error {
	if len(rs) == 0 {
		return nil
	}
	args := make([]any, 0, 2*len(rs))
	for _, r := range rs {
		args = append(args, "carried:"+r.Path+":"+string(r.Kind), string(mustJSON(r)))
	}
	pipe := s.rdb.Pipeline()
	pipe.HSet(ctx, resultsKey(pr, head), args...)
	pipe.PExpire(ctx, resultsKey(pr, head), s.RunTTL)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("store: carry results %s: %w", pr, err)
	}
	return nil
}

// Results returns a head's per-file results.
func (s *Store) Results(ctx context.Context, pr jobs.PR, head string) ([]Result, error) {
	m, err := s.rdb.HGetAll(ctx, resultsKey(pr, head)).Result()
	if err != nil {
		return nil, fmt.Errorf("store: results %s: %w", pr, err)
	}
	out := make([]Result, 0, len(m))
	for _, v := range m {
		var r Result
		if err := json.Unmarshal([]byte(v), &r); err != nil {
			return nil, fmt.Errorf("store: results %s: %w", pr, err)
		}
		out = append(out, r)
	}
	return out, nil
}

//go:embed finalized.lua
var finalizedSource string

var finalizedScript = redis.NewScript(finalizedSource)

// MarkFinalized records that the head's results were published and it is
// the last reviewed commit; the PR leaves the active list. A head no
// longer current (superseded or cancelled meanwhile) changes nothing.
func (s *Store) MarkFinalized(ctx context.Context, pr jobs.PR, head string) error {
	n, err := finalizedScript.Run(ctx, s.rdb, []string{runKey(pr)}, head).Int()
	if err != nil {
		return fmt.Errorf("store: finalize %s: %w", pr, err)
	}
	if n == 0 {
		return nil
	}
	if err := s.rdb.ZRem(ctx, activeIndex, string(mustJSON(pr))).Err(); err != nil {
		return fmt.Errorf("store: finalize %s: %w", pr, err)
	}
	return nil
}

// MarkStuck records that the run of head was found running past its
// bound; first is true for the one caller that marked it (the run is
// surfaced once, however many reconcilers see it).
func (s *Store) MarkStuck(ctx context.Context, pr jobs.PR, head string) (first bool, err error) {
	n, err := markStuckScript.Run(ctx, s.rdb, []string{runKey(pr)}, head).Int()
	if err != nil {
		return false, fmt.Errorf("store: mark stuck %s: %w", pr, err)
	}
	return n == 1, nil
}

//go:embed stuck.lua
var stuckSource string

var markStuckScript = redis.NewScript(stuckSource)

//go:embed unlock.lua
var unlockSource string

var unlockScript = redis.NewScript(unlockSource)

// Unlock deletes the lock key if it still holds value (the caller's
// token), atomically (unlock.lua): a lock taken over since, or expired,
// is left alone. released says whether it was deleted.
func Unlock(ctx context.Context, rdb redis.Scripter, key, value string) (released bool, err error) {
	n, err := unlockScript.Run(ctx, rdb, []string{key}, value).Int()
	if err != nil {
		return false, fmt.Errorf("store: unlock %s: %w", key, err)
	}
	return n == 1, nil
}

//go:embed lock.lua
var lockSource string

var lockScript = redis.NewScript(lockSource)

// Lock takes the pull request's lock named what for ttl on behalf of owner
// (a job's id), so that one job at a time does it; release gives it back if
// it is still held by this attempt. ok is false when another owner holds
// it. A new attempt of the same owner takes the lock over: the attempt that
// held it died with its process (a job runs in one process at a time), and
// waiting for its expiry would only delay the work.
func (s *Store) Lock(ctx context.Context, pr jobs.PR, what, owner string, ttl time.Duration) (release func(), ok bool, err error) {
	key := prTag(pr) + ":lock:" + what
	token := strconv.FormatInt(s.NowFunc().UnixNano(), 36) + "-" + strconv.FormatUint(rand.Uint64(), 36)
	value := owner + "|" + token
	// a free lock is taken in one command (setNXGet); the script
	// (lock.lua) only takes one back from an earlier attempt of the same
	// owner, atomically
	held, err := s.setNXGet(ctx, key, value, ttl)
	switch {
	case errors.Is(err, redis.Nil): // it was free: taken
	case err != nil:
		return nil, false, fmt.Errorf("store: lock %s %s: %w", pr, what, err)
	case !strings.HasPrefix(held, owner+"|"):
		return nil, false, nil
	default:
		taken, err := lockScript.Run(ctx, s.rdb, []string{key}, owner, token, ttl.Milliseconds()).Int()
		if err != nil {
			return nil, false, fmt.Errorf("store: lock %s %s: %w", pr, what, err)
		}
		if taken == 0 {
			return nil, false, nil
		}
	}
	return func() {
		// an unreleased lock expires by itself
		_, _ = Unlock(context.WithoutCancel(ctx), s.rdb, key, value)
	}, true, nil
}

// Posted returns the GitHub id recorded under what (0 when none).
func (s *Store) Posted(ctx context.Context, pr jobs.PR, what string) (int64, error) {
	v, err := s.rdb.HGet(ctx, postedKey(pr), what).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("store: posted %s %s: %w", pr, what, err)
	}
	return v, nil
}

// PostedEach is Posted of several things, in one read.
func (s *Store) PostedEach(ctx context.Context, pr jobs.PR, whats ...string) ([]int64, error) {
	vals, err := s.rdb.HMGet(ctx, postedKey(pr), whats...).Result()
	if err != nil {
		return nil, fmt.Errorf("store: posted %s: %w", pr, err)
	}
	out := make([]int64, len(whats))
	for i, v := range vals {
		if str, ok := v.(string); ok {
			if out[i], err = strconv.ParseInt(str, 10, 64); err != nil {
				return nil, fmt.Errorf("store: posted %s %s: %w", pr, whats[i], err)
			}
		}
	}
	return out, nil
}

// SetPosted records what was posted, so a retried job never posts twice.
func (s *Store) SetPosted(ctx context.Context, pr jobs.PR, what string, id int64) error {
	return s.SetPostedEach(ctx, pr, []string{what}, []int64{id})
}

// SetPostedEach is SetPosted of several things (whats[i] recorded as
// ids[i]), in one write.
func (s *Store) SetPostedEach(ctx context.Context, pr jobs.PR, whats []string, ids []int64) error {
	if len(whats) != len(ids) || len(whats) == 0 {
		return fmt.Errorf("store: set posted %s: %d names for %d ids", pr, len(whats), len(ids))
	}
	args := make([]any, 0, 2*len(whats))
	for i, w := range whats {
		args = append(args, w, ids[i])
	}
	pipe := s.rdb.Pipeline()
	pipe.HSet(ctx, postedKey(pr), args...)
	pipe.Expire(ctx, postedKey(pr), s.RunTTL)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("store: set posted %s %v: %w", pr, whats, err)
	}
	return nil
}

// findingField prefixes a posted finding's key in the posted hash.
const findingField = "finding:"

// MaxPostedFindings bounds the findings recorded per pull request; past
// it, later ones are posted but not remembered (a review of a pull request
// that large repeats rather than loses a finding).
const MaxPostedFindings = 5000

// PostedFinding is a finding posted on a pull request and still open.
type PostedFinding struct {
	// What is the review it was posted in ("review:<head><round>").
	What string `json:"what"`
	Path string `json:"path"`
	// Lines is the content of the lines it is about, as Comment.Lines
	// of review.Comment had it, joined by newlines.
	Lines string `json:"lines"`
}

// PostedFindings returns the findings posted on the pull request and
// still open, by key.
func (s *Store) PostedFindings(ctx context.Context, pr jobs.PR) (map[string]PostedFinding, error) {
	out := map[string]PostedFinding{}
	iter := s.rdb.HScan(ctx, postedKey(pr), 0, findingField+"*", 500).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		if !iter.Next(ctx) {
			break
		}
		var f PostedFinding
		if json.Unmarshal([]byte(iter.Val()), &f) != nil {
			continue // not ours to read: never posted again, never resolved
		}
		out[strings.TrimPrefix(k, findingField)] = f
	}
	if err := iter.Err(); err != nil {
		return nil, fmt.Errorf("store: posted findings %s: %w", pr, err)
	}
	return out, nil
}

// AddPostedFindings records findings posted, by key. A finding recorded
// already keeps the review it was first posted in.
func (s *Store) AddPostedFindings(ctx context.Context, pr jobs.PR, fs map[string]PostedFinding) error {
	if err := addFindings(ctx, s, postedKey(pr), findingField, fs); err != nil {
		return fmt.Errorf("store: add posted findings %s: %w", pr, err)
	}
	return nil
}

// addFindings sets fs in the hash at key, each under prefix+its key, a
// field there already kept as it is, the hash at most MaxPostedFindings
// fields and kept RunTTL.
func addFindings[T any](ctx context.Context, s *Store, key, prefix string, fs map[string]T) error {
	if len(fs) == 0 {
		return nil
	}
	n, err := s.rdb.HLen(ctx, key).Result()
	if err != nil {
		return err
	}
	room := MaxPostedFindings - int(n)
	// a pipeline, not a MULTI (see Store): each HSETNX stands alone, and
	// a retry of the caller records what a lost connection left out
	pipe := s.rdb.Pipeline()
	for _, k := range slices.Sorted(maps.Keys(fs)) {
		if room <= 0 {
			break
		}
		room--
		b, _ := json.Marshal(fs[k])
		pipe.HSetNX(ctx, key, prefix+k, b)
	}
	pipe.Expire(ctx, key, s.RunTTL)
	_, err = pipe.Exec(ctx)
	return err
}

// ClosePostedFinding forgets a posted finding: its thread was resolved.
func (s *Store) ClosePostedFinding(ctx context.Context, pr jobs.PR, key string) error {
	if err := s.rdb.HDel(ctx, postedKey(pr), findingField+key).Err(); err != nil {
		return fmt.Errorf("store: close posted finding %s: %w", pr, err)
	}
	return nil
}

// SetTaskIDs records the task ids a head's plan created (for cancelling).
func (s *Store) SetTaskIDs(ctx context.Context, pr jobs.PR, head string, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	pipe := s.rdb.Pipeline()
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	pipe.RPush(ctx, tasksKey(pr, head), args...)
	pipe.Expire(ctx, tasksKey(pr, head), s.RunTTL)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("store: task ids %s: %w", pr, err)
	}
	return nil
}

// TaskIDs returns the task ids of a head's plan.
func (s *Store) TaskIDs(ctx context.Context, pr jobs.PR, head string) ([]string, error) {
	ids, err := s.rdb.LRange(ctx, tasksKey(pr, head), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("store: task ids %s: %w", pr, err)
	}
	return ids, nil
}

// ActiveRuns returns the runs in progress, oldest first, at most limit.
func (s *Store) ActiveRuns(ctx context.Context, limit int64) ([]Run, error) {
	return s.ActiveRunsFrom(ctx, 0, limit)
}

// ActiveRunsFrom returns up to limit runs in progress, oldest first,
// from position start of the active index (for paging through it).
func (s *Store) ActiveRunsFrom(ctx context.Context, start, limit int64) ([]Run, error) {
	members, err := s.rdb.ZRange(ctx, activeIndex, start, start+limit-1).Result()
	if err != nil {
		return nil, fmt.Errorf("store: active runs: %w", err)
	}
	var out []Run
	for _, m := range members {
		var pr jobs.PR
		if json.Unmarshal([]byte(m), &pr) != nil {
			continue
		}
		r, err := s.GetRun(ctx, pr)
		if errors.Is(err, ErrNotFound) {
			s.rdb.ZRem(ctx, activeIndex, m)
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// SetDraft keeps a reply written but not yet posted, so a retry posts it
// without asking the LLM again.
func (s *Store) SetDraft(ctx context.Context, pr jobs.PR, what, text string) error {
	pipe := s.rdb.Pipeline()
	pipe.HSet(ctx, postedKey(pr), "draft:"+what, text)
	pipe.Expire(ctx, postedKey(pr), s.RunTTL)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("store: set draft %s: %w", pr, err)
	}
	return nil
}

// PostedDraft returns the GitHub id recorded under what (0 when none)
// and the reply kept for it (SetDraft; "" when none), in one read.
func (s *Store) PostedDraft(ctx context.Context, pr jobs.PR, what string) (id int64, draft string, err error) {
	vals, err := s.rdb.HMGet(ctx, postedKey(pr), what, "draft:"+what).Result()
	if err != nil {
		return 0, "", fmt.Errorf("store: posted draft %s %s: %w", pr, what, err)
	}
	if v, ok := vals[0].(string); ok {
		if id, err = strconv.ParseInt(v, 10, 64); err != nil {
			return 0, "", fmt.Errorf("store: posted %s %s: %w", pr, what, err)
		}
	}
	draft, _ = vals[1].(string)
	return id, draft, nil
}

// Draft returns a kept reply ("" when none).
func (s *Store) Draft(ctx context.Context, pr jobs.PR, what string) (string, error) {
	v, err := s.rdb.HGet(ctx, postedKey(pr), "draft:"+what).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("store: draft %s: %w", pr, err)
	}
	return v, nil
}

func threadKey(root int64) string { return "prq:thread:" + strconv.FormatInt(root, 10) }

// MarkThread records a review thread the App replied in (by its root
// comment id), so later replies in it talk to the App without a mention.
func (s *Store) MarkThread(ctx context.Context, root int64) error {
	if err := s.rdb.Set(ctx, threadKey(root), 1, s.RunTTL).Err(); err != nil {
		return fmt.Errorf("store: mark thread %d: %w", root, err)
	}
	return nil
}

// AppThread reports whether the App replied in the thread of root.
func (s *Store) AppThread(ctx context.Context, root int64) (bool, error) {
	n, err := s.rdb.Exists(ctx, threadKey(root)).Result()
	if err != nil {
		return false, fmt.Errorf("store: thread %d: %w", root, err)
	}
	return n == 1, nil
}

// Throttle reports whether an action paced to once per every may run now
// for a pull request, across processes: the first caller in each period
// gets true.
func (s *Store) Throttle(ctx context.Context, pr jobs.PR, what string, every time.Duration) (bool, error) {
	ok, err := s.rdb.SetNX(ctx, prTag(pr)+":throttle:"+what, 1, every).Result()
	if err != nil {
		return false, fmt.Errorf("store: throttle %s %s: %w", pr, what, err)
	}
	return ok, nil
}
