package admission_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/ratelimit"
)

const helperEnv = "PRQ_ADMISSION_HELPER"

var mpLimits = ratelimit.Limits{RequestsPerPeriod: 100000, TokensPerPeriod: 20000, Period: time.Second}

// mpLimitsOf are the multi-process tests' limits under a limiter
// ("" or "bucket": mpLimits).
func mpLimitsOf(limiter string) ratelimit.Limits {
	l := mpLimits
	if limiter == string(ratelimit.LimiterWindow) {
		l.Limiter = ratelimit.LimiterWindow
	}
	return l
}

// runHelper is a worker process's admission loop for the multi-process
// tests: it admits until told to stop and prints each admission. With
// PRQ_HELPER_MODE=crash it admits one batch, says so and waits to be killed.
func runHelper() int {
	addr := os.Getenv(helperEnv)
	model := os.Getenv("PRQ_HELPER_MODEL")
	d, _ := time.ParseDuration(os.Getenv("PRQ_HELPER_DURATION"))
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	b, err := ratelimit.NewBucket(rdb, model, "sk", mpLimitsOf(os.Getenv("PRQ_HELPER_LIMITER")))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	release, _ := time.ParseDuration(os.Getenv("PRQ_HELPER_RELEASE"))
	s, err := admission.New(rdb, map[string]*ratelimit.Bucket{model: b}, nil, nil, admission.Config{Strict: true, ChatShare: 0.05, ChatCap: 1, ReleaseTimeout: release}, discard)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx := context.Background()
	if os.Getenv("PRQ_HELPER_MODE") == "crash" {
		for {
			adm, _, err := s.Admit(ctx, model, 5)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			if len(adm) > 0 {
				for _, a := range adm {
					fmt.Printf("admitted %s\n", a.ID)
				}
				fmt.Println("crash-now")
				time.Sleep(time.Hour) // killed with SIGKILL before releasing
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		adm, wait, err := s.Admit(ctx, model, 4)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		for _, a := range adm {
			fmt.Printf("adm %s %s %d %d %d\n", a.ID, a.Class, a.Tokens, a.Enqueued.UnixMicro(), a.Enqueued.Add(a.Waited).UnixMicro())
		}
		if len(adm) == 0 {
			time.Sleep(min(max(wait, time.Millisecond), 10*time.Millisecond))
		}
	}
	return 0
}
