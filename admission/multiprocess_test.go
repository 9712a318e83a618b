package admission_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/ratelimit"
)

type admissionRec struct {
	id       string
	class    string
	tokens   int64
	enq, adm int64 // µs, Redis time
}

var rank = map[string]int{"chat": 0, "paid": 1, "trial": 2, "free": 3}

// TestThreeProcessesOneOrder: three OS processes run admission loops on
// one Redis while tickets of every class keep arriving. With a bucket, in
// strict mode no lower-class ticket may be admitted while a higher-class
// one waits, and the bucket's interval checker must hold. With a window
// no window may ever hold more than the limit (backfill admits tickets
// out of order, by design, into room the waiting one does not need).
func TestThreeProcessesOneOrder(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	for _, limiter := range []ratelimit.Limiter{ratelimit.LimiterBucket, ratelimit.LimiterWindow} {
		t.Run(string(limiter), func(t *testing.T) { threeProcesses(t, limiter) })
	}
}

func threeProcesses(t *testing.T, limiter ratelimit.Limiter) {
	lim := mpLimitsOf(string(limiter))
	srv := redistest.New(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	model := "mp-model"
	b, _ := ratelimit.NewBucket(rdb, model, "sk", lim)
	s, err := admission.New(rdb, map[string]*ratelimit.Bucket{model: b}, nil, nil, admission.Config{Strict: true, ChatShare: 0.05}, discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rng := rand.New(rand.NewSource(1))
	classes := []string{"chat", "paid", "trial", "free"}
	register := func(i int) {
		c := classes[rng.Intn(4)]
		tk := admission.Ticket{ID: fmt.Sprintf("j%05d", i), Queue: c, Model: model, Class: c, Tenant: strconv.Itoa(rng.Intn(5)),
			PRSeq: int64(i / 5), Index: i % 5, Total: 5, Tokens: 50 + rng.Int63n(600)}
		if _, err := s.Register(ctx, tk); err != nil {
			t.Error(err)
		}
	}
	for i := 0; i < 200; i++ {
		register(i)
	}
	const d = 3 * time.Second
	outs := make([][]byte, 3)
	var wg sync.WaitGroup
	for p := 0; p < 3; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), helperEnv+"="+srv.Addr, "PRQ_HELPER_MODEL="+model, "PRQ_HELPER_DURATION="+d.String(), "PRQ_HELPER_LIMITER="+string(limiter))
			var errb bytes.Buffer
			cmd.Stderr = &errb
			out, err := cmd.Output()
			if err != nil {
				t.Errorf("process %d: %v %s", p, err, errb.String())
			}
			outs[p] = out
		}(p)
	}
	for i := 200; i < 600; i++ { // arrivals during the run
		register(i)
		time.Sleep(4 * time.Millisecond)
	}
	wg.Wait()
	var all []admissionRec
	perProc := []int{}
	for _, out := range outs {
		n := 0
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) != 6 || f[0] != "adm" {
				continue
			}
			tok, _ := strconv.ParseInt(f[3], 10, 64)
			enq, _ := strconv.ParseInt(f[4], 10, 64)
			adm, _ := strconv.ParseInt(f[5], 10, 64)
			all = append(all, admissionRec{f[1], f[2], tok, enq, adm})
			n++
		}
		perProc = append(perProc, n)
	}
	seen := map[string]bool{}
	for _, a := range all {
		if seen[a.id] {
			t.Fatalf("%s admitted twice", a.id)
		}
		seen[a.id] = true
	}
	inversions := 0
	for _, a := range all {
		for _, h := range all {
			// h outranks a, was waiting when a was admitted, and was admitted later
			if rank[h.class] < rank[a.class] && h.enq < a.adm && h.adm > a.adm {
				inversions++
				break
			}
		}
	}
	var adm []ratelimit.Admission
	for _, a := range all {
		adm = append(adm, ratelimit.Admission{At: time.UnixMicro(a.adm), Cost: a.tokens})
	}
	for i, n := range perProc {
		if n == 0 {
			t.Errorf("process %d admitted nothing: the order was not shared", i)
		}
	}
	if limiter == ratelimit.LimiterWindow {
		rep := ratelimit.CheckWindows(adm, lim.TokensPerPeriod, lim.Period)
		t.Logf("%d admissions by 3 processes %v; worst window %.4f of the limit; mean fill %.1f%%",
			len(all), perProc, rep.Worst, 100*rep.Utilisation)
		if rep.Violations != 0 {
			t.Fatalf("%d windows over the limit (worst %.4f)", rep.Violations, rep.Worst)
		}
		return
	}
	rep := ratelimit.CheckIntervals(adm, lim.TokensPerPeriod, lim.Period, lim.TokensPerPeriod)
	t.Logf("%d admissions by 3 processes %v; %d inversions; worst window %.4f of allowance; utilisation %.1f%%",
		len(all), perProc, inversions, rep.WorstRatio, 100*rep.Utilisation)
	if inversions != 0 {
		t.Fatalf("%d priority inversions across processes", inversions)
	}
	if rep.Violations != 0 {
		t.Fatalf("bucket exceeded in %d intervals", rep.Violations)
	}
}

