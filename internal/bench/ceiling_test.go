package bench

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	openai "github.com/sashabaranov/go-openai"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/internal/redisproc"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/internal/review"
	"github.com/prq-dev/prq/llm"
	"github.com/prq-dev/prq/ratelimit"
	"github.com/prq-dev/prq/store"
	"github.com/prq-dev/prq/workers"
)

// infoAt is an INFO commandstats + cpu reply as Redis 7 writes it, with
// the fields the parser must not mistake for the main counters.
func infoAt(sys, user float64, calls map[string]int64, mem int64) string {
	var b strings.Builder
	b.WriteString("# Memory\r\nused_memory:" + itoa(mem) + "\r\nused_memory_human:1.00M\r\nused_memory_rss:99999999\r\nused_memory_peak:88888888\r\n\r\n")
	b.WriteString("# CPU\r\n")
	b.WriteString("used_cpu_sys:" + ftoa(sys) + "\r\nused_cpu_user:" + ftoa(user) + "\r\n")
	b.WriteString("used_cpu_sys_children:3.000000\r\nused_cpu_user_children:4.000000\r\nused_cpu_sys_main_thread:9.000000\r\nused_cpu_user_main_thread:9.000000\r\n")
	b.WriteString("\r\n# Commandstats\r\n")
	names := make([]string, 0, len(calls))
	for n := range calls {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		b.WriteString("cmdstat_" + n + ":calls=" + itoa(calls[n]) + ",usec=100,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\n")
	}
	return b.String()
}

