// Package jobs is the bottom of prq: task type names, payload structs,
// deterministic task ids, queue names with their priorities, the hold of
// admission-bound tasks, and the rules that map tiers and job kinds to
// queues. It imports nothing of prq's own, so every other package can pass
// its values around. It does not enqueue, run or admit anything: asynq,
// workers and admission do.
package jobs

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Task type names, namespaced with a colon as asynq recommends.
const (
	TypePlan     = "pr:plan"
	TypeFinalize = "pr:finalize"
	TypeSummary  = "file:summary"
	TypeReview   = "file:review"
	TypeChat     = "chat:reply"
	TypeCommand  = "pr:command"
)

// Queue names. LLM jobs wait in their tier's queue; chat has its own.
const (
	QueueChat  = "chat"
	QueuePaid  = "paid"
	QueueTrial = "trial"
	QueueFree  = "free"
)

// QueuePriorities are the asynq queue weights (asynq.Config.Queues),
// served in strict order: chat first, then paid, trial, free.
var QueuePriorities = map[string]int{QueueChat: 8, QueuePaid: 4, QueueTrial: 2, QueueFree: 1}

// Hold is how far in the future an LLM task is scheduled while it waits
// for admission: never due by itself, so only admission releases it.
// Admission's reconciler treats a scheduled task due later than Hold/2
// from now as held, so every writer of held tasks must use this one value.
const Hold = 10 * 365 * 24 * time.Hour

// Tier is an installation's plan tier; each tier has its own queue.
type Tier string

// The tiers prq knows.
const (
	TierPaid  Tier = "paid"
	TierTrial Tier = "trial"
	TierFree  Tier = "free"
)

// Tiers lists the batch tiers from highest to lowest class.
var Tiers = []Tier{TierPaid, TierTrial, TierFree}

// ParseTier returns the tier named s or an error naming the accepted forms.
func ParseTier(s string) (Tier, error) {
	switch t := Tier(strings.ToLower(strings.TrimSpace(s))); t {
	case TierPaid, TierTrial, TierFree:
		return t, nil
	}
	return "", fmt.Errorf("unknown tier %q (want paid, trial or free)", s)
}

// Queue returns the asynq queue of the tier.
func (t Tier) Queue() string { return string(t) }

// Queues lists every queue prq's workers serve, chat first.
var Queues = []string{QueueChat, QueuePaid, QueueTrial, QueueFree}

// Kind is what an LLM job does; quotas and models are set per kind.
type Kind string

// Job kinds ("agents" in quota terms).
const (
	KindSummary Kind = "summary"
	KindReview  Kind = "review"
	KindChat    Kind = "chat"
)

// PR identifies a pull request of an installation.
type PR struct {
	Installation int64  `json:"installation"`
	Owner        string `json:"owner"`
	Repo         string `json:"repo"`
	Number       int    `json:"number"`
}

// String formats the PR as owner/repo#number, a GitLab merge request as
// GitLab writes one: group/project!number.
func (p PR) String() string {
	if p.Forge() == ForgeGitLab {
		return fmt.Sprintf("%s/%s!%d", p.Owner, p.Repo, p.Number)
	}
	return fmt.Sprintf("%s/%s#%d", p.Owner, p.Repo, p.Number)
}

// Key is a compact identifier safe for Redis keys and asynq task ids:
// it contains no braces, colons or spaces, and distinct pull requests
// have distinct keys (characters other than letters, digits, '-' and '_'
// are escaped as %XX, never replaced).
func (p PR) Key() string {
	return fmt.Sprintf("%d.%s.%s.%d", p.Installation, safe(p.Owner), safe(p.Repo), p.Number)
}

// Validate reports whether the PR reference is usable.
func (p PR) Validate() error {
	switch {
	case p.Installation <= 0:
		return fmt.Errorf("pr: installation must be positive, got %d", p.Installation)
	case p.Owner == "" || p.Repo == "":
		return fmt.Errorf("pr: owner and repo are required")
	case p.Number <= 0:
		return fmt.Errorf("pr: number must be positive, got %d", p.Number)
	}
	return nil
}

