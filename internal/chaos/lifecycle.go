package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	"gopkg.in/yaml.v3"

	"github.com/prq-dev/prq/fake/corpus"
	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/fake/traffic"
	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/internal/harness"
	"github.com/prq-dev/prq/internal/logging"
	"github.com/prq-dev/prq/internal/redisproc"
	"github.com/prq-dev/prq/internal/server"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
)

// The lifecycle scenario is a model-based test of a pull request's whole
// life: each sequence, from its own seed, plays random life-cycle events
// on a few pull requests of two installations (open, pushes, close,
// reopen, base edits, comments that talk to the bot, uninstall and
// reinstall), interleaved with worker kills (SIGKILL) and provider and
// GitHub faults, on a real Redis with the fakes. After the drain a
// checker reads the fake GitHub and Redis and holds the invariants:
//   - every open pull request of an enabled installation whose latest head
//     was accepted has exactly one summary comment, reflecting that head;
//     any other has at most one;
//   - at most one review per reviewed head;
//   - exactly one reply per accepted chat comment whose installation stayed
//     installed; at most one for any other;
//   - no write attempted for an uninstalled installation: the fake GitHub
//     refuses its tokens, as GitHub does, and records every write
//     attempt; none may arrive after the uninstall was processed (its
//     webhook answered) and every job that was running then has ended,
//     until the installation is created again;
//   - LLM calls per (file, head) within the retry bound: the fake
//     provider logs every call with the pull request title and file its
//     prompt names (each head gets its own title here), and per job (a
//     file's summary, or a part of its review) a head gets at most
//     retry.batch.max_attempts calls per run of the head, plus one per
//     worker killed in the sequence (a killed run's attempt ends without
//     a failure); and at most one whole answer per run (two for a review:
//     a reply the parser cannot read gets one repair call), plus one per
//     kill (no call is repeated once it succeeded but for a kill);
//   - nothing held, pending, running or retrying in asynq;
//   - every prq key has a TTL but the documented permanent ones.
//
// A failing sequence prints its seed.

// lcPR is the model's view of one pull request.
type lcPR struct {
	inst   int64
	owner  string
	repo   string
	number int
	files  []corpus.File
	head   string
	base   string
	opened bool
	open   bool
	// want is the head whose publication is owed: the last head a
	// plan-triggering event was accepted for, while nothing cancelled it
	want string
	// runs counts the plan-triggering deliveries sent per head (every
	// attempt): the runs a head can have
	runs map[string]int
}

// lcTitle is the title of a pull request at head: the provider's call
// log says which head a call was for by the title its prompt carries.
func lcTitle(head string) string { return "lifecycle @" + head }

func (p *lcPR) ref() jobs.PR {
	return jobs.PR{Installation: p.inst, Owner: p.owner, Repo: p.repo, Number: p.number}
}

// lcComment is a chat comment sent.
type lcComment struct {
	pr       *lcPR
	id       int64
	accepted bool
	// owed: accepted while installed, and never uninstalled since
	owed bool
}

// lcStats is what the checked sequences covered.
type lcStats struct {
	events, summaries, replies, reviews, uninstalls, faults, kills int
	// calls: LLM calls checked against the bound; maxJob: the most calls
	// one job made; inFlight: writes of an uninstalled installation that
	// arrived while jobs running at the uninstall were still running
	// (refused by the fake)
	calls, maxJob, inFlight int
}

// lcWindow is one uninstall of an installation: acked when its webhook
// was answered, quiet once every job running then had ended, ended when
// the installation was created again (zero times: not yet).
type lcWindow struct {
	acked, quiet, ended time.Time
}

type lcModel struct {
	stats     *lcStats
	rng       *rand.Rand
	prs       []*lcPR
	installed map[int64]bool
	comments  []*lcComment
	events    []string
	kills     int
	// maxAttempts is the workers' retry.batch.max_attempts
	maxAttempts int

	mu      sync.Mutex
	windows map[int64][]*lcWindow
	pollers sync.WaitGroup
}

