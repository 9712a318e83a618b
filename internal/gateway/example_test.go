package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/internal/gateway"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/ratelimit"
)

// A virtual key is printed once and stored only as its SHA-256; rotating
// it keeps its id (and so its quota and usage) and retires the old secret.
func ExampleKeys() {
	srv, err := redistest.Start()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Stop()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	ctx := context.Background()

	keys := gateway.NewKeys(rdb)
	secret, k, err := keys.Create(ctx, gateway.Spec{Name: "docs-bot", Tier: "paid", QuotaTokens: 1000, QuotaPeriod: ratelimit.Day})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(strings.HasPrefix(secret, gateway.KeyPrefix), k.Tier, k.QuotaTokens, k.QuotaPeriod)
	got, _ := keys.Authenticate(ctx, secret)
	fmt.Println(got.ID == k.ID)
	rotated, _, _ := keys.Rotate(ctx, k.ID)
	_, err = keys.Authenticate(ctx, secret)
	fmt.Println(errors.Is(err, gateway.ErrUnknownKey))
	got, _ = keys.Authenticate(ctx, rotated)
	fmt.Println(got.ID == k.ID)
	// Output:
	// true paid 1000 day
	// true
	// true
	// true
}
