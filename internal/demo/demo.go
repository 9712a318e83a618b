// Package demo runs prq end to end on one machine with nothing to set
// up: serve and worker in one process on an in-process Redis (or
// REDIS_URL), the fake GitHub and provider, compressed limits, and a
// traffic generator that sends signed webhooks for PRs across tenants and
// tiers and chat comments, enough to saturate the provider. It owns the
// demo's flags and traffic, not the wiring (internal/server) or the fakes
// (internal/harness).
package demo

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"

	"github.com/prq-dev/prq/fake/corpus"
	"github.com/prq-dev/prq/fake/fakegithub"
	"github.com/prq-dev/prq/fake/traffic"
	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/internal/harness"
	"github.com/prq-dev/prq/internal/logging"
	"github.com/prq-dev/prq/internal/server"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
)

// Flags are the demo's own settings.
type Flags struct {
	rate, chatRate, compress float64
	tenants, concurrency     int
	gitlab                   int
	mix                      string
	duration                 time.Duration
	seed                     int64
	corpus                   string
	verbose                  bool
}

// Register adds the demo's flags to fs.
func (d *Flags) Register(fs *flag.FlagSet) {
	fs.Float64Var(&d.rate, "rate", 1, "pull requests opened per second (in compressed time, per real second)")
	fs.Float64Var(&d.chatRate, "chat-rate", 0.2, "chat comments per second")
	fs.Float64Var(&d.compress, "compress", 10, "time compression: provider limits per minute/compress, latencies /compress")
	fs.IntVar(&d.tenants, "tenants", 12, "installations sending PRs")
	fs.IntVar(&d.gitlab, "gitlab-tenants", 0, "GitLab groups sending merge requests beside them (on a fake GitLab)")
	fs.StringVar(&d.mix, "mix", "paid=3,trial=3,free=6", "how many tenants of each tier")
	fs.IntVar(&d.concurrency, "concurrency", 40, "jobs the demo's worker runs at once")
	fs.DurationVar(&d.duration, "duration", 0, "stop after this long (default: until interrupted)")
	fs.Int64Var(&d.seed, "seed", 1, "seed of the traffic")
	fs.StringVar(&d.corpus, "corpus", "", "prs.jsonl to replay (default: ../shared/fixtures/pr-corpus when present, else generated PRs)")
	fs.BoolVar(&d.verbose, "verbose", false, "log at the configured level (a line per pull request); by default the demo logs warnings only, with a progress line every 10s")
}

// repoConfigs gives some of the demo's repositories a configuration of
// their own: tenant-1's organisation defaults (docs not reviewed, an
// instruction), and tenant-2's repositories a .prq.yaml (tests with
// their own instruction, no reviews of pull requests titled WIP).
func repoConfigs(gh *fakegithub.Server, prs []corpus.PR) {
	gh.SetFile(1, "tenant-1", ".github", "", "prq.yaml", `# tenant-1's defaults for all its repositories
paths:
  exclude: ["**/*.md", "docs/**"]
instructions: "Point out missing error handling first."
`)
	for _, p := range prs {
		gh.SetFile(2, "tenant-2", p.Name(), "", ".prq.yaml", `reviews:
  skip_title: ["WIP"]
paths:
  instructions:
    - {path: "**/*_test.go", instructions: "Focus on missing assertions."}
`)
	}
}

// parseMix reads "paid=3,trial=3,free=6" into tiers per tenant.
func parseMix(s string, tenants int) ([]jobs.Tier, error) {
	var tiers []jobs.Tier
	for _, part := range config.SplitList(s) {
		name, n, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("--mix %q: want tier=count pairs like paid=3,trial=3,free=6", s)
		}
		tier, err := jobs.ParseTier(name)
		if err != nil {
			return nil, fmt.Errorf("--mix: %v", err)
		}
		k, err := strconv.Atoi(n)
		if err != nil || k < 0 {
			return nil, fmt.Errorf("--mix: %q is not a count", n)
		}
		for i := 0; i < k; i++ {
			tiers = append(tiers, tier)
		}
	}
	if len(tiers) == 0 {
		return nil, fmt.Errorf("--mix %q names no tenants", s)
	}
	out := make([]jobs.Tier, tenants)
	for i := range out {
		out[i] = tiers[i*len(tiers)/tenants]
	}
	return out, nil
}

// Usage describes the demo command.
const Usage = "Runs prq end to end on an embedded default: an in-process Redis (or REDIS_URL), a fake GitHub and a fake OpenAI-compatible provider, serve and worker in one process, and traffic that saturates the provider. Prints the dashboard's URL, the address of pages showing what prq posted on each pull request, a progress line every 10s and a summary at the end."