func ftoa(f float64) string { return strconv.FormatFloat(f, 'f', 6, 64) }

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// TestCeilingFigures: the table's arithmetic from two recorded INFO
// replies per node and the workers' records: cores = CPU delta ÷ wall
// time, per call and per admitted job, by command and by script.
func TestCeilingFigures(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	t1 := t0.Add(10 * time.Second)
	w := ceilingWindow{From: t0, To: t1, Cores: 2, Nodes: []string{"a:1", "b:2"}}
	// node a: 7 s of CPU over 10 s; node b: 1 s
	w.RedisStart = []redisSample{
		parseRedisInfo(infoAt(10.5, 20.25, map[string]int64{"evalsha": 1000, "hget": 5000, "info": 3}, 1_000_000), t0),
		parseRedisInfo(infoAt(1, 1, map[string]int64{"get": 10}, 500_000), t0),
	}
	w.RedisEnd = []redisSample{
		parseRedisInfo(infoAt(12.5, 25.25, map[string]int64{"evalsha": 4000, "hget": 25000, "info": 4}, 3_000_000), t1),
		parseRedisInfo(infoAt(1.5, 1.5, map[string]int64{"get": 1010, "config|resetstat": 1}, 400_000), t1),
	}
	// calls: 1,000 in the window (one before, one at its end: outside), a
	// failed one and a 429
	var calls []callRecord
	for i := 0; i < 1000; i++ {
		calls = append(calls, callRecord{At: t0.UnixMilli() + int64(i*10), Outcome: "ok", Model: []string{"m1", "m2"}[i%2]})
	}
	calls = append(calls, callRecord{At: t0.UnixMilli() - 1, Outcome: "ok"}, callRecord{At: t1.UnixMilli(), Outcome: "ok"},
		callRecord{At: t0.UnixMilli() + 5, Outcome: "error"}, callRecord{At: t0.UnixMilli() + 6, Outcome: "429"})
	w.addCalls(calls)
	// 500 admissions waiting 1..500 ms, and one outside
	var waits []admitWait
	for i := 1; i <= 500; i++ {
		waits = append(waits, admitWait{At: t0.UnixMilli() + int64(i), WaitUS: int64(i) * 1000})
	}
	waits = append(waits, admitWait{At: t1.UnixMilli() + 1, WaitUS: 9e9})
	w.addWaits(waits)
	w.Scripts = map[string]int64{"admission admit": 1500, "asynq.dequeue": 500}
	w.Backlog = []int64{300, 100, 200}
	w.PRsSent = 40
	w.Workers, w.Self, w.Provider, w.GitHub, w.Upstream = 12*time.Second, 3*time.Second, 1*time.Second, 500*time.Millisecond, 0
	w.Machine = machineCPU{busy: 19 * time.Second, total: 20 * time.Second}

	f := w.figures()
	if f.WindowS != 10 || f.Calls != 1000 || f.CallErrors != 1 || f.Calls429 != 1 || f.Admitted != 500 {
		t.Fatalf("window %v s, calls %d, errors %d, 429s %d, admitted %d; want 10, 1000, 1, 1, 500", f.WindowS, f.Calls, f.CallErrors, f.Calls429, f.Admitted)
	}
	if !reflect.DeepEqual(f.CallsByModel, map[string]int64{"m1": 500, "m2": 500}) {
		t.Errorf("calls by model %v", f.CallsByModel)
	}
	if f.CallsPerS != 100 || f.AdmittedPerS != 50 {
		t.Errorf("calls/s %v, admitted/s %v; want 100, 50", f.CallsPerS, f.AdmittedPerS)
	}
	if len(f.RedisCores) != 2 || !near(f.RedisCores[0], 0.7) || !near(f.RedisCores[1], 0.1) {
		t.Errorf("Redis cores %v, want [0.7 0.1]", f.RedisCores)
	}
	if !near(f.RedisCPUMsPerCall, 8) { // (7,000 + 1,000 ms) / 1,000 calls
		t.Errorf("Redis CPU per call %v ms, want 8", f.RedisCPUMsPerCall)
	}
	// commands: evalsha 3,000 + hget 20,000 + info 1 + get 1,000 + config|resetstat 1
	if !near(f.CmdsPerCall, 24.002) || !near(f.CmdsPerAdmitted, 48.004) {
		t.Errorf("commands per call %v, per admitted job %v; want 24.002, 48.004", f.CmdsPerCall, f.CmdsPerAdmitted)
	}
	wantBy := []commandShare{{"hget", 20}, {"evalsha", 3}, {"get", 1}, {"config|resetstat", 0.001}, {"info", 0.001}}
	if !reflect.DeepEqual(f.ByCommand, wantBy) {
		t.Errorf("by command %v, want %v", f.ByCommand, wantBy)
	}
	if want := []commandShare{{"admission admit", 1.5}, {"asynq.dequeue", 0.5}}; !reflect.DeepEqual(f.ByScript, want) {
		t.Errorf("by script %v, want %v", f.ByScript, want)
	}
	if f.AdmissionP50Ms != 251 || f.AdmissionP99Ms != 496 { // index ⌊q·n⌋ of 1..500 ms
		t.Errorf("admission p50 %v p99 %v ms; want 251, 496 (nearest rank)", f.AdmissionP50Ms, f.AdmissionP99Ms)
	}
	if f.BacklogMin != 100 || f.BacklogMean != 200 || f.BacklogMax != 300 {
		t.Errorf("backlog %d / %v / %d, want 100 / 200 / 300", f.BacklogMin, f.BacklogMean, f.BacklogMax)
	}
	if f.WorkersCores != 1.2 || f.SelfCores != 0.3 || f.ProviderCores != 0.1 || f.GitHubCores != 0.05 || f.MachineBusy != 0.95 {
		t.Errorf("cores: workers %v self %v provider %v github %v machine %v", f.WorkersCores, f.SelfCores, f.ProviderCores, f.GitHubCores, f.MachineBusy)
	}
	// memory: +2,000,000 on a, -100,000 on b, over 40 PRs
	if f.PRsPerS != 4 || f.MemoryPerPR != 47_500 || !reflect.DeepEqual(f.UsedMemory, []int64{3_000_000, 400_000}) {
		t.Errorf("PRs/s %v, memory per PR %v, used memory %v; want 4, 47500, [3000000 400000]", f.PRsPerS, f.MemoryPerPR, f.UsedMemory)
	}
	if f.Saturated != "cores" {
		t.Errorf("saturated %q (%s), want cores: the machine 95%% busy, no one part at 90%%", f.Saturated, f.Verdict)
	}
}

