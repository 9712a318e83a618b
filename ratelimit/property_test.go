package ratelimit_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/ratelimit"
)

const helperEnv = "PRQ_RATELIMIT_HELPER"

var propLimits = ratelimit.Limits{RequestsPerPeriod: 300, TokensPerPeriod: 30000, Period: time.Second}

// propWindow is the same limits counted in a sliding one-second window,
// with a quarter-second sub-window that may hold 40% of them.
var propWindow = ratelimit.Limits{RequestsPerPeriod: 300, TokensPerPeriod: 30000, Period: time.Second,
	Limiter: ratelimit.LimiterWindow, SubWindow: 250 * time.Millisecond, SubWindowShare: 0.4}

func propLimitsFor(limiter string) ratelimit.Limits {
	if limiter == string(ratelimit.LimiterWindow) {
		return propWindow
	}
	return propLimits
}

type stamped struct {
	at       time.Time
	requests int64
	tokens   int64
}

// hammer runs clients goroutines reserving random costs until d passes.
func hammer(ctx context.Context, b *ratelimit.Bucket, clients int, d time.Duration, seed int64, prefix string) ([]stamped, error) {
	var (
		mu  sync.Mutex
		out []stamped
		wg  sync.WaitGroup
		ers = make(chan error, clients)
	)
	deadline := time.Now().Add(d)
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(seed + int64(c)))
			for i := 0; time.Now().Before(deadline); i++ {
				cost := ratelimit.Cost{Requests: 1, Tokens: 20 + rng.Int63n(780)}
				id := fmt.Sprintf("%s-%d-%d", prefix, c, i)
				dec, err := b.Reserve(ctx, id, cost)
				if err != nil {
					ers <- err
					return
				}
				if dec.Admitted {
					mu.Lock()
					out = append(out, stamped{dec.Now, cost.Requests, cost.Tokens})
					mu.Unlock()
					continue
				}
				time.Sleep(min(dec.Wait, 20*time.Millisecond))
			}
		}(c)
	}
	wg.Wait()
	close(ers)
	return out, <-ers
}

func runHelperProcess() int {
	addr := os.Getenv(helperEnv)
	clients, _ := strconv.Atoi(os.Getenv("PRQ_HELPER_CLIENTS"))
	d, _ := time.ParseDuration(os.Getenv("PRQ_HELPER_DURATION"))
	seed, _ := strconv.ParseInt(os.Getenv("PRQ_HELPER_SEED"), 10, 64)
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: clients + 4})
	defer rdb.Close()
	limiter := os.Getenv("PRQ_HELPER_LIMITER")
	b, err := ratelimit.NewBucket(rdb, "prop-model-"+limiter, "sk-prop", propLimitsFor(limiter))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	got, err := hammer(context.Background(), b, clients, d, seed, "p"+strconv.FormatInt(seed, 10))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	w := bufio.NewWriter(os.Stdout)
	for _, s := range got {
		fmt.Fprintf(w, "adm %d %d %d\n", s.at.UnixMicro(), s.requests, s.tokens)
	}
	w.Flush()
	return 0
}

func split(all []stamped) (req, tok []ratelimit.Admission) {
	for _, s := range all {
		req = append(req, ratelimit.Admission{At: s.at, Cost: s.requests})
		tok = append(tok, ratelimit.Admission{At: s.at, Cost: s.tokens})
	}
	return req, tok
}

