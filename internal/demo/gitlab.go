package demo

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prq-dev/prq/fake/corpus"
	"github.com/prq-dev/prq/fake/fakegitlab"
	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/internal/harness"
	"github.com/prq-dev/prq/workers"
)

// gitlabSide is the demo's GitLab: a fake GitLab whose groups are
// tenants beside the GitHub installations, their merge requests opened
// by the same generator and reviewed by the same workers.
type gitlabSide struct {
	fake      *fakegitlab.Server
	srv       *http.Server
	hookToken string
	tenants   int
	mu        sync.Mutex
	projects  map[string]bool
	opened    []string // "project!iid"
}

// glBot is the demo groups' access token bot.
const glBot = "group_1_bot_demo"

// startGitLab serves a fake GitLab and configures its tenants: groups
// group-1…group-n, on the paid tier.
func startGitLab(cfg *config.Config, tenants int) (*gitlabSide, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("demo: fake gitlab: %w", err)
	}
	g := &gitlabSide{fake: fakegitlab.New(fakegitlab.Config{}), hookToken: harness.RandomHex(32), tenants: tenants, projects: map[string]bool{}}
	token := "glpat-" + harness.RandomHex(20)
	g.fake.AddToken(token, glBot)
	g.srv = &http.Server{Handler: g.fake, ReadHeaderTimeout: 10 * time.Second}
	go g.srv.Serve(ln)
	cfg.GitLab = config.GitLabConfig{URL: "http://" + ln.Addr().String(), WebhookToken: config.Secret(g.hookToken)}
	for i := 1; i <= tenants; i++ {
		cfg.GitLab.Tenants = append(cfg.GitLab.Tenants, config.GitLabTenantConfig{ID: int64(i), Path: fmt.Sprintf("group-%d", i), Token: config.Secret(token), Tier: "paid"})
	}
	return g, nil
}

func (g *gitlabSide) close() { g.srv.Close() }

// open opens p as a merge request of tenant's group (1-based) and sends
// its Merge Request Hook to url.
func (g *gitlabSide) open(ctx context.Context, url string, tenant int, p corpus.PR) error {
	project := fmt.Sprintf("group-%d/%s", tenant, p.Name())
	g.mu.Lock()
	if !g.projects[project] {
		g.fake.AddProject(project, "main", p.BaseSHA, nil)
		g.projects[project] = true
	}
	g.mu.Unlock()
	if err := g.fake.AddMR(project, p.Number, "dev", p); err != nil {
		return err
	}
	body, err := g.fake.MergeRequestHook(project, p.Number, "open", "")
	if err != nil {
		return err
	}
	r, err := fakegitlab.Delivery(url, g.hookToken, fakegitlab.EventMergeRequest, "", body)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(r.WithContext(ctx))
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		return fmt.Errorf("demo: gitlab delivery: %d", resp.StatusCode)
	}
	g.mu.Lock()
	g.opened = append(g.opened, fmt.Sprintf("%s!%d", project, p.Number))
	g.mu.Unlock()
	return nil
}

// tally counts the merge requests opened and those with their summary
// note.
func (g *gitlabSide) tally() (opened, summarised int) {
	g.mu.Lock()
	mrs := append([]string(nil), g.opened...)
	g.mu.Unlock()
	for _, k := range mrs {
		project, iid, _ := strings.Cut(k, "!")
		var n int
		fmt.Sscan(iid, &n)
		for _, note := range g.fake.Notes(project, n) {
			if note.Author == glBot && strings.Contains(note.Body, workers.SummaryMarker) {
				summarised++
				break
			}
		}
	}
	return len(mrs), summarised
}