// lifecycle runs c.sequences seeded sequences of c.steps events each.
func lifecycle(ctx context.Context, c Flags, stdout io.Writer) error {
	srv, err := redisproc.Start("--appendonly", "yes", "--appendfsync", "everysec")
	if err != nil {
		return err
	}
	defer srv.Stop()
	redisURL := srv.URL()
	cfg := harness.RunConfig(redisURL, c.compress, 20)
	for i := range cfg.Models {
		cfg.Models[i].TokensPerMinute *= 4
	}
	fakes, err := harness.StartFakes(&cfg, c.compress, "sk-chaos-"+harness.RandomHex(8), c.seed, true)
	if err != nil {
		return err
	}
	defer fakes.Close()
	fakes.OpenAI.SetLatencyScale(c.latency)
	fakes.Configure(&cfg, "prq-chaos")
	cfg.Addr = "127.0.0.1:0"
	cfgFile := filepath.Join(c.out, "lifecycle-config.yaml")
	yb, _ := yaml.Marshal(map[string]any{"models": cfg.Models, "jobs": cfg.Jobs, "tiers": cfg.Tiers, "log": config.LogConfig{Format: "json", Level: "info"},
		"shutdown_timeout": cfg.ShutdownTimeout, "worker": cfg.Worker, "github": map[string]any{"write_gap": cfg.GitHub.WriteGap}, "retry": cfg.Retry})
	if err := os.WriteFile(cfgFile, yb, 0o600); err != nil {
		return err
	}
	r := &chaosRun{c: c, cfgFile: cfgFile, procs: make([]*harness.Proc, c.processes), env: fakes.WorkerEnv(redisURL, "prq-chaos")}
	sctx, stopServe := context.WithCancel(ctx)
	defer stopServe()
	opt, _ := config.ParseRedisURL(redisURL)
	logf, _ := os.Create(filepath.Join(c.out, "lifecycle-serve.log"))
	defer logf.Close()
	a, err := server.New(sctx, &cfg, logging.New(logf, config.LogConfig{Format: "json", Level: "info"}), opt)
	if err != nil {
		return err
	}
	defer a.Close()
	served := harness.Serve(sctx, a, io.Discard, server.Roles{HTTP: true}, server.Options{})
	defer func() {
		stopServe()
		<-served
	}()
	for i := 0; i < c.processes; i++ {
		if err := r.spawn(i); err != nil {
			return err
		}
	}
	defer func() {
		for _, p := range r.procs {
			if p != nil {
				p.Signal(syscall.SIGTERM)
			}
		}
		time.Sleep(2 * time.Second)
		for _, p := range r.procs {
			if p != nil {
				p.Kill()
			}
		}
	}()
	prs, _, err := harness.LoadPRs(c.corpus, 200, c.seed)
	if err != nil {
		return err
	}
	sender := &traffic.Sender{URL: "http://" + a.ListenAddr() + "/webhook", Secret: []byte(cfg.GitHub.WebhookSecret)}
	var failed []int64
	start := time.Now()
	st := &lcStats{}
	ran := 0
	for i := 0; i < c.sequences && ctx.Err() == nil; i++ {
		seed := c.seed + int64(i)
		problems, err := r.sequence(ctx, seed, i, a, fakes, sender, prs, st, cfg.Retry.Batch.MaxAttempts)
		if ctx.Err() != nil {
			break // interrupted: this sequence did not finish
		}
		ran++
		if err != nil {
			return fmt.Errorf("sequence seed %d: %w", seed, err)
		}
		if len(problems) > 0 {
			failed = append(failed, seed)
			fmt.Fprintf(stdout, "lifecycle seed %d FAILED (replay: prq chaos --scenarios lifecycle --seed %d --sequences 1 --steps %d):\n", seed, seed, c.steps)
			for _, p := range problems {
				fmt.Fprintf(stdout, "  PROBLEM: %s\n", p)
			}
		}
	}
	fmt.Fprintf(stdout, "chaos lifecycle: %d/%d sequences of %d steps passed (seeds %d..%d), %s\n",
		ran-len(failed), ran, c.steps, c.seed, c.seed+int64(max(ran, 1))-1, time.Since(start).Round(time.Second))
	fmt.Fprintf(stdout, "  checked: %d events, %d owed summaries on the latest head, %d owed chat replies, %d reviews, %d uninstalls, %d faults, %d kill -9\n",
		st.events, st.summaries, st.replies, st.reviews, st.uninstalls, st.faults, st.kills)
	fmt.Fprintf(stdout, "  checked: %d LLM calls of file jobs against the retry bound (retry.batch.max_attempts %d; at most %d calls by one job at one head); %d writes of uninstalled installations from jobs running at their uninstall (refused by the fake)\n",
		st.calls, cfg.Retry.Batch.MaxAttempts, st.maxJob, st.inFlight)
	if len(failed) > 0 {
		return fmt.Errorf("chaos lifecycle: failing seeds %v", failed)
	}
	if ran < c.sequences {
		return fmt.Errorf("chaos lifecycle: interrupted after %d of %d sequences", ran, c.sequences)
	}
	return nil
}