// shareAcrossProcesses runs 64 concurrent clients on one limiter for d:
// 32 goroutines here and 16 in each of two more OS processes. It returns
// every admission, stamped with Redis time.
func shareAcrossProcesses(t *testing.T, limiter ratelimit.Limiter, d time.Duration) []stamped {
	t.Helper()
	srv := redistest.New(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 40})
	defer rdb.Close()
	b, err := ratelimit.NewBucket(rdb, "prop-model-"+string(limiter), "sk-prop", propLimitsFor(string(limiter)))
	if err != nil {
		t.Fatal(err)
	}
	type procOut struct {
		lines []stamped
		err   error
	}
	procs := make(chan procOut, 2)
	for p := 0; p < 2; p++ {
		go func(p int) {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), helperEnv+"="+srv.Addr, "PRQ_HELPER_CLIENTS=16", "PRQ_HELPER_LIMITER="+string(limiter),
				"PRQ_HELPER_DURATION="+d.String(), "PRQ_HELPER_SEED="+strconv.Itoa(1000*(p+1)))
			out, err := cmd.Output()
			var res procOut
			res.err = err
			for _, line := range strings.Split(string(out), "\n") {
				f := strings.Fields(line)
				if len(f) != 4 || f[0] != "adm" {
					continue
				}
				us, _ := strconv.ParseInt(f[1], 10, 64)
				r, _ := strconv.ParseInt(f[2], 10, 64)
				k, _ := strconv.ParseInt(f[3], 10, 64)
				res.lines = append(res.lines, stamped{time.UnixMicro(us), r, k})
			}
			procs <- res
		}(p)
	}
	all, err := hammer(context.Background(), b, 32, d, 1, "local")
	if err != nil {
		t.Fatal(err)
	}
	perProc := []int{len(all)}
	for p := 0; p < 2; p++ {
		res := <-procs
		if res.err != nil {
			t.Fatalf("helper process: %v", res.err)
		}
		perProc = append(perProc, len(res.lines))
		all = append(all, res.lines...)
	}
	for i, n := range perProc {
		if n == 0 {
			t.Fatalf("client group %d admitted nothing: the test did not exercise sharing", i)
		}
	}
	t.Logf("%s: %d admissions (per process %v)", limiter, len(all), perProc)
	return all
}

// TestBucketNeverOverLimit: 64 concurrent clients, 32 goroutines here and
// 16 in each of two more OS processes, share one bucket; every interval
// between admissions (stamped with Redis time) stays within
// burst + rate·(b−a) in both dimensions.
func TestBucketNeverOverLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("property test runs for seconds")
	}
	all := shareAcrossProcesses(t, ratelimit.LimiterBucket, 3*time.Second)
	req, tok := split(all)
	l := propLimits
	rr := ratelimit.CheckIntervals(req, l.RequestsPerPeriod, l.Period, l.RequestsPerPeriod)
	tr := ratelimit.CheckIntervals(tok, l.TokensPerPeriod, l.Period, l.TokensPerPeriod)
	t.Logf("tokens: worst window %.4f of allowance, utilisation %.2f%%; requests: worst %.4f, utilisation %.2f%%",
		tr.WorstRatio, 100*tr.Utilisation, rr.WorstRatio, 100*rr.Utilisation)
	if rr.Violations != 0 || tr.Violations != 0 {
		t.Fatalf("limit exceeded: %d request intervals and %d token intervals over the allowance", rr.Violations, tr.Violations)
	}
	if tr.Utilisation < 0.9 {
		t.Errorf("token utilisation %.2f%% under saturation; want ≥ 90%%", 100*tr.Utilisation)
	}
	// the bucket is exact for what it models, and still overruns a
	// provider that counts in windows: its refill admits a second window's
	// worth while the first is still counted
	tw := ratelimit.CheckWindows(tok, l.TokensPerPeriod, l.Period)
	t.Logf("bucket against a one-second window: %d windows over the limit, worst %.2fx", tw.Violations, tw.Worst)
	if tw.Violations == 0 {
		t.Fatal("the window checker did not flag the bucket limiter against a window limit")
	}
}

// TestWindowNeverOverLimit: the same 64 clients in three processes share
// one window limiter; no window (t−1s, t] and no sub-window (t−250ms, t]
// ever holds more than its limit, in either dimension.
func TestWindowNeverOverLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("property test runs for seconds")
	}
	l := propWindow
	all := shareAcrossProcesses(t, ratelimit.LimiterWindow, 3*time.Second)
	req, tok := split(all)
	checks := []struct {
		name  string
		adm   []ratelimit.Admission
		limit int64
		w     time.Duration
	}{
		{"requests per window", req, l.RequestsPerPeriod, l.Period},
		{"tokens per window", tok, l.TokensPerPeriod, l.Period},
		{"requests per sub-window", req, int64(l.SubWindowShare * float64(l.RequestsPerPeriod)), l.SubWindow},
		{"tokens per sub-window", tok, int64(l.SubWindowShare * float64(l.TokensPerPeriod)), l.SubWindow},
	}
	for _, c := range checks {
		rep := ratelimit.CheckWindows(c.adm, c.limit, c.w)
		t.Logf("%s: worst %.4f of the limit", c.name, rep.Worst)
		if rep.Violations != 0 {
			t.Errorf("%s: %d windows over the limit (worst %.4f)", c.name, rep.Violations, rep.Worst)
		}
	}
	tr := ratelimit.CheckWindows(tok, l.TokensPerPeriod, l.Period)
	t.Logf("tokens: utilisation %.2f%% of the limit after the first window", 100*tr.Utilisation)
	if tr.Utilisation < 0.85 {
		t.Errorf("token utilisation %.2f%% under saturation; want ≥ 85%%", 100*tr.Utilisation)
	}
}