// TestVerdict: which resource saturated first, from given numbers.
func TestVerdict(t *testing.T) {
	nodes := []string{"10.0.0.1:6379", "10.0.0.2:6379"}
	cases := []struct {
		name string
		in   verdictInput
		kind string
		text []string // substrings
	}{
		{"redis near one core", verdictInput{Nodes: nodes, RedisCores: []float64{0.4, 0.93}, Workers: 1.95, Cores: 8, MachineBusy: 0.5, Backlog: []int64{10, 20}},
			"redis", []string{"10.0.0.2:6379 at 0.93 core"}},
		{"redis first even with the cores full", verdictInput{Nodes: nodes[:1], RedisCores: []float64{0.9}, Workers: 1, Cores: 2, MachineBusy: 1},
			"redis", []string{"Redis saturated first"}},
		{"workers on every core", verdictInput{Nodes: nodes[:1], RedisCores: []float64{0.3}, Workers: 7.3, Cores: 8, MachineBusy: 0.97},
			"workers", []string{"7.30 of 8 cores"}},
		{"the bench process", verdictInput{Nodes: nodes[:1], RedisCores: []float64{0.3}, Workers: 0.2, Self: 3.7, Provider: 3.1, Cores: 4, MachineBusy: 0.99},
			"fake", []string{"3.70 of 4 cores", "fake provider 3.10"}},
		{"shared cores", verdictInput{Nodes: nodes[:1], RedisCores: []float64{0.25}, Workers: 0.6, Self: 0.2, Cores: 2, MachineBusy: 0.99},
			"cores", []string{"99% of 2 cores busy", "the workers using most", "other processes 0.93"}},
		{"shared cores, Redis the largest", verdictInput{Nodes: nodes[:1], RedisCores: []float64{0.8}, Workers: 0.6, Self: 0.2, Cores: 2, MachineBusy: 0.95},
			"cores", []string{"Redis using most"}},
		{"nothing at 90%", verdictInput{Nodes: nodes[:1], RedisCores: []float64{0.2}, Workers: 1, Cores: 8, MachineBusy: 0.2, Backlog: []int64{40, 90, 60}},
			"none", []string{"nothing reached 90%", "waits and round trips"}},
		{"backlog ran empty", verdictInput{Nodes: nodes[:1], RedisCores: []float64{0.2}, Workers: 1, Cores: 8, MachineBusy: 0.2, Backlog: []int64{40, 0, 60}},
			"none", []string{"ran empty at times"}},
		{"at a rate, kept up", verdictInput{Nodes: nodes[:1], RedisCores: []float64{0.2}, Cores: 8, Backlog: []int64{0, 16, 3}, Open: true},
			"none", []string{"kept up with the arrivals", "at most 16"}},
		{"at a rate, fell behind", verdictInput{Nodes: nodes[:1], RedisCores: []float64{0.95}, Cores: 8, Backlog: []int64{50, 400, 900}, Open: true},
			"redis", []string{"fell behind", "from 50 to 900"}},
		{"at a rate, a bump is no falling behind", verdictInput{Nodes: nodes[:1], RedisCores: []float64{0.2}, Cores: 8, Backlog: []int64{150, 900, 320}, Open: true},
			"none", []string{"kept up"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			kind, text := verdictOf(c.in)
			if kind != c.kind {
				t.Fatalf("kind %q (%s), want %q", kind, text, c.kind)
			}
			for _, s := range c.text {
				if !strings.Contains(text, s) {
					t.Errorf("verdict %q lacks %q", text, s)
				}
			}
			if (c.in.Open || !slices.Contains(c.in.Backlog, 0)) && strings.Contains(text, "ran empty") {
				t.Errorf("verdict %q says the backlog ran empty (%v, at a set rate: %v)", text, c.in.Backlog, c.in.Open)
			}
		})
	}
}