// sequence plays one seeded sequence and checks its invariants; it
// returns what it found wrong and the workers it killed.
func (r *chaosRun) sequence(ctx context.Context, seed int64, n int, a *server.Server, fakes *harness.Fakes, sender *traffic.Sender, corpusPRs []corpus.PR, st *lcStats, maxAttempts int) ([]string, error) {
	m := &lcModel{stats: st, rng: rand.New(rand.NewSource(seed)), installed: map[int64]bool{}, maxAttempts: maxAttempts, windows: map[int64][]*lcWindow{}}
	// two installations and three pull requests of their own per sequence
	insts := []int64{int64(1000 + 2*n), int64(1001 + 2*n)}
	for _, inst := range insts {
		m.installed[inst] = true
		tier := jobs.TierPaid
		if inst%2 == 1 {
			tier = jobs.TierFree
		}
		if err := a.Store().SetPlan(ctx, store.Plan{Installation: inst, Tier: tier, Explicit: true}); err != nil {
			return nil, err
		}
	}
	for k := 0; k < 3; k++ {
		p := corpusPRs[m.rng.Intn(len(corpusPRs))]
		for len(p.Files) == 0 || len(p.Files) > 12 {
			p = corpusPRs[m.rng.Intn(len(corpusPRs))]
		}
		inst := insts[k%2]
		m.prs = append(m.prs, &lcPR{inst: inst, owner: fmt.Sprintf("lc-%d", inst), repo: p.Name(), number: 10 + k,
			files: append([]corpus.File(nil), p.Files...), head: harness.RandomHex(40), base: p.BaseSHA, runs: map[string]int{}})
	}
	sent := 0 // the attempts of the last send
	send := func(event string, body []byte) (int, error) {
		for attempt := 0; attempt < 50; attempt++ {
			sent = attempt + 1
			code, err := sender.Send(ctx, event, traffic.NewDelivery(), body)
			if err == nil && code != 503 {
				return code, nil
			}
			time.Sleep(200 * time.Millisecond)
		}
		return 0, fmt.Errorf("webhook %s kept failing", event)
	}
	prEvent := func(p *lcPR, action string, before string) []byte {
		return traffic.PullRequestEvent(action, traffic.PR{Installation: p.inst, Owner: p.owner, Repo: p.repo, Number: p.number, Title: lcTitle(p.head), Head: p.head, Base: p.base, Before: before})
	}
	plan := func(p *lcPR, action, before string) error {
		code, err := send("pull_request", prEvent(p, action, before))
		p.runs[p.head] += sent
		if err != nil {
			return err
		}
		m.events = append(m.events, fmt.Sprintf("%s #%d %s %.7s -> %d", p.owner, p.number, action, p.head, code))
		if code == 202 {
			p.want = p.head
		}
		return nil
	}
	for step := 0; step < r.c.steps; step++ {
		p := m.prs[m.rng.Intn(len(m.prs))]
		switch x := m.rng.Intn(100); {
		case !p.opened:
			c := corpus.PR{Number: p.number, Title: lcTitle(p.head), HeadSHA: p.head, BaseSHA: p.base, Files: p.files}
			fakes.GitHub.AddPR(p.inst, p.owner, p.repo, c)
			p.opened, p.open = true, true
			if err := plan(p, "opened", ""); err != nil {
				return nil, err
			}
		case x < 25 && p.open: // a push changing one file
			old := p.head
			p.head = harness.RandomHex(40)
			f := p.files[m.rng.Intn(len(p.files))]
			if f.Patch != nil {
				patch := *f.Patch + "\n+// " + p.head[:7]
				f.Patch = &patch
			}
			if err := fakes.GitHub.PushTitled(p.owner, p.repo, p.number, p.head, lcTitle(p.head), []corpus.File{f}); err != nil {
				return nil, err
			}
			if err := plan(p, "synchronize", old); err != nil {
				return nil, err
			}
		case x < 32 && p.open:
			fakes.GitHub.SetState(p.owner, p.repo, p.number, "closed")
			p.open, p.want = false, ""
			if _, err := send("pull_request", prEvent(p, "closed", "")); err != nil {
				return nil, err
			}
			m.events = append(m.events, fmt.Sprintf("%s #%d closed", p.owner, p.number))
		case x < 45 && !p.open:
			fakes.GitHub.SetState(p.owner, p.repo, p.number, "open")
			p.open = true
			if err := plan(p, "reopened", ""); err != nil {
				return nil, err
			}
		case x < 60: // a comment that talks to the bot
			id := fakes.GitHub.AddComment(p.owner, p.repo, p.number, "@prq-chaos what does this change?", "dev")
			body := traffic.IssueCommentEvent(traffic.Comment{Installation: p.inst, Owner: p.owner, Repo: p.repo, Number: p.number, ID: id, Author: "dev", Body: "@prq-chaos what does this change?"})
			code, err := send("issue_comment", body)
			if err != nil {
				return nil, err
			}
			m.comments = append(m.comments, &lcComment{pr: p, id: id, accepted: code == 202, owed: code == 202})
			m.events = append(m.events, fmt.Sprintf("%s #%d comment %d -> %d", p.owner, p.number, id, code))
		case x < 65 && p.open: // base branch edited
			p.base = harness.RandomHex(40)
			fakes.GitHub.SetBase(p.owner, p.repo, p.number, p.base)
			var ev map[string]any
			json.Unmarshal(prEvent(p, "edited", ""), &ev)
			ev["changes"] = map[string]any{"base": map[string]any{"ref": map[string]any{"from": "old"}, "sha": map[string]any{"from": "x"}}}
			b, _ := json.Marshal(ev)
			code, err := send("pull_request", b)
			p.runs[p.head] += sent
			if err != nil {
				return nil, err
			}
			m.events = append(m.events, fmt.Sprintf("%s #%d base edited -> %d", p.owner, p.number, code))
			if code == 202 {
				p.want = p.head
			}
		case x < 69: // uninstall or reinstall p's installation
			inst := p.inst
			acct := map[string]any{"login": p.owner, "id": inst}
			if m.installed[inst] {
				fakes.GitHub.Uninstall(inst)
				m.installed[inst] = false
				for _, q := range m.prs {
					if q.inst == inst {
						q.want = ""
					}
				}
				for _, c := range m.comments {
					if c.pr.inst == inst {
						c.owed = false
					}
				}
				b, _ := json.Marshal(map[string]any{"action": "deleted", "installation": map[string]any{"id": inst, "account": acct}})
				if _, err := send("installation", b); err != nil {
					return nil, err
				}
				m.uninstalled(ctx, a, inst)
				m.events = append(m.events, fmt.Sprintf("installation %d deleted", inst))
				st.uninstalls++
			} else {
				m.reinstalled(inst)
				fakes.GitHub.Reinstall(inst)
				m.installed[inst] = true
				b, _ := json.Marshal(map[string]any{"action": "created", "installation": map[string]any{"id": inst, "account": acct}})
				if _, err := send("installation", b); err != nil {
					return nil, err
				}
				m.events = append(m.events, fmt.Sprintf("installation %d created", inst))
			}
		case x < 69+r.c.killPercent: // a worker killed mid-flight, and restarted
			i := m.rng.Intn(len(r.procs))
			r.mu.Lock()
			victim := r.procs[i]
			r.mu.Unlock()
			victim.Kill()
			st.kills++
			m.kills++
			if err := r.spawn(i); err != nil {
				return nil, err
			}
			m.events = append(m.events, fmt.Sprintf("worker %d killed", i))
		case x < 85: // a GitHub fault on the next write, or a provider fault burst
			switch m.rng.Intn(3) {
			case 0:
				fakes.GitHub.FailNext("/comments", 502)
			case 1:
				fakes.GitHub.FailNext("/reviews", 500)
			default:
				fakes.OpenAI.SetFaults(fakeopenai.Faults{ServerError: 0.3, TooMany: 0.2})
				time.AfterFunc(time.Second, func() { fakes.OpenAI.SetFaults(fakeopenai.Faults{}) })
			}
			m.events = append(m.events, "fault")
			st.faults++
		}
		st.events++
		time.Sleep(time.Duration(m.rng.Intn(300)) * time.Millisecond)
	}
	fakes.OpenAI.SetFaults(fakeopenai.Faults{})
	return m.drainAndCheck(ctx, r.c.timeout, a, fakes), nil
}

