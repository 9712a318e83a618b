package harness

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// RedisInfoInt reads one integer field of a Redis INFO section (0 when
// Redis cannot be asked or has no such field).
func RedisInfoInt(ctx context.Context, rdb redis.UniversalClient, section, field string) int64 {
	info, err := rdb.Info(ctx, section).Result()
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), field+":"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// ProcStatusBytes reads a kB field of /proc/<pid>/status ("self" for this
// process), such as VmRSS or VmHWM, in bytes (0 where there is none).
func ProcStatusBytes(pid, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%s/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb * 1024
		}
	}
	return 0
}