// asynqSource reads the scripts of the asynq release in the module
// cache: var name = redis.NewScript(`source`), by the SHA-1 of the
// source, names of one source joined by "/".
func asynqSource(t *testing.T) map[string]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}} {{.Dir}}", "github.com/hibiken/asynq").Output()
	if err != nil {
		t.Skipf("go list asynq: %v", err)
	}
	version, dir, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	if version != asynqVersion {
		t.Fatalf("go.mod has asynq %s; asynqScripts was read from %s: read it again from the new release", version, asynqVersion)
	}
	if dir == "" {
		t.Skip("asynq's source is not in the module cache")
	}
	files, _ := filepath.Glob(filepath.Join(dir, "internal", "rdb", "*.go"))
	re := regexp.MustCompile("(?s)var (\\w+) = redis\\.NewScript\\(`([^`]*)`\\)")
	names := map[string][]string{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			h := sha1.Sum([]byte(strings.ReplaceAll(m[2], "\r", ""))) // Go drops CRs from raw strings
			names[hex.EncodeToString(h[:])] = append(names[hex.EncodeToString(h[:])], strings.TrimSuffix(m[1], "Cmd"))
		}
	}
	want := map[string]string{}
	for sha, ns := range names {
		sort.Strings(ns)
		want[sha] = "asynq." + strings.Join(ns, "/")
	}
	return want
}

// TestAsynqScriptNames: the table of asynq's scripts is the release's
// source, hashed as go-redis hashes it.
func TestAsynqScriptNames(t *testing.T) {
	want := asynqSource(t)
	if len(want) < 40 {
		t.Fatalf("read %d scripts from asynq's source; the pattern no longer matches it", len(want))
	}
	for sha, name := range want {
		if got := asynqScripts[sha]; got != name {
			t.Errorf("asynq script %s (%s): the table has %q", sha, name, got)
		}
	}
	for sha, name := range asynqScripts {
		if _, ok := want[sha]; !ok {
			t.Errorf("the table has %s (%s), which asynq %s does not", sha, name, asynqVersion)
		}
	}
	// the hash is go-redis's: a script of the same source has it
	if got := redis.NewScript("return 1").Hash(); got != sha1Hex("return 1") {
		t.Errorf("go-redis hashes %q as %s, sha1Hex as %s", "return 1", got, sha1Hex("return 1"))
	}
}

// TestScriptNamer: prq's scripts by package and name, with the
// operation of a script that takes one, asynq's from its table, anything
// else by its hash's prefix.
func TestScriptNamer(t *testing.T) {
	n := newScriptNamer()
	parts := []map[string]string{asynqScripts, admission.ScriptHashes(), ratelimit.ScriptHashes(), store.ScriptHashes(), workers.ScriptHashes()}
	total := 0
	for _, p := range parts {
		total += len(p)
	}
	if len(n) != total {
		t.Errorf("namer knows %d scripts, the packages name %d: two share a hash", len(n), total)
	}
	var bucket, admit, complete string
	for sha, name := range ratelimit.ScriptHashes() {
		if name == "ratelimit.bucket" {
			bucket = sha
		}
	}
	for sha, name := range admission.ScriptHashes() {
		if name == "admission admit" {
			admit = sha
		}
	}
	for sha, name := range store.ScriptHashes() {
		if name == "store.complete" {
			complete = sha
		}
	}
	var dequeue string
	for sha, name := range asynqScripts {
		if name == "asynq.dequeue" {
			dequeue = sha
		}
	}
	cases := []struct{ name, sha, arg, want string }{
		{"an operation", bucket, "reserve", "ratelimit.bucket reserve"},
		{"a timestamp is no operation", bucket, "1712345678123456", "ratelimit.bucket"},
		{"an id is no operation", bucket, "file:review:abc", "ratelimit.bucket"},
		{"no argument", bucket, "", "ratelimit.bucket"},
		{"a script per operation", admit, "1712345678123456", "admission admit"},
		{"a script without operations", complete, "summary", "store.complete"},
		{"asynq", dequeue, "asynq:{paid}:pending", "asynq.dequeue"},
		{"unknown", "0123456789abcdef0123456789abcdef01234567", "x", "script 01234567"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.sha == "" {
				t.Fatal("the script is not named by its package")
			}
			if got := n.name(c.sha, c.arg); got != c.want {
				t.Errorf("name(%s, %q) = %q, want %q", c.sha[:8], c.arg, got, c.want)
			}
		})
	}
}

