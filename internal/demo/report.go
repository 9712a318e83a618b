package demo

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prq-dev/prq/fake/fakegithub"
	"github.com/prq-dev/prq/internal/metrics"
)

// pagesURL is the fake GitHub's pull-request pages.
func (g *generator) pagesURL() string {
	return strings.TrimSuffix(g.fakes.GitHubURL, "/api/v3/") + fakegithub.PagesPath
}

// tally is what prq posted on the demo's pull requests so far.
type tally struct {
	opened, reviewed, files        int
	summaries, lineComments, chats int
}

// posted counts what prq posted on the demo's pull requests: the
// summaries and chat replies (by their markers) in one pass over the
// comments, the reviews, line comments and files from each pull
// request's counts.
func (g *generator) posted() tally {
	g.mu.Lock()
	prs := append([]openPR(nil), g.opened...)
	g.mu.Unlock()
	gh := g.fakes.GitHub
	bot := gh.Bot()
	t := tally{opened: len(prs)}
	gh.EachComment(func(c fakegithub.IssueComment) {
		switch {
		case c.Author != bot:
		case strings.Contains(c.Body, "<!-- prq:summary part=1 "):
			t.summaries++
		case strings.Contains(c.Body, "<!-- prq:reply "):
			t.chats++
		}
	})
	for _, p := range prs {
		st := gh.Stats(p.owner, p.repo, p.number)
		t.chats += st.Replies
		t.lineComments += st.ReviewComments
		if st.Reviews > 0 {
			t.reviewed++
			t.files += gh.FileCount(p.owner, p.repo, p.number)
		}
	}
	return t
}

// flow is a model's tokens per second arriving and allowed.
type flow struct {
	model             string
	arriving, allowed float64
}

// flows reads each model's incoming tokens since the last call: the
// rate work arrives at, against the rate the provider allows.
func (g *generator) flows(ctx context.Context) []flow {
	sched := g.s.Scheduler()
	now := time.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.last == nil {
		g.last = map[string]int64{}
	}
	dt := now.Sub(g.lastAt).Seconds()
	var out []flow
	for _, m := range sched.Models() {
		in, _, err := sched.Tokens(ctx, m)
		if err != nil {
			continue
		}
		var sum int64
		for _, v := range in {
			sum += v
		}
		prev, seen := g.last[m]
		g.last[m] = sum
		b, ok := sched.Bucket(m)
		if !seen || !ok || dt <= 0 {
			continue
		}
		l := b.Limits()
		out = append(out, flow{model: m, arriving: float64(sum-prev) / dt, allowed: float64(b.Keys()) * float64(l.TokensPerPeriod) / l.Period.Seconds()})
	}
	g.lastAt = now
	sort.Slice(out, func(i, j int) bool { return out[i].model < out[j].model })
	return out
}

// progress prints one line: what was opened and posted, the jobs
// waiting, and why they wait: tokens per second arriving against what
// the provider allows, per model.
func (g *generator) progress(ctx context.Context) {
	t := g.posted()
	waiting := int64(0)
	for _, m := range g.s.Scheduler().Models() {
		if st, err := g.s.Scheduler().Stats(ctx, m); err == nil {
			for _, n := range st.Backlog {
				waiting += n
			}
		}
	}
	g.mu.Lock()
	since := time.Since(g.start).Round(time.Second)
	g.mu.Unlock()
	fmt.Fprintln(g.out, progressLine(since, t, waiting, g.flows(ctx)))
}

// progressLine is the progress line: what was opened and posted, the
// jobs waiting, and, per model, the tokens per second arriving against
// the provider's limit — saying so when more arrives than it admits.
func progressLine(since time.Duration, t tally, waiting int64, flows []flow) string {
	var parts []string
	over := false
	for _, f := range flows {
		parts = append(parts, fmt.Sprintf("%s %s/%s", f.model, kilo(f.arriving), kilo(f.allowed)))
		over = over || f.arriving > f.allowed
	}
	why := fmt.Sprintf("%d jobs waiting", waiting)
	if over {
		why = fmt.Sprintf("%d jobs wait: more work arrives than the provider's limit admits", waiting)
	}
	if len(parts) > 0 {
		why += " (tokens/s arriving/limit: " + strings.Join(parts, ", ") + ")"
	}
	return fmt.Sprintf("demo %s: %d PRs opened, %d reviewed, %d chat replies; %s", since, t.opened, t.reviewed, t.chats, why)
}

// summary prints the demo's final table: what it sent, what prq posted
// and spent, and where to look.
func (g *generator) summary(ctx context.Context) {
	t := g.posted()
	calls, limited := int64(0), int64(0)
	for _, st := range g.fakes.OpenAI.Stats() {
		calls += st.Requests
		limited += st.RateLimited
	}
	dollars := 0.0
	for _, byTier := range metrics.Costs(ctx, g.s.Redis()) {
		for _, d := range byTier {
			dollars += d
		}
	}
	g.mu.Lock()
	ran := time.Since(g.start).Round(time.Second)
	g.mu.Unlock()
	if g.start.IsZero() {
		ran = 0
	}
	fmt.Fprintf(g.out, "\nprq demo: ran %s\n", ran)
	w := tabwriter.NewWriter(g.out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "  pull requests\t%d opened, %d reviewed\n", t.opened, t.reviewed)
	if g.gl != nil {
		opened, summarised := g.gl.tally()
		fmt.Fprintf(w, "  merge requests\t%d opened on %d GitLab groups, %d with their summary note\n", opened, g.gl.tenants, summarised)
	}
	fmt.Fprintf(w, "  files\t%d in the reviewed pull requests\n", t.files)
	fmt.Fprintf(w, "  comments\t%d summaries, %d line comments, %d chat replies to %d questions\n", t.summaries, t.lineComments, t.chats, g.chats.Load())
	fmt.Fprintf(w, "  provider calls\t%d, %d answered 429 (rate limited)\n", calls, limited)
	fmt.Fprintf(w, "  spend\t$%.4f at the configured prices (the fake provider charges nothing)\n", dollars)
	fmt.Fprintf(w, "  where to look\twhile the demo runs: %s (what prq posted) and the dashboard;\n", g.pagesURL())
	fmt.Fprintf(w, "  \tdocs/reviews.md explains each piece, docs/operations.md the dashboard\n")
	w.Flush()
}

// kilo writes a rate as 950, 9.1k or 1.2M.
func kilo(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}
