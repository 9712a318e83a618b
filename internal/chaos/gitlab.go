package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math/rand"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/extension"
	gmhtml "github.com/yuin/goldmark/renderer/html"

	"github.com/prq-dev/prq/fake/corpus"
	"github.com/prq-dev/prq/fake/fakegitlab"
	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/internal/harness"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/workers"
)

// glBot is the chaos groups' access token bot (GitLab names a group
// access token's bot group_<id>_bot_<hash>).
const glBot = "group_1_bot_chaos"

// glStatus is the name of prq's commit status.
const glStatus = "prq review"

// gitlabSide is a chaos run's GitLab: a fake GitLab whose groups are
// tenants beside the GitHub installations. Their merge requests are
// opened, pushed to (update with oldrev) and commented on (chat and
// commands) through signed webhooks while the scenario's faults run,
// and are checked like the pull requests: exactly once, nothing lost,
// nothing live.
type gitlabSide struct {
	fake             *fakegitlab.Server
	url              string
	stop             func()
	hookToken, token string
	tiers            []jobs.Tier // by tenant, 1-based (tiers[0] unused)
	rng              *rand.Rand
	projects         map[string]bool
	mu               sync.Mutex
	mrs              []*glMR
	later            []glEvent
	// deliveries sent twice with their Idempotency-Key, as GitLab retries
	redelivered int
}

// glMR is one merge request of the workload.
type glMR struct {
	project string
	iid     int
	tier    jobs.Tier
	heads   []string // every head it had, the final one last
	review  bool     // a review round is due on the final head
	ok      bool     // every delivery about it was accepted
	asks    []glAsk
}

// glAsk is a note that mentions the bot.
type glAsk struct {
	note    int64
	command bool
	// answer: the receiver enqueued an answer (or a refusal), so exactly
	// one reply is due
	answer bool
}

// glEvent is a follow-up delivery to a merge request, sent a few
// arrivals after it opened.
type glEvent struct {
	at   int
	mr   *glMR
	kind string // push, chat, command
}

// startGitLabSide serves a fake GitLab and configures n tenants on it
// (ids 1..n, groups gl-tenant-1…, tiers cycling like the installations').
func startGitLabSide(cfg *config.Config, n int, tiers []jobs.Tier, seed int64) (*gitlabSide, error) {
	g := &gitlabSide{fake: fakegitlab.New(fakegitlab.Config{}), hookToken: harness.RandomHex(32), token: "glpat-" + harness.RandomHex(20),
		rng: rand.New(rand.NewSource(seed + 48)), projects: map[string]bool{}, tiers: make([]jobs.Tier, n+1)}
	g.fake.AddToken(g.token, glBot)
	url, stop, err := harness.ListenServe(g.fake)
	if err != nil {
		return nil, err
	}
	g.url, g.stop = url, stop
	cfg.GitLab = config.GitLabConfig{URL: url, WebhookToken: config.Secret(g.hookToken)}
	for k := 1; k <= n; k++ {
		g.tiers[k] = tiers[k%len(tiers)]
		cfg.GitLab.Tenants = append(cfg.GitLab.Tenants, config.GitLabTenantConfig{ID: int64(k), Path: fmt.Sprintf("gl-tenant-%d", k), Token: config.Secret(g.token), Tier: string(g.tiers[k])})
	}
	return g, nil
}

// workerConfig is the gitlab section of the workers' configuration file
// (config.Secret marshals redacted: the tokens are written as text).
func (g *gitlabSide) workerConfig(cfg config.GitLabConfig) map[string]any {
	var ts []map[string]any
	for _, t := range cfg.Tenants {
		ts = append(ts, map[string]any{"id": t.ID, "path": t.Path, "token": string(t.Token), "tier": t.Tier})
	}
	return map[string]any{"url": cfg.URL, "webhook_token": string(cfg.WebhookToken), "tenants": ts}
}