// TestRedisTally: the hook counts what a real client sends, commands
// and scripts by name, pipelines too, in steps of the clock; the bench's
// own reads are left out.
func TestRedisTally(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	ctx := context.Background()
	clock := time.UnixMilli(1_800_000_000_050)
	tally := newRedisTally(scriptNamer{sha1Hex("return ARGV[1]"): "ratelimit.bucket"})
	tally.now = func() time.Time { return clock }
	rdb.AddHook(tally)
	op := redis.NewScript("return ARGV[1]")
	rdb.ScriptFlush(ctx)
	if err := op.Run(ctx, rdb, []string{"k"}, "admit", "x").Err(); err != nil { // NOSCRIPT, then EVAL: both sent
		t.Fatal(err)
	}
	clock = clock.Add(tallyStep) // the next step
	op.Run(ctx, rdb, []string{"k"}, "settle")
	other := redis.NewScript("return 2")
	other.Run(ctx, rdb, nil)
	pipe := rdb.Pipeline()
	pipe.Get(ctx, "a")
	pipe.HGet(ctx, "h", "f")
	pipe.Exec(ctx)
	rdb.Get(untallied(ctx), "not counted")
	op.Run(untallied(ctx), rdb, []string{"k"}, "stats")

	// a new connection's HELLO and CLIENT SETINFO are counted too (Redis
	// counts them); when go-redis dials is its business
	var rows []tallyRow
	for _, r := range tally.rows() {
		if r.Name != "hello" && r.Name != "client" {
			rows = append(rows, r)
		}
	}
	first, second := time.UnixMilli(1_800_000_000_000), time.UnixMilli(1_800_000_000_100)
	c1, s1 := tallyWindow(rows, first, second)
	if want := map[string]int64{"script": 1, "evalsha": 1, "eval": 1}; !reflect.DeepEqual(c1, want) {
		t.Errorf("first step's commands %v, want %v", c1, want)
	}
	if want := map[string]int64{"ratelimit.bucket admit": 2}; !reflect.DeepEqual(s1, want) {
		t.Errorf("first step's scripts %v, want %v (the NOSCRIPT retry is sent, and counted, twice)", s1, want)
	}
	c2, s2 := tallyWindow(rows, second, second.Add(tallyStep))
	if want := map[string]int64{"evalsha": 2, "eval": 1, "get": 1, "hget": 1}; !reflect.DeepEqual(c2, want) {
		t.Errorf("second step's commands %v, want %v", c2, want)
	}
	wantS := map[string]int64{"ratelimit.bucket settle": 1, "script " + sha1Hex("return 2")[:8]: 2}
	if !reflect.DeepEqual(s2, wantS) {
		t.Errorf("second step's scripts %v, want %v", s2, wantS)
	}
	all, _ := tallyWindow(rows, first, second.Add(time.Second))
	if all["evalsha"] != 3 {
		t.Errorf("both steps: %d evalsha, want 3", all["evalsha"])
	}
	tally.add("cpu", "upstream", 7)
	if got := tallyKind(tally.rows(), "cpu", "upstream", second, second.Add(tallyStep)); got != 7 {
		t.Errorf("cpu in the step: %d, want 7", got)
	}
}

// TestParseProc: CPU times from /proc lines, a command name with spaces
// and parentheses included.
func TestParseProc(t *testing.T) {
	d, err := parseProcStat("4242 (prq (bench) x) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 75 0 0 20 0 12 0 1000 2000 300")
	if err != nil || d != 3250*time.Millisecond {
		t.Errorf("proc stat: %v %v, want 3.25s (325 ticks)", d, err)
	}
	if _, err := parseProcStat("4242 prq S 1"); err == nil {
		t.Error("a line without the name's parentheses parsed")
	}
	m, err := parseMachineCPU("cpu  100 5 50 800 30 2 3 10 7 0\ncpu0 50 2 25 400 15 1 1 5 3 0\n")
	if err != nil {
		t.Fatal(err)
	}
	// busy: user+nice+system+irq+softirq+steal = 170 ticks; total 1000
	if m.busy != 1700*time.Millisecond || m.total != 10*time.Second {
		t.Errorf("machine: busy %v total %v, want 1.7s of 10s", m.busy, m.total)
	}
	if _, err := parseMachineCPU("intr 1 2 3\n"); err == nil {
		t.Error("a /proc/stat without its cpu line parsed")
	}
	// the real files
	if _, err := procCPU("self"); err != nil {
		t.Errorf("this process: %v", err)
	}
	if m, err := readMachineCPU(); err != nil || m.total <= 0 {
		t.Errorf("this machine: %+v %v", m, err)
	}
}

