package doctor

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// MinRedis is the oldest Redis prq supports: ACL users in REDIS_URL and
// the script effects replication prq's Lua relies on are 6.0's.
const MinRedis = "6.0.0"

// RedisAllow names the Redis risks the operator accepts, as serve's
// --allow-eviction and --allow-no-persistence do.
type RedisAllow struct {
	Eviction, NoPersistence bool
}

// Redis checks that Redis answers, is recent enough, persists its data
// and never evicts keys. A risk allow accepts passes, its detail saying
// what it costs.
func Redis(ctx context.Context, rdb redis.UniversalClient, allow RedisAllow) []Result {
	reach := redisReachable(ctx, rdb)
	if !reach.OK {
		return []Result{reach}
	}
	info := map[string]string{}
	for _, section := range []string{"server", "persistence", "memory"} { // one each: Redis 6 takes one section
		if s, err := rdb.Info(ctx, section).Result(); err == nil {
			for k, v := range parseInfo(s) {
				info[k] = v
			}
		}
	}
	return []Result{reach, redisVersion(info),
		accepted(redisPersistence(ctx, rdb, info), allow.NoPersistence, "allow_no_persistence"),
		accepted(redisEviction(ctx, rdb, info), allow.Eviction, "allow_eviction")}
}

// accepted passes a failed check the operator accepted by setting, its
// detail kept (the risk is real) and prefixed with the setting.
func accepted(r Result, allowed bool, setting string) Result {
	if r.OK || !allowed {
		return r
	}
	r.OK, r.Detail, r.Fix = true, "accepted by "+setting+": "+r.Detail, ""
	return r
}

func redisReachable(ctx context.Context, rdb redis.UniversalClient) Result {
	r := Result{Name: "redis reachable"}
	start := time.Now()
	if err := rdb.Ping(ctx).Err(); err != nil {
		r.Detail = "PING: " + err.Error()
		r.Fix = "check REDIS_URL (host, port, password, TLS with rediss://) and that Redis runs and is reachable from here"
		return r
	}
	r.OK, r.Detail = true, fmt.Sprintf("PING answered in %s", time.Since(start).Round(time.Millisecond))
	return r
}

func redisVersion(info map[string]string) Result {
	r := Result{Name: "redis version"}
	v := info["redis_version"]
	if v == "" {
		r.OK, r.Detail = true, "not verified: INFO server gave no redis_version (a Redis-compatible service?); prq needs Redis "+MinRedis+" or later"
		return r
	}
	if versionLess(v, MinRedis) {
		r.Detail, r.Fix = fmt.Sprintf("Redis %s", v), "upgrade Redis to "+MinRedis+" or later (7.x recommended)"
		return r
	}
	r.OK, r.Detail = true, "Redis "+v
	return r
}

func redisPersistence(ctx context.Context, rdb redis.UniversalClient, info map[string]string) Result {
	r := Result{Name: "redis persistence"}
	if info["aof_enabled"] == "1" {
		fsync := "?"
		if res, err := rdb.ConfigGet(ctx, "appendfsync").Result(); err == nil {
			fsync = res["appendfsync"]
		}
		r.OK, r.Detail = true, "AOF on (appendfsync "+fsync+")"
		return r
	}
	res, err := rdb.ConfigGet(ctx, "save").Result()
	if err != nil {
		r.OK, r.Detail = true, "not verified: CONFIG GET is not allowed (a managed Redis?); make sure its persistence (AOF or snapshots) is on"
		return r
	}
	if save := strings.TrimSpace(res["save"]); save != "" {
		r.OK, r.Detail = true, "RDB snapshots (save "+save+"); AOF is off, so a crash loses the writes since the last snapshot"
		return r
	}
	r.Detail = "neither AOF nor RDB snapshots: a Redis restart loses every queued job"
	r.Fix = "turn on AOF: redis-server --appendonly yes --appendfsync everysec (or CONFIG SET appendonly yes, then CONFIG REWRITE)"
	return r
}

func redisEviction(ctx context.Context, rdb redis.UniversalClient, info map[string]string) Result {
	r := Result{Name: "redis eviction"}
	mem := ""
	if used, maxm := info["used_memory"], info["maxmemory"]; used != "" {
		if n, _ := strconv.ParseInt(maxm, 10, 64); n > 0 {
			u, _ := strconv.ParseInt(used, 10, 64)
			mem = fmt.Sprintf("; memory %s of %s (%.0f%%)", mib(u), mib(n), 100*float64(u)/float64(n))
		} else {
			u, _ := strconv.ParseInt(used, 10, 64)
			mem = fmt.Sprintf("; memory %s, no maxmemory", mib(u))
		}
	}
	policy := info["maxmemory_policy"]
	if res, err := rdb.ConfigGet(ctx, "maxmemory-policy").Result(); err == nil && res["maxmemory-policy"] != "" {
		policy = res["maxmemory-policy"]
	}
	switch policy {
	case "":
		r.OK, r.Detail = true, "not verified: neither CONFIG GET nor INFO gives maxmemory-policy; make sure it is noeviction"+mem
	case "noeviction":
		r.OK, r.Detail = true, "maxmemory-policy noeviction"+mem
	default:
		r.Detail = fmt.Sprintf("maxmemory-policy is %s: Redis will delete queued jobs, leases and limiter state when memory runs out%s", policy, mem)
		r.Fix = "set maxmemory-policy noeviction (redis-cli CONFIG SET maxmemory-policy noeviction, then CONFIG REWRITE; on a managed Redis, in its parameter group)"
	}
	return r
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// parseInfo reads INFO's "field:value" lines.
func parseInfo(s string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), ":"); ok && !strings.HasPrefix(k, "#") {
			m[k] = v
		}
	}
	return m
}

// versionLess compares dotted versions numerically ("6.2.14" < "7.0.0").
func versionLess(a, b string) bool {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < max(len(pa), len(pb)); i++ {
		var x, y int
		if i < len(pa) {
			x, _ = strconv.Atoi(pa[i])
		}
		if i < len(pb) {
			y, _ = strconv.Atoi(pb[i])
		}
		if x != y {
			return x < y
		}
	}
	return false
}
