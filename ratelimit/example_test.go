package ratelimit_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/ratelimit"
)

// Reserve a call against a tenant's quota, rewrite its output cap, then
// settle it with the provider's reported usage.
func Example() {
	srv, err := redistest.Start()
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	defer srv.Stop()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	ctx := context.Background()

	quota, _ := ratelimit.NewQuota(rdb, ratelimit.QuotaConfig{Period: ratelimit.Day})
	// 1,000 tokens a day; the prompt is 700 tokens and asks for 1,024 out.
	g, _ := quota.Reserve(ctx, "installation-42", "review", "job-1", 1000, 700, 1024)
	fmt.Println("max_tokens rewritten to", g.Cap)

	// The provider used 700 in and 250 out; 50 go back to the tenant.
	_ = quota.Settle(ctx, g, 950)
	u, _ := quota.Used(ctx, "installation-42", "review", 1000)
	fmt.Println("used", u.Used, "of", u.Limit)

	_, err = quota.Reserve(ctx, "installation-42", "review", "job-2", 1000, 60, 1024)
	fmt.Println(err != nil)
	// Output:
	// max_tokens rewritten to 300
	// used 950 of 1000
	// true
}

// A provider that admits at most 1,000 tokens in any second: the second
// call waits until the first leaves the window (and the margin), where
// a token bucket would have let it in after 200 ms of refill.
func ExampleBucket_window() {
	srv, err := redistest.Start()
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	defer srv.Stop()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	ctx := context.Background()

	b, _ := ratelimit.NewBucket(rdb, "gpt-4o", "sk-example", ratelimit.Limits{
		RequestsPerPeriod: 100, TokensPerPeriod: 1000, Period: time.Second,
		Limiter: ratelimit.LimiterWindow, WindowMargin: 10 * time.Millisecond,
	})
	now := time.Unix(1_800_000_000, 0)
	b.NowFunc = func() time.Time { return now }

	d, _ := b.Reserve(ctx, "job-1", ratelimit.Cost{Requests: 1, Tokens: 800})
	fmt.Println("first admitted:", d.Admitted)
	now = now.Add(200 * time.Millisecond)
	d, _ = b.Reserve(ctx, "job-2", ratelimit.Cost{Requests: 1, Tokens: 400})
	fmt.Println("second admitted:", d.Admitted, "wait:", d.Wait.Round(10*time.Millisecond))
	// Output:
	// first admitted: true
	// second admitted: false wait: 810ms
}