// TestNoopProvider: the official client gets a review it can parse from
// a review prompt, a sentence from any other, and OpenAI's error shape
// for a body it cannot read.
func TestNoopProvider(t *testing.T) {
	srv := httptest.NewServer(&cpuMeter{next: &noopProvider{}})
	defer srv.Close()
	cc := openai.DefaultConfig("sk-any")
	cc.BaseURL = srv.URL + "/v1"
	c := openai.NewClientWithConfig(cc)
	ctx := context.Background()
	// prq's review prompts: a JSON object described in the system
	// prompt, or strict structured outputs with the schema
	schema := review.Format(llm.FormatJSONSchema)
	for _, req := range []openai.ChatCompletionRequest{
		{Model: "m", Messages: []openai.ChatCompletionMessage{{Role: "system", Content: review.Guide(llm.FormatJSONObject)}, {Role: "user", Content: "Task: review the file below.\ndiff"}},
			ResponseFormat: &openai.ChatCompletionResponseFormat{Type: openai.ChatCompletionResponseFormatTypeJSONObject}},
		{Model: "m", Messages: []openai.ChatCompletionMessage{{Role: "system", Content: review.Guide(llm.FormatJSONSchema)}, {Role: "user", Content: "diff"}},
			ResponseFormat: &openai.ChatCompletionResponseFormat{Type: openai.ChatCompletionResponseFormatTypeJSONSchema,
				JSONSchema: &openai.ChatCompletionResponseFormatJSONSchema{Name: schema.Name, Schema: schema.Schema, Strict: true}}},
	} {
		r, err := c.CreateChatCompletion(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		got, err := review.Parse(r.Choices[0].Message.Content)
		if err != nil || len(got.Comments) != 0 || got.Summary == "" {
			t.Errorf("%s: review reply %q: %+v %v; want a summary and no comments", req.ResponseFormat.Type, r.Choices[0].Message.Content, got, err)
		}
		if r.Usage.PromptTokens <= 0 || r.Usage.TotalTokens != r.Usage.PromptTokens+r.Usage.CompletionTokens {
			t.Errorf("usage %+v", r.Usage)
		}
	}
	r, err := c.CreateChatCompletion(ctx, openai.ChatCompletionRequest{Model: "m", Messages: []openai.ChatCompletionMessage{{Role: "system", Content: review.Guide(llm.FormatJSONObject)},
		{Role: "user", Content: "Pull request: x"}, {Role: "user", Content: "Task: summarise the file below.\ndiff"}}})
	if err != nil || strings.Contains(r.Choices[0].Message.Content, "comments") || r.Choices[0].FinishReason != openai.FinishReasonStop {
		t.Errorf("summary reply %+v %v", r, err)
	}
	_, err = c.CreateChatCompletion(ctx, openai.ChatCompletionRequest{Model: "m"})
	var apiErr *openai.APIError
	if err == nil || !errors.As(err, &apiErr) || apiErr.HTTPStatusCode != 400 {
		t.Errorf("no messages: %v, want a 400 in OpenAI's error shape", err)
	}
}

// TestCeilingSettings: the ceiling's own defaults where --duration and
// --scale are left alone, and clear errors for bad values.
func TestCeilingSettings(t *testing.T) {
	base := Flags{workload: WorkloadCeiling, sim: 10 * time.Minute, scale: "1,2,4", limiters: "bucket,window", upstream: UpstreamFake, concurrency: 20}
	s, err := ceilingSettingsOf(base)
	if err != nil {
		t.Fatal(err)
	}
	if s.run != ceilingRun || s.idle != ceilingIdle || !reflect.DeepEqual(s.procs, []int{1, 2, 4, 8}) || !reflect.DeepEqual(s.limiters, []string{"bucket", "window"}) {
		t.Errorf("defaults: run %s idle %s procs %v limiters %v", s.run, s.idle, s.procs, s.limiters)
	}
	short := base
	short.sim, short.simSet, short.scale, short.scaleSet = 5*time.Second, true, "2", true
	if s, err := ceilingSettingsOf(short); err != nil || s.run != 5*time.Second || s.idle != 5*time.Second || !reflect.DeepEqual(s.procs, []int{2}) {
		t.Errorf("--duration 5s --scale 2: %+v %v", s, err)
	}
	bad := map[string]func(*Flags){
		"--ceiling-limiters":  func(f *Flags) { f.limiters = "bucket,leaky" },
		"--upstream":          func(f *Flags) { f.upstream = "openai" },
		"--scale":             func(f *Flags) { f.scale, f.scaleSet = "0", true },
		"--rate":              func(f *Flags) { f.rate = -1 },
		"--duration":          func(f *Flags) { f.sim, f.simSet = 10*time.Millisecond, true },
		"--ceiling-limiters ": func(f *Flags) { f.limiters = "" },
	}
	for flag, mut := range bad {
		f := base
		mut(&f)
		_, err := ceilingSettingsOf(f)
		var ue *config.UsageError
		if !errors.As(err, &ue) || !strings.Contains(ue.Msg, strings.TrimSpace(flag)) {
			t.Errorf("%s: %v, want a usage error naming the flag", flag, err)
		}
	}
}

// TestCeilingSmoke runs the ceiling end to end for a few seconds: one
// worker process (this package's prq binary, built), the bucket limiter,
// the fake provider. It asserts the run happened and reported its
// figures, never how fast it was.
func TestCeilingSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Redis, the fakes and a worker process for ~15 s")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "prq")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/prq-dev/prq/cmd/prq").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	b := Flags{workload: WorkloadCeiling, sim: 3 * time.Second, simSet: true, scale: "1", scaleSet: true, limiters: "bucket", upstream: UpstreamFake,
		seed: 1, out: dir, exe: bin, concurrency: 4}
	var out strings.Builder
	cfg := config.Default()
	if err := runCeiling(context.Background(), &cfg, b, &out); err != nil {
		t.Fatalf("ceiling: %v\n%s", err, out.String())
	}
	var rep ceilingReport
	if b, err := os.ReadFile(filepath.Join(dir, "ceiling.json")); err != nil || json.Unmarshal(b, &rep) != nil {
		t.Fatalf("ceiling.json: %v", err)
	}
	if len(rep.Runs) != 1 {
		t.Fatalf("%d runs, want 1", len(rep.Runs))
	}
	r := rep.Runs[0]
	if r.CallsPerS <= 0 || r.Admitted <= 0 || r.CmdsPerCall <= 0 || len(r.RedisCores) != 1 || len(r.ByScript) == 0 || r.Verdict == "" {
		t.Errorf("run figures %+v: want calls, admissions, commands, Redis CPU, scripts and a verdict", r.ceilingFigures)
	}
	if r.CallErrors != 0 || r.WebhookErrors != 0 || r.Provider429s != 0 {
		t.Errorf("%d failed calls, %d refused webhooks, %d 429s; want none", r.CallErrors, r.WebhookErrors, r.Provider429s)
	}
	if rep.Idle == nil || rep.Idle.WindowS < 2 || rep.Idle.SentPerS <= 0 {
		t.Errorf("idle figures %+v: want a measured window and what the worker sent", rep.Idle)
	}
	if !strings.Contains(out.String(), "| redis | bucket | 1 |") {
		t.Errorf("no table row in the output:\n%s", out.String())
	}
}