// drainAndCheck waits until the owed work is done and asynq is idle,
// then checks the invariants.
func (m *lcModel) drainAndCheck(ctx context.Context, timeout time.Duration, a *server.Server, fakes *harness.Fakes) []string {
	deadline := time.Now().Add(timeout)
	settled := func() bool {
		if lost, _ := chaosJobs(ctx, a); lost > 0 {
			return false
		}
		for _, p := range m.prs {
			if p.want != "" && p.open && m.installed[p.inst] && !summaryOf(fakes, p.ref(), p.want) {
				return false
			}
		}
		for _, c := range m.comments {
			if c.owed && replies(fakes, c) == 0 {
				return false
			}
		}
		return true
	}
	// settled on three polls in a row: a job waiting a second or ten (a
	// GitHub retry, the publish lock) is not gone yet
	for calm := 0; calm < 3 && time.Now().Before(deadline) && ctx.Err() == nil; {
		if settled() {
			calm++
		} else {
			calm = 0
		}
		time.Sleep(500 * time.Millisecond)
	}
	time.Sleep(time.Second) // a late duplicate would show now
	problems := m.checkCalls(fakes)
	problems = append(problems, m.checkWrites(fakes, deadline)...)
	for _, p := range m.prs {
		if !p.opened {
			continue
		}
		pr := p.ref()
		n := fakes.Summaries(pr)
		owed := p.want != "" && p.open && m.installed[p.inst]
		if owed {
			m.stats.summaries++
		}
		switch {
		case owed && n != 1:
			problems = append(problems, fmt.Sprintf("%s: %d summary comments, want 1", pr, n))
		case owed && !summaryOf(fakes, pr, p.want):
			problems = append(problems, fmt.Sprintf("%s: the summary does not reflect the latest head %.7s", pr, p.want))
		case n > 1:
			problems = append(problems, fmt.Sprintf("%s: %d summary comments, want at most 1", pr, n))
		}
		perHead := map[string]int{}
		for _, rv := range fakes.GitHub.Reviews(pr.Owner, pr.Repo, pr.Number) {
			perHead[rv.CommitID]++
		}
		m.stats.reviews += len(perHead)
		for head, k := range perHead {
			if k > 1 {
				problems = append(problems, fmt.Sprintf("%s: %d reviews of head %.7s, want at most 1", pr, k, head))
			}
		}
	}
	for _, c := range m.comments {
		k := replies(fakes, c)
		if c.owed {
			m.stats.replies++
		}
		switch {
		case c.owed && k != 1:
			problems = append(problems, fmt.Sprintf("%s: comment %d has %d replies, want 1", c.pr.ref(), c.id, k))
		case k > 1:
			problems = append(problems, fmt.Sprintf("%s: comment %d has %d replies, want at most 1", c.pr.ref(), c.id, k))
		}
	}
	if lost, _ := chaosJobs(ctx, a); lost > 0 {
		problems = append(problems, fmt.Sprintf("%d jobs held, pending, running or retrying after the drain: %s", lost, strings.Join(stuckTasks(a, 5), "; ")))
	}
	if missing, _, err := harness.KeysWithoutTTL(ctx, a.Redis()); err != nil {
		problems = append(problems, "scan: "+err.Error())
	} else if len(missing) > 0 {
		problems = append(problems, fmt.Sprintf("%d keys without a TTL: %s", len(missing), strings.Join(missing[:min(len(missing), 5)], " ")))
	}
	if len(problems) > 0 {
		problems = append(problems, "events: "+strings.Join(m.events, "; "))
	}
	return problems
}

