package server

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// RedisChecks are the unsafe Redis set-ups an operator may accept.
type RedisChecks struct {
	// AllowEviction accepts a maxmemory-policy other than noeviction.
	AllowEviction bool
	// AllowNoPersistence accepts a Redis with neither AOF nor RDB.
	AllowNoPersistence bool
}

// Embedded is the connection to a Redis the process runs itself, in
// memory (the demo's): Open does not check its eviction or persistence
// — whoever starts one knows it is neither durable nor shared, and says
// so — where every other Redis is checked and warned about.
type Embedded struct{ asynq.RedisClientOpt }

// Open connects prq's own client (the one shared by the store,
// limiter, scheduler and asynq) and checks it is safe for jobs.
func Open(ctx context.Context, opt asynq.RedisConnOpt, checks RedisChecks, log *slog.Logger) (redis.UniversalClient, error) {
	rdb, ok := opt.MakeRedisClient().(redis.UniversalClient)
	if !ok {
		return nil, fmt.Errorf("redis: unexpected client type")
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("redis: ping: %w", err)
	}
	if _, ok := opt.(Embedded); ok {
		return rdb, nil
	}
	if err := checkEviction(ctx, rdb, checks.AllowEviction, log); err != nil {
		rdb.Close()
		return nil, err
	}
	if err := checkPersistence(ctx, rdb, checks.AllowNoPersistence, log); err != nil {
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

// checkPersistence refuses a Redis with neither AOF nor RDB snapshots: a
// restart of it loses every job whose delivery GitHub was already told
// succeeded. On a cluster every master is checked.
func checkPersistence(ctx context.Context, rdb redis.UniversalClient, allow bool, log *slog.Logger) error {
	var problem string
	check := func(ctx context.Context, c *redis.Client) error {
		p, known := persistence(ctx, c)
		if !known {
			log.WarnContext(ctx, "could not read redis's persistence settings (CONFIG GET is disabled?); make sure AOF or RDB is on", "addr", c.Options().Addr)
			return nil
		}
		if p != "" && problem == "" {
			problem = p
		}
		return nil
	}
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		if err := c.ForEachMaster(ctx, check); err != nil {
			log.WarnContext(ctx, "could not check every master's persistence", "err", err)
		}
	case *redis.Client:
		check(ctx, c)
	default:
		return nil
	}
	if problem == "" {
		return nil
	}
	if allow {
		log.WarnContext(ctx, "redis has no persistence: a redis restart loses queued jobs", "persistence", problem)
		return nil
	}
	return fmt.Errorf("redis: %s: a restart would lose queued jobs and acknowledged deliveries; "+
		"turn on AOF (redis-cli CONFIG SET appendonly yes) or RDB snapshots (CONFIG SET save \"3600 1 300 100 60 10000\"), "+
		"or start with --allow-no-persistence (PRQ_ALLOW_NO_PERSISTENCE=true)", problem)
}

// persistence says what is missing ("" when AOF or RDB is on); known is
// false when Redis will not say. CONFIG GET is asked first; where it is
// disabled, INFO persistence still tells whether AOF is on.
func persistence(ctx context.Context, c *redis.Client) (problem string, known bool) {
	if res, err := c.ConfigGet(ctx, "appendonly").Result(); err == nil && res["appendonly"] != "" {
		save, err := c.ConfigGet(ctx, "save").Result()
		if err != nil {
			return "", false
		}
		if res["appendonly"] == "yes" || strings.TrimSpace(save["save"]) != "" {
			return "", true
		}
		return `neither AOF (appendonly is "no") nor RDB (save is "") is on`, true
	}
	info, err := c.Info(ctx, "persistence").Result()
	if err != nil {
		return "", false
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "aof_enabled:"); ok && v == "1" {
			return "", true
		}
	}
	return "", false
}