// TestSpreadModels: on a 3-master cluster the three models' admission
// state (their bucket's hash tag) lands on three different masters:
// a key in each tag is found on three different nodes.
func TestSpreadModels(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-master Redis Cluster")
	}
	ctx := context.Background()
	cl, err := redisproc.StartCluster(ctx)
	if err != nil {
		t.Skipf("no cluster here: %v", err)
	}
	defer cl.Stop()
	addrs := strings.Split(strings.TrimPrefix(cl.URL(), "redis-cluster://"), ",")
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer rdb.Close()
	// where a key of the tag lives, by asking each node
	nodeOf := func(tag string) string {
		key := tag + ":probe"
		if err := rdb.Set(ctx, key, 1, 0).Err(); err != nil {
			t.Fatal(err)
		}
		for _, a := range addrs {
			c := redis.NewClient(&redis.Options{Addr: a})
			n, _ := c.Exists(ctx, key).Result()
			c.Close()
			if n == 1 {
				return a
			}
		}
		return ""
	}
	// a provider key under which the first names tried share a master,
	// so the test needs the search
	key := ""
	for i := 0; i < 100 && key == ""; i++ {
		k := "sk-test-" + strconv.Itoa(i)
		if nodeOf(ratelimit.BucketTag("ceiling-summary-0", k)) == nodeOf(ratelimit.BucketTag("ceiling-review-0", k)) {
			key = k
		}
	}
	if key == "" {
		t.Fatal("no key among 100 puts the first two names on one master")
	}
	names, err := spreadModels(ctx, addrs, key)
	if err != nil {
		t.Fatal(err)
	}
	on := map[string]string{}
	for _, name := range names {
		on[name] = nodeOf(ratelimit.BucketTag(name, key))
	}
	seen := map[string]bool{}
	for _, name := range names {
		if on[name] == "" || seen[on[name]] {
			t.Errorf("models %v are on %v: want three different masters", names, on)
		}
		seen[on[name]] = true
	}
}