// safe keeps a name usable inside Redis keys and asynq ids: braces would
// change the cluster hash tag (asynq issue #480), colons and dots our own
// separators.
func safe(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '-' || c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') {
			b.WriteByte(c)
			continue
		}
		// escaped, not replaced: "my.lib" and "my_lib" stay apart
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// Plan asks for a pull request to be planned into per-file jobs.
type Plan struct {
	PR       PR     `json:"pr"`
	HeadSHA  string `json:"head_sha"`
	BaseSHA  string `json:"base_sha,omitempty"`
	Before   string `json:"before,omitempty"` // synchronize: previous head
	Action   string `json:"action"`
	Delivery string `json:"delivery"`
	Tier     Tier   `json:"tier"`
	// Round names a review asked for again at a head reviewed before
	// ("full review"): its results are published anew ("" otherwise).
	Round string `json:"round,omitempty"`
}

// Plan actions a command asks for, beside GitHub's pull_request
// actions: review what changed since the last reviewed head, review
// every file from scratch, resume automatic reviews.
const (
	ActionReview     = "command_review"
	ActionFullReview = "command_full_review"
	ActionResume     = "command_resume"
)

// Commands people give the bot in a comment ("@prq review").
const (
	CommandReview     = "review"
	CommandFullReview = "full review"
	CommandPause      = "pause"
	CommandResume     = "resume"
	CommandIgnore     = "ignore"
	CommandSummary    = "summary"
	CommandStatus     = "status"
	CommandConfig     = "config"
	CommandResolve    = "resolve"
	CommandHelp       = "help"
	// CommandLearn, CommandLearnings and CommandForget take arguments
	// ("@prq learn [--org] <text>", "@prq forget [--org] <n>"): Args.
	CommandLearn     = "learn"
	CommandLearnings = "learnings"
	CommandForget    = "forget"
)

// Commands lists every command, in the order help shows them.
var Commands = []string{CommandReview, CommandFullReview, CommandPause, CommandResume, CommandIgnore, CommandSummary, CommandStatus, CommandConfig, CommandResolve, CommandHelp}

// Command is a command given in a comment: run once per comment.
type Command struct {
	PR        PR     `json:"pr"`
	CommentID int64  `json:"comment_id"`
	Review    bool   `json:"review"` // a diff (review) comment rather than a conversation comment
	Author    string `json:"author"`
	Name      string `json:"name"`
	Delivery  string `json:"delivery"`
	Tier      Tier   `json:"tier"`
	// AuthorID is the author's GitLab user id: GitLab's hook names no
	// role, so the worker asks the members API before learn or forget.
	AuthorID int64 `json:"author_id,omitempty"`
	// Args are what follows a command that takes arguments (learn,
	// forget), as written.
	Args string `json:"args,omitempty"`
	// Path is the file of a diff comment's thread (a learning from it
	// names the file).
	Path string `json:"path,omitempty"`
	// Link is the comment's web address as GitHub sent it (html_url).
	Link string `json:"link,omitempty"`
	// Refused says why the command is not run (the author may not give
	// commands, or is over the chat limits): it is only acknowledged.
	Refused string `json:"refused,omitempty"`
}

// OrgArgs splits a leading --org off a learn or forget command's
// arguments.
func OrgArgs(args string) (org bool, rest string) {
	if r, ok := strings.CutPrefix(strings.TrimSpace(args), "--org"); ok && (r == "" || r[0] == ' ' || r[0] == '\t' || r[0] == '\n') {
		return true, strings.TrimSpace(r)
	}
	return false, strings.TrimSpace(args)
}

// CommandTaskID is the deterministic task id of a comment's command: a
// redelivered comment runs it once.
func CommandTaskID(c Command) string {
	return fmt.Sprintf("cmd-%s-%d", c.PR.Key(), c.CommentID)
}

