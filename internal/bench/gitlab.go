package bench

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/prq-dev/prq/fake/corpus"
	"github.com/prq-dev/prq/fake/fakegitlab"
	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/internal/harness"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/workers"
)

// Events of a GitLab tenant's merge request: its Merge Request Hook and
// a Note Hook, built when sent (the fake GitLab makes their payloads).
const (
	eventGitLabOpen = "gitlab_open"
	eventGitLabNote = "gitlab_note"
)

// gitlabOrder is the order in which --gitlab-tenants moves the default
// workload's tenants to GitLab: a paid, a trial and a free one first,
// never tenant 1 (the one with very large PRs).
var gitlabOrder = []int64{4, 8, 2, 5, 9, 3, 6, 10, 7}

// moveToGitLab makes the first n tenants of gitlabOrder GitLab groups:
// their tenant id becomes jobs.GitLabTenant of their number, their tier
// stays.
func moveToGitLab(w *benchWorkload, n int) {
	for _, k := range gitlabOrder[:n] {
		id, _ := jobs.GitLabTenant(k)
		w.tiers[id] = w.tiers[k]
		delete(w.tiers, k)
		for i, inst := range w.insts {
			if inst == k {
				w.insts[i] = id
			}
		}
	}
}

// glBot is the bench groups' access token bot.
const glBot = "group_1_bot_bench"

// gitlabBench is a bench run's GitLab: a fake GitLab serving the GitLab
// tenants' merge requests, its webhooks sent to /webhook/gitlab.
type gitlabBench struct {
	fake      *fakegitlab.Server
	stop      func()
	hookToken string
	token     string
}

// glProject is a GitLab merge request's project: gl-tenant-<k>/<name>.
func glProject(pr jobs.PR) string { return pr.Owner + "/" + pr.Repo }

// glOwner is a GitLab tenant's group.
func glOwner(tenant int64) string {
	return fmt.Sprintf("gl-tenant-%d", tenant-jobs.GitLabTenantBase)
}

// startGitLabBench serves a fake GitLab with the workload's GitLab merge
// requests and configures cfg's GitLab tenants (nil when it has none).
func startGitLabBench(cfg *config.Config, w benchWorkload) (*gitlabBench, error) {
	var tenants []int64
	for inst := range w.tiers {
		if jobs.ForgeOf(inst) == jobs.ForgeGitLab {
			tenants = append(tenants, inst)
		}
	}
	if len(tenants) == 0 {
		return nil, nil
	}
	g := &gitlabBench{fake: fakegitlab.New(fakegitlab.Config{}), hookToken: harness.RandomHex(32), token: "glpat-" + harness.RandomHex(20)}
	g.fake.AddToken(g.token, glBot)
	url, stop, err := harness.ListenServe(g.fake)
	if err != nil {
		return nil, err
	}
	g.stop = stop
	cfg.GitLab = config.GitLabConfig{URL: url, WebhookToken: config.Secret(g.hookToken)}
	for _, inst := range tenants {
		cfg.GitLab.Tenants = append(cfg.GitLab.Tenants, config.GitLabTenantConfig{ID: inst - jobs.GitLabTenantBase, Path: glOwner(inst),
			Token: config.Secret(g.token), Tier: string(w.tiers[inst])})
	}
	projects := map[string]bool{}
	for _, e := range w.events {
		if e.event != eventGitLabOpen {
			continue
		}
		p := prOf(w, e.pr.Number)
		if project := glProject(e.pr); !projects[project] {
			g.fake.AddProject(project, "main", p.BaseSHA, nil)
			projects[project] = true
		}
		if err := g.fake.AddMR(glProject(e.pr), e.pr.Number, "dev", p); err != nil {
			stop()
			return nil, err
		}
	}
	return g, nil
}

func prOf(w benchWorkload, number int) corpus.PR {
	for _, p := range w.prs {
		if p.Number == number {
			return p
		}
	}
	return corpus.PR{}
}

// workerConfig is the gitlab section of the workers' configuration file
// (config.Secret marshals redacted: the tokens are written as text).
func (g *gitlabBench) workerConfig(cfg config.GitLabConfig) map[string]any {
	var ts []map[string]any
	for _, t := range cfg.Tenants {
		ts = append(ts, map[string]any{"id": t.ID, "path": t.Path, "token": string(t.Token), "tier": t.Tier})
	}
	return map[string]any{"url": cfg.URL, "webhook_token": string(cfg.WebhookToken), "tenants": ts}
}

// send delivers a GitLab event of the workload to the receiver at url
// and returns its status.
func (g *gitlabBench) send(ctx context.Context, url string, e benchEvent) (int, error) {
	var body []byte
	var err error
	event := fakegitlab.EventMergeRequest
	switch e.event {
	case eventGitLabOpen:
		body, err = g.fake.MergeRequestHook(glProject(e.pr), e.pr.Number, "open", "")
	case eventGitLabNote:
		event = fakegitlab.EventNote
		id := g.fake.AddNote(glProject(e.pr), e.pr.Number, "dev", "@prq-bench is this change safe?")
		body, err = g.fake.NoteHook(glProject(e.pr), e.pr.Number, id)
	}
	if err != nil {
		return 0, err
	}
	r, err := fakegitlab.Delivery(url, g.hookToken, event, "", body)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(r.WithContext(ctx))
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// notes returns when a GitLab merge request's summary note was created
// (zero: none yet) and when each answer was, oldest first.
func (g *gitlabBench) notes(pr jobs.PR) (summary time.Time, replies []time.Time) {
	for _, n := range g.fake.Notes(glProject(pr), pr.Number) {
		switch {
		case n.Author != glBot:
		case strings.Contains(n.Body, workers.SummaryMarker) && summary.IsZero():
			summary = n.Created
		case strings.Contains(n.Body, "<!-- prq:reply to="):
			replies = append(replies, n.Created)
		}
	}
	return summary, replies
}

// progress is a GitLab merge request's summary notes and answers.
func (g *gitlabBench) progress(pr jobs.PR) (summaries, replies int) {
	for _, n := range g.fake.Notes(glProject(pr), pr.Number) {
		switch {
		case n.Author != glBot:
		case strings.Contains(n.Body, workers.SummaryMarker):
			summaries++
		case strings.Contains(n.Body, "<!-- prq:reply to="):
			replies++
		}
	}
	return summaries, replies
}