// naiveBucket is the same token bucket done client-side with
// read-modify-write: what the checker must catch.
type naiveBucket struct {
	rdb   *redis.Client
	limit int64
	per   time.Duration
}

func (n *naiveBucket) reserve(ctx context.Context, cost int64) (bool, time.Time, error) {
	ts, err := n.rdb.Time(ctx).Result()
	if err != nil {
		return false, ts, err
	}
	vals, err := n.rdb.HMGet(ctx, "naive", "level", "t").Result()
	if err != nil {
		return false, ts, err
	}
	level, last := float64(n.limit), ts
	if s, ok := vals[0].(string); ok {
		level, _ = strconv.ParseFloat(s, 64)
		us, _ := strconv.ParseInt(vals[1].(string), 10, 64)
		last = time.UnixMicro(us)
	}
	level = min(float64(n.limit), level+float64(n.limit)*ts.Sub(last).Seconds()/n.per.Seconds())
	if level < float64(cost) {
		return false, ts, nil
	}
	err = n.rdb.HSet(ctx, "naive", "level", level-float64(cost), "t", ts.UnixMicro()).Err()
	return err == nil, ts, err
}

func TestCheckerCatchesNaiveLimiter(t *testing.T) {
	srv := redistest.New(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 70})
	defer rdb.Close()
	n := &naiveBucket{rdb: rdb, limit: 30000, per: time.Second}
	var (
		mu  sync.Mutex
		adm []ratelimit.Admission
		wg  sync.WaitGroup
	)
	deadline := time.Now().Add(time.Second)
	for c := 0; c < 64; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(c)))
			for time.Now().Before(deadline) {
				cost := 20 + rng.Int63n(780)
				ok, at, err := n.reserve(context.Background(), cost)
				if err != nil {
					t.Error(err)
					return
				}
				if ok {
					mu.Lock()
					adm = append(adm, ratelimit.Admission{At: at, Cost: cost})
					mu.Unlock()
				} else {
					time.Sleep(2 * time.Millisecond)
				}
			}
		}(c)
	}
	wg.Wait()
	rep := ratelimit.CheckIntervals(adm, n.limit, n.per, n.limit)
	t.Logf("naive limiter: %d admissions, %d violating intervals, worst window %.2fx the allowance", rep.Admissions, rep.Violations, rep.WorstRatio)
	if rep.Violations == 0 {
		t.Fatal("the checker did not flag the naive read-modify-write limiter")
	}
}

func TestCheckIntervals(t *testing.T) {
	t0 := time.UnixMicro(1_000_000)
	at := func(ms int64) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	tests := []struct {
		name string
		adm  []ratelimit.Admission
		viol bool
	}{
		{"burst at once", []ratelimit.Admission{{at(0), 50}, {at(0), 50}}, false},
		{"over burst at once", []ratelimit.Admission{{at(0), 60}, {at(0), 50}}, true},
		{"refill allows", []ratelimit.Admission{{at(0), 100}, {at(500), 50}}, false},
		{"refill too slow", []ratelimit.Admission{{at(0), 100}, {at(400), 50}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := ratelimit.CheckIntervals(tt.adm, 100, time.Second, 100)
			if got := rep.Violations > 0; got != tt.viol {
				t.Fatalf("violations = %d, want violation %v", rep.Violations, tt.viol)
			}
		})
	}
}