// RepoSettings are what the webhook needs of a repository's
// configuration (its .prq.yaml), as the planner last read it.
type RepoSettings struct {
	// ChatOff: comments to the bot get no reply (chat: false).
	ChatOff bool `json:"chat_off"`
	// Drafts: draft pull requests are reviewed (reviews.drafts).
	Drafts bool `json:"drafts"`
	// Instructions and Language are the repository's (instructions,
	// language): chat replies carry them as reviews do.
	Instructions string `json:"instructions,omitempty"`
	Language     string `json:"language,omitempty"`
}

// File is a per-file LLM job: a summary or a review of one file of a PR
// at one head commit.
type File struct {
	PR      PR     `json:"pr"`
	HeadSHA string `json:"head_sha"`
	Kind    Kind   `json:"kind"`
	Tier    Tier   `json:"tier"`
	Path    string `json:"path"`
	// Index is the job's position among the plan's jobs of its kind
	// (0..Total-1), which orders admission; the file's position in the
	// plan's stored files travels beside it in the task payload.
	Index    int   `json:"index"`
	Total    int   `json:"total"` // jobs of this kind in the plan
	Estimate int64 `json:"estimate"`
	// EstimateOutput is the output part of Estimate (max_tokens); 0 in
	// payloads planned before it existed (see admission.Ticket.Output).
	EstimateOutput int64  `json:"estimate_output,omitempty"`
	Model          string `json:"model"`
	PRSeq          int64  `json:"pr_seq"` // orders a tenant's PRs, older first
	// Part and Parts split the review of a file too large for one call:
	// part Part (1-based) of Parts, each a group of whole hunks.
	Part  int `json:"part,omitempty"`
	Parts int `json:"parts,omitempty"`
	// Created is when the job was planned (unix ms), for wait figures.
	Created int64 `json:"created,omitempty"`
	// Walkthrough: a summary job of the pull request as a whole (Path
	// empty), whose text opens the summary comment.
	Walkthrough bool `json:"walkthrough,omitempty"`
}

// Finalize asks for a PR's results to be published.
type Finalize struct {
	PR      PR     `json:"pr"`
	HeadSHA string `json:"head_sha"`
	Tier    Tier   `json:"tier"`
	// Run is the run it publishes (its start, unix ms, as File.PRSeq): a
	// finalize of an earlier run of the head (reopened, reviewed again on
	// request) publishes nothing. 0: whichever run is current.
	Run int64 `json:"run,omitempty"`
}

// Chat is a reply to a comment that talks to the bot.
type Chat struct {
	PR        PR     `json:"pr"`
	CommentID int64  `json:"comment_id"`
	InReplyTo int64  `json:"in_reply_to,omitempty"` // review thread root, 0 for conversation comments
	Review    bool   `json:"review"`                // a diff (review) comment rather than a conversation comment
	Author    string `json:"author"`
	Body      string `json:"body"`
	Path      string `json:"path,omitempty"`
	DiffHunk  string `json:"diff_hunk,omitempty"`
	Line      int    `json:"line,omitempty"`
	Delivery  string `json:"delivery"`
	Tier      Tier   `json:"tier"`
	Estimate  int64  `json:"estimate"`
	// EstimateOutput is the output part of Estimate, as File's.
	EstimateOutput int64  `json:"estimate_output,omitempty"`
	Model          string `json:"model"`
	Created        int64  `json:"created,omitempty"` // unix ms
	// Instructions and Language are the repository configuration's, as
	// the pull request's last plan read them: the reply's system message
	// carries them, and its estimate counts them.
	Instructions string `json:"instructions,omitempty"`
	Language     string `json:"language,omitempty"`
	// Refusal asks for the polite "chat limit reached" reply instead of
	// an answer: no LLM call, no admission. RetryAt (unix ms) is when
	// the author may chat again.
	Refusal bool  `json:"refusal,omitempty"`
	RetryAt int64 `json:"retry_at,omitempty"`
	// Thread is the thread the answer marks as prq's when it is not the
	// root comment's id: a GitLab discussion's (webhook.GitLabThread), so
	// that replies in it without a mention are chat too.
	Thread int64 `json:"thread,omitempty"`
}