// TestCrashBetweenAdmissionAndRelease: a process admits tickets and is
// killed with SIGKILL before releasing them. The reconciler releases them;
// every job runs exactly once.
func TestCrashBetweenAdmissionAndRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	srv := redistest.New(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	model := "crash-model"
	b, _ := ratelimit.NewBucket(rdb, model, "sk", mpLimits)
	client := asynq.NewClientFromRedisClient(rdb)
	insp := asynq.NewInspectorFromRedisClient(rdb)
	s, err := admission.New(rdb, map[string]*ratelimit.Bucket{model: b}, client, insp,
		admission.Config{Strict: true, ReleaseTimeout: 300 * time.Millisecond}, discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const n = 20
	for i := 0; i < n; i++ {
		tk := admission.Ticket{ID: fmt.Sprintf("c%02d", i), Queue: "paid", Model: model, Class: "paid", Tenant: "1", Index: i, Total: n, Tokens: 100}
		if _, err := s.Submit(ctx, asynq.NewTask("test:job", []byte(tk.ID)), tk); err != nil {
			t.Fatal(err)
		}
	}
	// the crashing process admits a batch and is SIGKILLed before releasing it
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+srv.Addr, "PRQ_HELPER_MODEL="+model, "PRQ_HELPER_MODE=crash", "PRQ_HELPER_RELEASE=300ms")
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var lost []string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		if id, ok := strings.CutPrefix(line, "admitted "); ok {
			lost = append(lost, id)
		}
		if line == "crash-now" {
			break
		}
	}
	cmd.Process.Kill()
	cmd.Wait()
	if len(lost) == 0 {
		t.Fatal("the crashing process admitted nothing")
	}
	// this process runs the jobs and the admission loop with its reconciler
	var mu sync.Mutex
	runs := map[string]int{}
	var total atomic.Int64
	srvq := asynq.NewServerFromRedisClient(rdb, asynq.Config{Concurrency: 4, Queues: map[string]int{"paid": 1}, TaskCheckInterval: 10 * time.Millisecond, LogLevel: asynq.FatalLevel})
	mux := asynq.NewServeMux()
	mux.HandleFunc("test:job", func(ctx context.Context, t *asynq.Task) error {
		mu.Lock()
		runs[string(t.Payload())]++
		mu.Unlock()
		total.Add(1)
		return s.Started(ctx, model, string(t.Payload()))
	})
	if err := srvq.Start(mux); err != nil {
		t.Fatal(err)
	}
	defer srvq.Shutdown()
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		s.Run(rctx, admission.RunConfig{Capacity: func() int { return 4 }, ReconcileEvery: 200 * time.Millisecond})
		close(done)
	}()
	deadline := time.Now().Add(20 * time.Second)
	for total.Load() < n && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // a second run would show up now
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("c%02d", i)
		if runs[id] != 1 {
			t.Errorf("%s ran %d times, want exactly once", id, runs[id])
		}
	}
	t.Logf("%d jobs admitted by the killed process were released by the reconciler; %d jobs ran once each", len(lost), n)
}