// Run runs the demo until ctx ends (or --duration passes).
func Run(ctx context.Context, cfg *config.Config, d Flags, stdout, stderr io.Writer) error {
	if d.compress <= 0 || d.rate < 0 || d.chatRate < 0 || d.tenants <= 0 || d.concurrency <= 0 || d.gitlab < 0 {
		return &config.UsageError{Msg: "--compress, --tenants and --concurrency must be positive; --rate, --chat-rate and --gitlab-tenants not negative"}
	}
	tiers, err := parseMix(d.mix, d.tenants)
	if err != nil {
		return &config.UsageError{Msg: err.Error()}
	}
	if cfg.SetBy("PRQ_ADDR") == "" {
		cfg.Addr = defaultAddr(stdout)
	}
	harness.Compress(cfg, d.compress, d.concurrency)
	logCfg := quiet(cfg.Log, d.verbose)
	log := logging.New(stderr, logCfg)
	if d.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.duration)
		defer cancel()
	}

	var conn asynq.RedisConnOpt
	if cfg.RedisURL != "" {
		if conn, err = config.ParseRedisURL(cfg.RedisURL); err != nil {
			return &config.SettingError{Name: "REDIS_URL", Problem: err.Error()}
		}
	} else {
		mr, err := miniredis.Run()
		if err != nil {
			return fmt.Errorf("demo: in-process redis: %w", err)
		}
		defer mr.Close()
		conn = server.Embedded{RedisClientOpt: asynq.RedisClientOpt{Addr: mr.Addr()}}
		cfg.AllowNoPersistence = true // said below: nothing is durable
		fmt.Fprintln(stdout, "prq demo: using an in-process Redis: nothing is durable (set REDIS_URL to use a real one)")
	}
	fakes, err := harness.StartFakes(cfg, d.compress, "sk-demo-"+harness.RandomHex(16), d.seed, false)
	if err != nil {
		return err
	}
	defer fakes.Close()
	fakes.Configure(cfg, "prq-demo")
	var gl *gitlabSide
	if d.gitlab > 0 {
		if gl, err = startGitLab(cfg, d.gitlab); err != nil {
			return err
		}
		defer gl.close()
	}

	prs, src, err := harness.LoadPRs(d.corpus, 200, d.seed)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "prq demo: replaying %d PRs from %s across %d tenants (%s); provider limits per %s\n",
		len(prs), src, d.tenants, d.mix, time.Duration(float64(time.Minute)/d.compress))

	s, err := server.New(ctx, cfg, log, conn)
	if err != nil {
		return err
	}
	defer s.Close()
	for i, t := range tiers {
		inst := int64(i + 1)
		reason := map[jobs.Tier]string{jobs.TierPaid: "paid_user", jobs.TierTrial: "trial_user", jobs.TierFree: "open_source_user"}[t]
		if err := s.Store().SetPlan(ctx, store.Plan{Installation: inst, Account: fmt.Sprintf("tenant-%d", inst), Tier: t, Reason: reason, Explicit: true}); err != nil {
			return err
		}
	}
	repoConfigs(fakes.GitHub, prs)
	gen := &generator{d: d, gl: gl, tiers: tiers, prs: prs, fakes: fakes, secret: []byte(cfg.GitHub.WebhookSecret), out: stdout, s: s}
	gen.url = func() string {
		if s.ListenAddr() == "" {
			return ""
		}
		return "http://" + s.ListenAddr() + "/webhook"
	}
	// the server stops after the traffic: a webhook in flight is answered
	// rather than cut off (and logged as refused)
	serveCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	go func() {
		defer stop()
		gen.run(ctx)
	}()
	err = s.Run(serveCtx, stdout, server.Roles{HTTP: true, Worker: true}, server.Options{Demo: true, PRPages: gen.pagesURL() + "/"})
	gen.summary(context.WithoutCancel(ctx))
	return err
}

// defaultAddr is the demo's listen address: 127.0.0.1:8080, or any free
// port when 8080 is taken (saying so on out).
func defaultAddr(out io.Writer) string {
	ln, err := net.Listen("tcp", "127.0.0.1:8080")
	if err != nil {
		fmt.Fprintf(out, "prq demo: 127.0.0.1:8080 is taken (%v), so the dashboard takes a free port (printed below; --addr or PRQ_ADDR chooses one)\n", errors.Unwrap(err))
		return "127.0.0.1:0"
	}
	ln.Close()
	return "127.0.0.1:8080"
}

