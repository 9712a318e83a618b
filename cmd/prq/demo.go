package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	mrand "math/rand"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"

	"github.com/prq-dev/prq/fake/corpus"
	"github.com/prq-dev/prq/fake/traffic"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
)

// demoFlags are the demo's own settings.
type demoFlags struct {
	rate, chatRate, compress float64
	tenants, concurrency     int
	mix                      string
	duration                 time.Duration
	seed                     int64
	corpus                   string
}

func (d *demoFlags) register(fs *flag.FlagSet) {
	fs.Float64Var(&d.rate, "rate", 1, "pull requests opened per second (in compressed time, per real second)")
	fs.Float64Var(&d.chatRate, "chat-rate", 0.2, "chat comments per second")
	fs.Float64Var(&d.compress, "compress", 10, "time compression: provider limits per minute/compress, latencies /compress")
	fs.IntVar(&d.tenants, "tenants", 12, "installations sending PRs")
	fs.StringVar(&d.mix, "mix", "paid=3,trial=3,free=6", "how many tenants of each tier")
	fs.IntVar(&d.concurrency, "workers", 40, "jobs the worker runs at once")
	fs.DurationVar(&d.duration, "duration", 0, "stop after this long (default: until interrupted)")
	fs.Int64Var(&d.seed, "seed", 1, "seed of the traffic")
	fs.StringVar(&d.corpus, "corpus", "", "prs.jsonl to replay (default: ../shared/fixtures/pr-corpus when present, else generated PRs)")
}

