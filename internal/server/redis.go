package server

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// Open connects prq's own client (the one shared by the store,
// limiter, scheduler and asynq) and checks it is safe for jobs.
func Open(ctx context.Context, opt asynq.RedisConnOpt, allowEviction bool, log *slog.Logger) (redis.UniversalClient, error) {
	rdb, ok := opt.MakeRedisClient().(redis.UniversalClient)
	if !ok {
		return nil, fmt.Errorf("redis: unexpected client type")
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("redis: ping: %w", err)
	}
	if err := checkEviction(ctx, rdb, allowEviction, log); err != nil {
		rdb.Close()
		return nil, err
	}
	return rdb, nil
}

// checkEviction refuses a Redis that may evict keys: eviction silently
// deletes queued jobs, leases and limiter state.
func checkEviction(ctx context.Context, rdb redis.UniversalClient, allow bool, log *slog.Logger) error {
	res, err := rdb.ConfigGet(ctx, "maxmemory-policy").Result()
	if err != nil {
		log.WarnContext(ctx, "could not read maxmemory-policy; make sure it is noeviction", "err", err)
		return nil
	}
	policy := res["maxmemory-policy"]
	if policy == "" || policy == "noeviction" {
		return nil
	}
	if allow {
		log.WarnContext(ctx, "redis may evict keys: jobs and leases can vanish", "maxmemory_policy", policy)
		return nil
	}
	return fmt.Errorf("redis: maxmemory-policy is %q: eviction silently deletes queued jobs and leases; "+
		"set `maxmemory-policy noeviction` (redis-cli CONFIG SET maxmemory-policy noeviction) or start with --allow-eviction", policy)
}