// IsLLM reports whether a task type calls the LLM and so goes through
// admission.
func IsLLM(typ string) bool {
	return typ == TypeSummary || typ == TypeReview || typ == TypeChat
}

// Marshal encodes a payload; payload structs never fail to encode.
func Marshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("jobs: marshal %T: %v", v, err)) // unreachable: plain structs
	}
	return b
}

// Unmarshal decodes a payload and names the task type in its error.
func Unmarshal(typ string, b []byte, v any) error {
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("jobs: decode %s payload: %w", typ, err)
	}
	return nil
}

// FileTaskID is the deterministic asynq task id of a per-file job. A
// head planned again (reopened, or its base edited) is another run of it
// (PRSeq, the run's start) whose jobs must not collide with the earlier
// run's still in flight, so the run is part of the id.
func FileTaskID(f File) string {
	if f.PRSeq != 0 {
		return fmt.Sprintf("%s-%s-%s-%d-r%s", f.Kind, f.PR.Key(), shortSHA(f.HeadSHA), f.Index, strconv.FormatInt(f.PRSeq, 36))
	}
	return fmt.Sprintf("%s-%s-%s-%d", f.Kind, f.PR.Key(), shortSHA(f.HeadSHA), f.Index)
}

// ChatTaskID is the deterministic asynq task id of a chat reply.
func ChatTaskID(c Chat) string {
	return fmt.Sprintf("chat-%s-%d", c.PR.Key(), c.CommentID)
}

// PlanTaskID is the deterministic task id of a plan: one per delivery.
func PlanTaskID(p Plan) string {
	return fmt.Sprintf("plan-%s-%s", p.PR.Key(), safe(p.Delivery))
}

// FinalizeTaskID is the deterministic task id of a finalize job.
func FinalizeTaskID(f Finalize) string {
	if f.Run != 0 {
		return fmt.Sprintf("final-%s-%s-r%s", f.PR.Key(), shortSHA(f.HeadSHA), strconv.FormatInt(f.Run, 36))
	}
	return fmt.Sprintf("final-%s-%s", f.PR.Key(), shortSHA(f.HeadSHA))
}

func shortSHA(s string) string {
	s = safe(s)
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

// Forges prq reviews on. A tenant (jobs.PR.Installation) belongs to
// exactly one: GitHub installations keep their own ids, GitLab tenants
// are numbered from GitLabTenantBase up, so every tenant-keyed record
// (tiers, quotas, runs, Redis keys, metrics) tells them apart without a
// change to GitHub's.
const (
	ForgeGitHub = "github"
	ForgeGitLab = "gitlab"
)

// GitLabTenantBase is the first GitLab tenant id: 2^52, far above any
// GitHub installation id, and still exact in a float64 (JSON readers).
const GitLabTenantBase int64 = 1 << 52

// GitLabTenant returns the tenant id of a GitLab group or project by its
// GitLab id (a top-level group's or a project's, as the operator
// configures it).
func GitLabTenant(id int64) (int64, error) {
	if id <= 0 || id >= GitLabTenantBase {
		return 0, fmt.Errorf("gitlab tenant: id must be in 1..%d, got %d", GitLabTenantBase-1, id)
	}
	return GitLabTenantBase + id, nil
}

// ForgeOf returns the forge a tenant id belongs to.
func ForgeOf(tenant int64) string {
	if tenant > GitLabTenantBase {
		return ForgeGitLab
	}
	return ForgeGitHub
}

// Forge returns the forge of the pull request's tenant.
func (p PR) Forge() string { return ForgeOf(p.Installation) }