// summaryOf reports whether the pull request's summary comment reflects
// head (its state marker names the heads it covers).
func summaryOf(fakes *harness.Fakes, pr jobs.PR, head string) bool {
	for _, c := range fakes.GitHub.Comments(pr.Owner, pr.Repo, pr.Number) {
		if strings.Contains(c.Body, "<!-- prq:summary part=1 ") && strings.Contains(c.Body, "prq:reviewed=") && strings.Contains(c.Body, head+" -->") {
			return true
		}
	}
	return false
}

// replies counts the bot's replies to a comment (by their marker).
func replies(fakes *harness.Fakes, c *lcComment) int {
	n := 0
	for _, x := range fakes.GitHub.Comments(c.pr.owner, c.pr.repo, c.pr.number) {
		if strings.Contains(x.Body, fmt.Sprintf("<!-- prq:reply to=%d ", c.id)) {
			n++
		}
	}
	return n
}

// uninstalled opens an uninstall window of inst, its webhook just
// answered: the jobs of inst running now may still write (the fake
// refuses them); once they have all ended, no write of inst may come.
func (m *lcModel) uninstalled(ctx context.Context, a *server.Server, inst int64) {
	w := &lcWindow{acked: time.Now()}
	running := runningOf(a, inst)
	m.mu.Lock()
	m.windows[inst] = append(m.windows[inst], w)
	m.mu.Unlock()
	m.pollers.Add(1)
	go func() {
		defer m.pollers.Done()
		for {
			left := running[:0]
			for _, t := range running {
				if info, err := a.Inspector().GetTaskInfo(t[0], t[1]); err == nil && info.State == asynq.TaskStateActive {
					left = append(left, t)
				}
			}
			running = left
			m.mu.Lock()
			if len(running) == 0 {
				w.quiet = time.Now() // every write of those jobs arrived before this
			}
			done := !w.quiet.IsZero() || !w.ended.IsZero()
			m.mu.Unlock()
			if done || ctx.Err() != nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
}

// reinstalled closes inst's open uninstall window (before the fake
// accepts its tokens again).
func (m *lcModel) reinstalled(inst int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, w := range m.windows[inst] {
		if w.ended.IsZero() {
			w.ended = time.Now()
		}
	}
}

// runningOf lists (queue, id) of the tasks of installation inst asynq
// has active.
func runningOf(a *server.Server, inst int64) [][2]string {
	var out [][2]string
	for _, q := range jobs.Queues {
		tasks, err := a.Inspector().ListActiveTasks(q, asynq.PageSize(1000))
		if err != nil {
			continue
		}
		for _, t := range tasks {
			var p struct {
				PR jobs.PR `json:"pr"`
			}
			if json.Unmarshal(t.Payload, &p) == nil && p.PR.Installation == inst {
				out = append(out, [2]string{q, t.ID})
			}
		}
	}
	return out
}

// checkWrites finds writes of an uninstalled installation after its
// uninstall was processed and the jobs running then had ended.
func (m *lcModel) checkWrites(fakes *harness.Fakes, deadline time.Time) []string {
	waited := make(chan struct{})
	go func() { m.pollers.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(time.Until(deadline) + 30*time.Second):
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var problems []string
	for inst, ws := range m.windows {
		for _, w := range ws {
			if w.quiet.IsZero() && w.ended.IsZero() {
				problems = append(problems, fmt.Sprintf("installation %d: jobs running at its uninstall (%s) never ended", inst, w.acked.Format("15:04:05.000")))
			}
		}
	}
	for _, x := range fakes.GitHub.WriteAttempts() {
		for _, w := range m.windows[x.Installation] {
			after := w.ended.IsZero() || x.At.Before(w.ended)
			switch {
			case !after || x.At.Before(w.acked):
			case !w.quiet.IsZero() && !x.At.Before(w.quiet):
				problems = append(problems, fmt.Sprintf("installation %d: %s %s %s after its uninstall was processed, %s after its running jobs had ended",
					x.Installation, x.Method, x.Path, x.At.Sub(w.acked).Round(time.Millisecond), x.At.Sub(w.quiet).Round(time.Millisecond)))
			default:
				m.stats.inFlight++
			}
		}
	}
	return problems
}

// checkCalls holds each file job's LLM calls per head to the retry
// bound (see the package comment).
func (m *lcModel) checkCalls(fakes *harness.Fakes) []string {
	byHead := map[string]*lcPR{}
	for _, p := range m.prs {
		for h := range p.runs {
			byHead[h] = p
		}
	}
	type job struct {
		head, path, kind string
		part             int
	}
	total, whole := map[job]int{}, map[job]int{}
	for _, c := range fakes.OpenAI.Calls() {
		head, ok := strings.CutPrefix(c.Title, lcTitle(""))
		if !ok || c.Kind == "chat" || byHead[head] == nil {
			continue
		}
		j := job{head, c.Path, c.Kind, c.Part}
		total[j]++
		if c.Complete {
			whole[j]++
		}
		m.stats.calls++
	}
	var problems []string
	for j, n := range total {
		p := byHead[j.head]
		runs := p.runs[j.head]
		m.stats.maxJob = max(m.stats.maxJob, n)
		kind := "summary"
		if j.kind == "review" {
			kind = "review"
		}
		what := fmt.Sprintf("%s: %s of %s (part %d) at head %.7s", p.ref(), kind, j.path, j.part, j.head)
		if bound := runs*m.maxAttempts + m.kills; n > bound {
			problems = append(problems, fmt.Sprintf("%s: %d LLM calls, over the retry bound %d (%d runs × retry.batch.max_attempts %d + %d kills)",
				what, n, bound, runs, m.maxAttempts, m.kills))
		}
		// a review reply the parser cannot read gets one repair call
		perRun := 1
		if j.kind == "review" {
			perRun = 2
		}
		if k, bound := whole[j], runs*perRun+m.kills; k > bound {
			problems = append(problems, fmt.Sprintf("%s: %d whole answers, over %d (%d runs × %d + %d kills): a call was repeated after it succeeded",
				what, k, bound, runs, perRun, m.kills))
		}
	}
	sort.Strings(problems)
	return problems
}