// parseMix reads "paid=3,trial=3,free=6" into tiers per tenant.
func parseMix(s string, tenants int) ([]jobs.Tier, error) {
	var tiers []jobs.Tier
	for _, part := range splitComma(s) {
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

func randomHex(n int) string {
	b := make([]byte, n/2)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// demoConfig sets the demo's limits: small enough that the traffic keeps
// the fake provider saturated, periods compressed.
func demoConfig(cfg *Config, d demoFlags) {
	per := Duration(float64(time.Minute) / d.compress)
	cfg.Models = []ModelConfig{
		{Name: "gpt-4o-mini", RequestsPerMinute: 600, TokensPerMinute: 60000, MaxOutputTokens: 300, Period: per},
		{Name: "gpt-4o", RequestsPerMinute: 300, TokensPerMinute: 24000, MaxOutputTokens: 600, Period: per},
	}
	cfg.Jobs = JobsConfig{SummaryModel: "gpt-4o-mini", ReviewModel: "gpt-4o", ChatModel: "gpt-4o-mini"}
	cfg.Worker.Concurrency = d.concurrency
	cfg.GitHub.WriteGap = Duration(float64(time.Second) / d.compress)
	if t, ok := cfg.Tiers["free"]; ok && t.QuotaTokens == 0 {
		t.QuotaTokens = 40000 // free tenants run into their daily quota during the demo
		cfg.Tiers["free"] = t
	}
}

func runDemo(ctx context.Context, env *cmdEnv, args []string) error {
	var d demoFlags
	cfg, help, err := setup(env, "demo", "Runs prq end to end on an embedded default: an in-process Redis (or REDIS_URL), a fake GitHub and a fake OpenAI-compatible provider, serve and worker in one process, and traffic that saturates the provider. Prints the dashboard URL.", modeDemo, args, d.register)
	if help || err != nil {
		return err
	}
	if d.compress <= 0 || d.rate < 0 || d.chatRate < 0 || d.tenants <= 0 || d.concurrency <= 0 {
		return &usageError{"--compress, --tenants and --workers must be positive; --rate and --chat-rate not negative"}
	}
	tiers, err := parseMix(d.mix, d.tenants)
	if err != nil {
		return &usageError{err.Error()}
	}
	if cfg.sources["PRQ_ADDR"] == "" {
		cfg.Addr = "127.0.0.1:8080"
		if ln, err := net.Listen("tcp", cfg.Addr); err != nil {
			cfg.Addr = "127.0.0.1:0" // 8080 is taken: any free port
		} else {
			ln.Close()
		}
	}
	demoConfig(cfg, d)
	log := newLogger(env.stderr, cfg.Log)
	if d.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d.duration)
		defer cancel()
	}

	var conn asynq.RedisConnOpt
	if cfg.RedisURL != "" {
		if conn, err = parseRedisURL(cfg.RedisURL); err != nil {
			return &settingErr{name: "REDIS_URL", problem: err.Error()}
		}
	} else {
		mr, err := miniredis.Run()
		if err != nil {
			return fmt.Errorf("demo: in-process redis: %w", err)
		}
		defer mr.Close()
		conn = asynq.RedisClientOpt{Addr: mr.Addr()}
		fmt.Fprintln(env.stdout, "prq demo: using an in-process Redis: nothing is durable (set REDIS_URL to use a real one)")
	}
	apiKey := "sk-demo-" + randomHex(16)
	fakes, err := startFakes(cfg, d.compress, apiKey, d.seed)
	if err != nil {
		return err
	}
	defer fakes.close()
	cfg.GitHub.AppID, cfg.GitHub.PrivateKey, cfg.GitHub.APIURL = fakes.appID, Secret(fakes.keyPEM), fakes.githubURL
	cfg.GitHub.WebhookSecret, cfg.GitHub.AppSlug = Secret(randomHex(32)), "prq-demo"
	cfg.OpenAI.APIKey, cfg.OpenAI.BaseURL = Secret(apiKey), fakes.openaiURL

	prs, src, err := loadPRs(d.corpus, 200, d.seed)
	if err != nil {
		return err
	}
	fmt.Fprintf(env.stdout, "prq demo: replaying %d PRs from %s across %d tenants (%s); provider limits per %s\n",
		len(prs), src, d.tenants, d.mix, time.Duration(float64(time.Minute)/d.compress))

	a, err := newApp(ctx, cfg, log, conn)
	if err != nil {
		return err
	}
	defer a.close()
	a.demo = true
	gen := &demoTraffic{d: d, tiers: tiers, prs: prs, fakes: fakes, secret: []byte(cfg.GitHub.WebhookSecret), out: env}
	return a.run(ctx, env, running{http: true, worker: true}, func(a *app) error {
		for i, t := range tiers {
			inst := int64(i + 1)
			reason := map[jobs.Tier]string{jobs.TierPaid: "paid_user", jobs.TierTrial: "trial_user", jobs.TierFree: "open_source_user"}[t]
			if err := a.store.SetPlan(ctx, store.Plan{Installation: inst, Account: fmt.Sprintf("tenant-%d", inst), Tier: t, Reason: reason, Explicit: true}); err != nil {
				return err
			}
		}
		gen.url = func() string {
			if a.listenAddr() == "" {
				return ""
			}
			return "http://" + a.listenAddr() + "/webhook"
		}
		go gen.run(ctx)
		return nil
	})
}

// demoTraffic sends signed webhooks for PRs and chat comments.
type demoTraffic struct {
	d      demoFlags
	tiers  []jobs.Tier
	prs    []corpus.PR
	fakes  *fakeSet
	secret []byte
	url    func() string
	out    *cmdEnv

	sent, chats, refused atomic.Int64
}

type openPR struct {
	inst        int64
	owner, repo string
	number      int
}

func (g *demoTraffic) run(ctx context.Context) {
	rng := mrand.New(mrand.NewSource(g.d.seed))
	for g.url() == "" { // the HTTP server is starting
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
	s := &traffic.Sender{URL: g.url(), Secret: g.secret}
	var open []openPR
	next, nextChat := time.Now(), time.Now().Add(2*time.Second)
	progress := time.NewTicker(10 * time.Second)
	defer progress.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	number, commentID := 1, int64(5_000_000)
	start := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-progress.C:
			g.report(start)
			continue
		case <-tick.C:
		}
		now := time.Now()
		for g.d.rate > 0 && !now.Before(next) {
			next = next.Add(time.Duration(rng.ExpFloat64() / g.d.rate * float64(time.Second)))
			i := rng.Intn(len(g.tiers))
			inst := int64(i + 1)
			p := g.prs[rng.Intn(len(g.prs))]
			owner := fmt.Sprintf("tenant-%d", inst)
			p.Number, p.HeadSHA, p.BaseSHA = number, randomHex(40), randomHex(40)
			number++
			g.fakes.github.AddPR(inst, owner, p.Name(), p)
			body := traffic.PullRequestEvent("opened", traffic.PR{Installation: inst, Owner: owner, Repo: p.Name(), Number: p.Number, Title: p.Title, Head: p.HeadSHA, Base: p.BaseSHA})
			if code, err := s.Send(ctx, "pull_request", traffic.NewDelivery(), body); err != nil || code >= 300 {
				g.refused.Add(1)
				continue
			}
			g.sent.Add(1)
			open = append(open, openPR{inst, owner, p.Name(), p.Number})
			if len(open) > 50 {
				open = open[1:]
			}
		}
		for g.d.chatRate > 0 && len(open) > 0 && !now.Before(nextChat) {
			nextChat = nextChat.Add(time.Duration(rng.ExpFloat64() / g.d.chatRate * float64(time.Second)))
			o := open[rng.Intn(len(open))]
			commentID++
			body := traffic.IssueCommentEvent(traffic.Comment{Installation: o.inst, Owner: o.owner, Repo: o.repo, Number: o.number, ID: commentID,
				Author: "dev-" + strconv.Itoa(rng.Intn(20)), Body: "@prq-demo could you explain why this change is safe?"})
			if code, err := s.Send(ctx, "issue_comment", traffic.NewDelivery(), body); err == nil && code < 300 {
				g.chats.Add(1)
			}
		}
	}
}

func (g *demoTraffic) report(start time.Time) {
	published := 0
	for _, st := range g.fakes.github.AllStats() {
		if st.CommentsCreated > 0 {
			published++
		}
	}
	calls, limited := int64(0), int64(0)
	var models []string
	for name, st := range g.fakes.openai.Stats() {
		calls += st.Requests
		limited += st.RateLimited
		models = append(models, fmt.Sprintf("%s %d/%d tok (worst window %d of %d)", name, st.AdmittedTokens, st.Requests, st.MaxWindowTokens, st.TPM))
	}
	sort.Strings(models)
	fmt.Fprintf(g.out.stdout, "demo %s: %d PRs opened, %d summaries published, %d chat comments, %d provider calls, %d provider 429s\n",
		time.Since(start).Round(time.Second), g.sent.Load(), published, g.chats.Load(), calls, limited)
}