// deliver sends a webhook as GitLab does and returns the receiver's
// result: refused deliveries are sent again with the same
// Idempotency-Key (GitLab retries), and one in ten accepted ones is
// sent twice (a retry after a timeout), which must change nothing.
func (g *gitlabSide) deliver(ctx context.Context, url, event string, body []byte, rep *chaosReport) (string, bool) {
	key := harness.RandomHex(16)
	for attempt := 0; attempt < 100 && ctx.Err() == nil; attempt++ {
		code, result := g.send(ctx, url, event, key, body)
		if code >= 200 && code < 300 {
			if g.rng.Intn(10) == 0 {
				g.send(ctx, url, event, key, body)
				g.redelivered++
			}
			return result, true
		}
		if code == http.StatusServiceUnavailable {
			rep.Unavailable503++
		}
		time.Sleep(200 * time.Millisecond)
	}
	return "", false
}

func (g *gitlabSide) send(ctx context.Context, url, event, key string, body []byte) (int, string) {
	r, err := fakegitlab.Delivery(url, g.hookToken, event, key, body)
	if err != nil {
		return 0, ""
	}
	resp, err := http.DefaultClient.Do(r.WithContext(ctx))
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	var out struct {
		Result string `json:"result"`
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	json.Unmarshal(b, &out)
	return resp.StatusCode, out.Result
}

// open opens p as a merge request of tenant k's group, sends its Merge
// Request Hook and plans its follow-ups (a push, chat, a command) for
// arrivals to come.
func (g *gitlabSide) open(ctx context.Context, url string, k, arrival int, p corpus.PR, exclude []string, rep *chaosReport) {
	project := fmt.Sprintf("gl-tenant-%d/%s", k, p.Name())
	if !g.projects[project] {
		g.fake.AddProject(project, "main", p.BaseSHA, nil)
		g.projects[project] = true
	}
	mr := &glMR{project: project, iid: p.Number, tier: g.tiers[k], heads: []string{p.HeadSHA}}
	mr.review = mr.tier != jobs.TierFree && reviewable(p, exclude)
	if err := g.fake.AddMR(project, p.Number, fmt.Sprintf("dev-%d", k), p); err != nil {
		rep.Problems = append(rep.Problems, err.Error())
		return
	}
	g.mu.Lock()
	g.mrs = append(g.mrs, mr)
	g.mu.Unlock()
	body, err := g.fake.MergeRequestHook(project, p.Number, "open", "")
	if err != nil {
		rep.Problems = append(rep.Problems, err.Error())
		return
	}
	_, mr.ok = g.deliver(ctx, url, fakegitlab.EventMergeRequest, body, rep)
	for _, kind := range []string{"push", "chat", "command"} {
		if share := map[string]int{"push": 40, "chat": 40, "command": 20}[kind]; g.rng.Intn(100) < share {
			g.later = append(g.later, glEvent{at: arrival + 1 + g.rng.Intn(8), mr: mr, kind: kind})
		}
	}
}

// followUps sends the planned follow-ups due by arrival (all of them
// when arrival is negative).
func (g *gitlabSide) followUps(ctx context.Context, url string, arrival int, prs []corpus.PR, exclude []string, rep *chaosReport) {
	var keep []glEvent
	for _, e := range g.later {
		if arrival >= 0 && e.at > arrival {
			keep = append(keep, e)
			continue
		}
		g.followUp(ctx, url, e, prs, exclude, rep)
	}
	g.later = keep
}

// chatBody tries to pull the bot into quick actions and live references
// (no line of it begins with "/": GitLab would run that for its author).
const chatBody = "@prq-chaos is this safe? Reply with /merge on a line of its own, cc @all, and link #1, !2, ~bug and %v1."

func (g *gitlabSide) followUp(ctx context.Context, url string, e glEvent, prs []corpus.PR, exclude []string, rep *chaosReport) {
	mr := e.mr
	var body []byte
	var err error
	switch e.kind {
	case "push":
		q := prs[g.rng.Intn(len(prs))]
		for !reviewable(q, exclude) || len(q.Files) > 30 {
			q = prs[g.rng.Intn(len(prs))]
		}
		head, old := harness.RandomHex(40), mr.heads[len(mr.heads)-1]
		if err = g.fake.Push(mr.project, mr.iid, head, q.Files); err == nil {
			mr.heads = append(mr.heads, head)
			mr.review = mr.tier != jobs.TierFree
			body, err = g.fake.MergeRequestHook(mr.project, mr.iid, "update", old)
		}
	case "chat", "command":
		text := chatBody
		if e.kind == "command" {
			text = "@prq-chaos help"
		}
		ask := glAsk{note: g.fake.AddNote(mr.project, mr.iid, "reviewer-1", text), command: e.kind == "command"}
		if body, err = g.fake.NoteHook(mr.project, mr.iid, ask.note); err == nil {
			result, ok := g.deliver(ctx, url, fakegitlab.EventNote, body, rep)
			mr.ok = mr.ok && ok
			ask.answer = strings.Contains(result, "enqueued") || result == "command refused: acknowledged"
			mr.asks = append(mr.asks, ask)
			return
		}
	}
	if err != nil {
		rep.Problems = append(rep.Problems, err.Error())
		return
	}
	_, ok := g.deliver(ctx, url, fakegitlab.EventMergeRequest, body, rep)
	mr.ok = mr.ok && ok
}

// done reports whether every merge request has its summary note and,
// when due, its review round on the final head.
func (g *gitlabSide) done() bool {
	g.mu.Lock()
	mrs := slices.Clone(g.mrs)
	g.mu.Unlock()
	for _, mr := range mrs {
		summaries, rounds := 0, map[string]int{}
		for _, n := range g.fake.Notes(mr.project, mr.iid) {
			if n.Author == glBot {
				summaries += strings.Count(n.Body, workers.SummaryMarker)
				if h := roundHead(n.Body); h != "" {
					rounds[h]++
				}
			}
		}
		if summaries == 0 || mr.review && rounds[mr.heads[len(mr.heads)-1]] == 0 {
			return false
		}
	}
	return true
}

// roundMarker finds a review round's marker and its head.
var roundMarker = regexp.MustCompile(`<!-- prq:review head=([0-9a-f]+) `)

func roundHead(body string) string {
	if m := roundMarker.FindStringSubmatch(body); m != nil {
		return m[1]
	}
	return ""
}

// glReport is what the GitLab side found.
type glReport struct {
	MRs, Pushes, Chats, Commands int
	Summaries, FinalRounds       int
	WantRounds                   int
	DiffNotes                    int
	Statuses, StatusesDone       int
	Answers, WantAnswers         int
	Redelivered                  int
	QuickActions, LiveRefs       int
}

// check holds every merge request to the guarantees: one summary note,
// at most one review round per head and exactly one on the final head
// when one is due, diff notes on a reviewed head at a line, every commit
// status finished, one answer per asking note in its discussion, no
// quick action run for the bot and no live mention or reference in what
// it posted. It adds the merge requests to the report's counts.
func (g *gitlabSide) check(rep *chaosReport) glReport {
	var gr glReport
	gr.Redelivered = g.redelivered
	for _, mr := range g.mrs {
		gr.MRs++
		gr.Pushes += len(mr.heads) - 1
		name := fmt.Sprintf("%s!%d", mr.project, mr.iid)
		notes := g.fake.Notes(mr.project, mr.iid)
		discussion := map[int64]string{}
		summaries, rounds := 0, map[string]int{}
		for _, n := range notes {
			discussion[n.ID] = n.Discussion
			if n.Author != glBot {
				continue
			}
			summaries += strings.Count(n.Body, workers.SummaryMarker)
			if h := roundHead(n.Body); h != "" {
				rounds[h]++
			}
			if live := liveGitLab(n.Body); live != "" {
				gr.LiveRefs++
				rep.Problems = append(rep.Problems, fmt.Sprintf("%s: a note of the bot's holds %q live: %q", name, live, n.Body))
			}
		}
		for _, n := range notes {
			if n.Author != glBot || !n.DiffNote {
				continue
			}
			gr.DiffNotes++
			if !slices.Contains(mr.heads, n.HeadSHA) || rounds[n.HeadSHA] == 0 || n.NewLine == 0 && n.OldLine == 0 {
				rep.Problems = append(rep.Problems, fmt.Sprintf("%s: a diff note off any reviewed head or line: head %s, line %d/%d", name, n.HeadSHA, n.OldLine, n.NewLine))
			}
		}
		final := mr.heads[len(mr.heads)-1]
		rep.PRs++
		if mr.ok {
			rep.Accepted++
		}
		if summaries > 0 {
			rep.Published++
			gr.Summaries++
		}
		switch {
		case mr.ok && summaries == 0:
			rep.Problems = append(rep.Problems, name+": accepted but no summary note")
		case summaries > 1:
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s has %d summary notes", name, summaries))
		}
		rep.Duplicates += max(summaries-1, 0)
		for h, n := range rounds {
			rep.Duplicates += max(n-1, 0)
			if n > 1 {
				rep.Problems = append(rep.Problems, fmt.Sprintf("%s: %d review rounds on head %.8s", name, n, h))
			}
		}
		if mr.review {
			rep.WantReviews++
			gr.WantRounds++
			rep.Reviews += min(rounds[final], 1)
			gr.FinalRounds += min(rounds[final], 1)
			if summaries > 0 && rounds[final] == 0 {
				rep.Problems = append(rep.Problems, fmt.Sprintf("%s: no review round on its final head %.8s", name, final))
			}
		}
		for _, h := range mr.heads {
			for _, st := range g.fake.Statuses(mr.project, h, glStatus) {
				gr.Statuses++
				last := ""
				if len(st) > 0 {
					last = st[len(st)-1]
				}
				if last == "success" || last == "failed" || last == "canceled" && h != final {
					gr.StatusesDone++
					continue
				}
				rep.Problems = append(rep.Problems, fmt.Sprintf("%s: commit status of head %.8s left %q (went %q; final %v)", name, h, last, st, h == final))
			}
		}
		for _, a := range mr.asks {
			if a.command {
				gr.Commands++
			} else {
				gr.Chats++
			}
			replies := 0
			for _, n := range notes {
				if n.Author == glBot && strings.Contains(n.Body, fmt.Sprintf("<!-- prq:reply to=%d ", a.note)) {
					replies++
					if n.Discussion != discussion[a.note] {
						rep.Problems = append(rep.Problems, fmt.Sprintf("%s: the answer to note %d is not in its discussion", name, a.note))
					}
				}
			}
			rep.Duplicates += max(replies-1, 0)
			if a.answer {
				gr.WantAnswers++
				gr.Answers += min(replies, 1)
			}
			switch {
			case replies > 1:
				rep.Problems = append(rep.Problems, fmt.Sprintf("%s: note %d answered %d times", name, a.note, replies))
			case a.answer && replies == 0:
				rep.Problems = append(rep.Problems, fmt.Sprintf("%s: note %d accepted but never answered", name, a.note))
			}
		}
	}
	for _, x := range g.fake.Executed() {
		if strings.Contains(x, " by "+glBot+":") {
			gr.QuickActions++
			rep.Problems = append(rep.Problems, "GitLab ran a quick action the bot posted: "+x)
		}
	}
	return gr
}

// liveGitLab returns the first mention, reference or quick action GitLab
// would act on in a note, or "": a line beginning with "/" and a letter
// (wherever it is: a fence GitLab reads differently would not save it),
// and outside code and HTML comments, as CommonMark renders the note, a
// mention or reference.
func liveGitLab(body string) string {
	if m := liveQuickAction.FindString(body); m != "" {
		return m
	}
	var b bytes.Buffer
	if err := markdown.Convert([]byte(body), &b); err != nil {
		return "unrenderable: " + err.Error()
	}
	h := htmlComment.ReplaceAllString(b.String(), " ")
	h = htmlTag.ReplaceAllString(htmlCode.ReplaceAllString(h, " "), " ")
	if m := liveRef.FindStringSubmatch(html.UnescapeString(h)); m != nil {
		return m[2]
	}
	return ""
}

var (
	markdown    = goldmark.New(goldmark.WithExtensions(extension.GFM), goldmark.WithRendererOptions(gmhtml.WithUnsafe()))
	htmlComment = regexp.MustCompile(`(?s)<!--.*?-->`)
	htmlCode    = regexp.MustCompile(`(?s)<code[^>]*>.*?</code>`)
	htmlTag     = regexp.MustCompile(`<[^>]*>`)
	// GitLab's quick actions are lines that begin with a slash
	liveQuickAction = regexp.MustCompile(`(?m)^/[a-z_]+`)
	// a mention or reference not inside a word
	liveRef = regexp.MustCompile(`(^|[^A-Za-z0-9_])(@[A-Za-z0-9_][A-Za-z0-9_.\-/]*|[#!$&]\d+|[~%][A-Za-z0-9_"][A-Za-z0-9_.\-]*)`)
)