// quiet is the demo's logging: warnings and errors only, unless verbose
// (then the configured level): the progress lines say what the INFO
// lines would.
func quiet(c config.LogConfig, verbose bool) config.LogConfig {
	if level, _ := config.ParseLevel(c.Level); !verbose && level < slog.LevelWarn {
		c.Level = "warn"
	}
	return c
}

// generator sends signed webhooks for PRs and chat comments.
type generator struct {
	d      Flags
	tiers  []jobs.Tier
	gl     *gitlabSide // nil: no GitLab tenants
	prs    []corpus.PR
	fakes  *harness.Fakes
	secret []byte
	url    func() string
	out    io.Writer
	s      *server.Server

	sent, chats, refused atomic.Int64
	start                time.Time
	mu                   sync.Mutex
	opened               []openPR // every PR opened, for the tallies
	last                 map[string]int64
	lastAt               time.Time
}

type openPR struct {
	inst        int64
	owner, repo string
	number      int
}

func (g *generator) run(ctx context.Context) {
	rng := mrand.New(mrand.NewSource(g.d.seed))
	for g.url() == "" { // the HTTP server is starting
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
	s := &traffic.Sender{URL: g.url(), Secret: g.secret}
	fmt.Fprintf(g.out, "prq demo: what prq posts on each pull request, as GitHub shows it: %s\n", g.pagesURL())
	var open []openPR
	next, nextChat := time.Now(), time.Now().Add(2*time.Second)
	progress := time.NewTicker(10 * time.Second)
	defer progress.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	number := 1
	g.mu.Lock()
	g.start = time.Now()
	g.mu.Unlock()
	g.flows(ctx) // the first progress line's rates start here
	for {
		select {
		case <-ctx.Done():
			return
		case <-progress.C:
			g.progress(ctx)
			continue
		case <-tick.C:
		}
		now := time.Now()
		for g.d.rate > 0 && !now.Before(next) {
			next = next.Add(time.Duration(rng.ExpFloat64() / g.d.rate * float64(time.Second)))
			i := rng.Intn(len(g.tiers) + g.d.gitlab)
			inst := int64(i + 1)
			p := g.prs[rng.Intn(len(g.prs))]
			if i >= len(g.tiers) { // a GitLab group's merge request
				p.Number, p.HeadSHA, p.BaseSHA = number, harness.RandomHex(40), harness.RandomHex(40)
				number++
				if err := g.gl.open(ctx, g.url()+"/gitlab", i-len(g.tiers)+1, p); err != nil {
					g.refused.Add(1)
				} else {
					g.sent.Add(1)
				}
				continue
			}
			owner := fmt.Sprintf("tenant-%d", inst)
			p.Number, p.HeadSHA, p.BaseSHA = number, harness.RandomHex(40), harness.RandomHex(40)
			number++
			g.fakes.GitHub.AddPR(inst, owner, p.Name(), p)
			body := traffic.PullRequestEvent("opened", traffic.PR{Installation: inst, Owner: owner, Repo: p.Name(), Number: p.Number, Title: p.Title, Head: p.HeadSHA, Base: p.BaseSHA})
			if code, err := s.Send(context.WithoutCancel(ctx), "pull_request", traffic.NewDelivery(), body); err != nil || code >= 300 {
				g.refused.Add(1)
				continue
			}
			g.sent.Add(1)
			open = append(open, openPR{inst, owner, p.Name(), p.Number})
			g.mu.Lock()
			g.opened = append(g.opened, open[len(open)-1])
			g.mu.Unlock()
			if len(open) > 50 {
				open = open[1:]
			}
		}
		for g.d.chatRate > 0 && len(open) > 0 && !now.Before(nextChat) {
			nextChat = nextChat.Add(time.Duration(rng.ExpFloat64() / g.d.chatRate * float64(time.Second)))
			o := open[rng.Intn(len(open))]
			// the comment is on the pull request, as on GitHub, before its webhook
			author, text := "dev-"+strconv.Itoa(rng.Intn(20)), "@prq-demo could you explain why this change is safe?"
			id := g.fakes.GitHub.AddComment(o.owner, o.repo, o.number, text, author)
			body := traffic.IssueCommentEvent(traffic.Comment{Installation: o.inst, Owner: o.owner, Repo: o.repo, Number: o.number, ID: id,
				Author: author, Body: text})
			if code, err := s.Send(context.WithoutCancel(ctx), "issue_comment", traffic.NewDelivery(), body); err == nil && code < 300 {
				g.chats.Add(1)
			}
		}
	}
}