// TestCeilingMarkdown: the report compares each cluster run with the
// one-Redis run of the same limiter and processes, breaks down the
// busiest run of each set-up, and turns the idle counts into rates per
// worker process.
func TestCeilingMarkdown(t *testing.T) {
	run := func(mode string, procs int, calls float64) ceilingResult {
		r := ceilingResult{Mode: mode, Limiter: "bucket", Processes: procs}
		r.CallsPerS, r.RedisCores, r.Verdict, r.Saturated = calls, []float64{0.5}, "v", "none"
		r.ByCommand = []commandShare{{"hget", float64(procs)}}
		r.ByScript = []commandShare{{"admission admit", 1.25}}
		return r
	}
	idle := &idleFigures{WindowS: 10, Processes: 2}
	idle.addWorker(map[string]int64{"evalsha": 100, "publish": 20}, map[string]int64{"asynq.dequeue": 80})
	idle.addWorker(map[string]int64{"evalsha": 60}, map[string]int64{"asynq.dequeue": 40})
	if idle.SentPerS != 9 || idle.SentByCommand["evalsha"] != 8 || idle.SentByScript["asynq.dequeue"] != 6 {
		t.Errorf("idle per worker: %+v; want 9 sent/s, evalsha 8/s, asynq.dequeue 6/s", idle)
	}
	rep := ceilingReport{Upstream: UpstreamFake, RunS: 10, Cores: 2, Concurrency: 20, Models: []string{"s", "r", "c"}, Idle: idle,
		Runs: []ceilingResult{run("redis", 1, 100), run("redis", 2, 400), run("cluster", 2, 1000)}}
	md := ceilingMarkdown(rep)
	for _, want := range []string{
		"Cluster / one Redis, bucket x2: 2.50x the calls/s.",
		"Per LLM call, redis bucket x2 (400 calls/s)",    // the busiest one-Redis run
		"Per LLM call, cluster bucket x2 (1000 calls/s)", // and the cluster's
		"| hget | 2.00 | | admission admit | 1.25 |",
		"evalsha 8.00, publish 1.00,",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "redis bucket x1 (100 calls/s)") {
		t.Errorf("the report breaks down a run that is not the busiest:\n%s", md)
	}
}
