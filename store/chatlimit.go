package store

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/jobs"
)

//go:embed chatlimit.lua
var chatLimitSource string

var chatLimitScript = redis.NewScript(chatLimitSource)

// ChatLimits configures a ChatLimiter.
type ChatLimits struct {
	// PerUser is how many comments one user may send the bot per window
	// in one installation. 0: no limit.
	PerUser int
	// PerPR is how many comments one pull request may send the bot per
	// window. 0: no limit.
	PerPR int
	// Window is the sliding window. Defaults to one hour.
	Window time.Duration
	// NowFunc replaces Redis TIME (deterministic tests only).
	NowFunc func() time.Time
}

// ChatLimiter caps the chat a user and a pull request can start: an
// exact sliding-window log per user and per PR in Redis, decided in one
// script on Redis's clock, so every serve process shares one count.
type ChatLimiter struct {
	rdb redis.UniversalClient
	cfg ChatLimits
}

// NewChatLimiter returns a limiter; negative limits are refused.
func NewChatLimiter(rdb redis.UniversalClient, cfg ChatLimits) (*ChatLimiter, error) {
	switch {
	case rdb == nil:
		return nil, errors.New("store: chat limiter: a Redis client is required")
	case cfg.PerUser < 0:
		return nil, fmt.Errorf("store: chat limiter: per-user limit must not be negative, got %d", cfg.PerUser)
	case cfg.PerPR < 0:
		return nil, fmt.Errorf("store: chat limiter: per-PR limit must not be negative, got %d", cfg.PerPR)
	case cfg.Window < 0:
		return nil, fmt.Errorf("store: chat limiter: window must not be negative, got %s", cfg.Window)
	}
	if cfg.Window == 0 {
		cfg.Window = time.Hour
	}
	return &ChatLimiter{rdb: rdb, cfg: cfg}, nil
}

// chatKeys names a comment's keys in chatlimit.lua's KEYS order; they
// share the installation's hash tag.
func chatKeys(pr jobs.PR, user string) []string {
	p := "{prq:chat:" + strconv.FormatInt(pr.Installation, 10) + "}:"
	u := p + "user:" + strings.ToLower(user)
	r := p + "pr:" + pr.Key()
	return []string{u, r, u + ":refused", r + ":refused"}
}

// AllowChat counts a comment to the bot against its author's and its
// pull request's limits. A comment within both is allowed (and counted;
// a redelivered one is allowed again without counting twice). Over a
// limit it is refused until retryAt; refuse is true for the first
// refused comment while that limit holds (and for that comment
// redelivered), so the bot answers it once, and false for later ones,
// which are dropped without a reply.
func (l *ChatLimiter) AllowChat(ctx context.Context, pr jobs.PR, user string, commentID int64) (allowed, refuse bool, retryAt time.Time, err error) {
	if l.cfg.PerUser == 0 && l.cfg.PerPR == 0 {
		return true, false, time.Time{}, nil
	}
	now := ""
	if l.cfg.NowFunc != nil {
		now = strconv.FormatInt(l.cfg.NowFunc().UnixMicro(), 10)
	}
	res, err := chatLimitScript.Run(ctx, l.rdb, chatKeys(pr, user), now, l.cfg.Window.Microseconds(), l.cfg.PerUser, l.cfg.PerPR,
		strconv.FormatInt(commentID, 10)).Slice()
	if err != nil {
		return false, false, time.Time{}, fmt.Errorf("store: chat limit %s: %w", pr.Key(), err)
	}
	if len(res) != 3 {
		return false, false, time.Time{}, fmt.Errorf("store: chat limit %s: unexpected reply", pr.Key())
	}
	ok, _ := res[0].(int64)
	us, _ := strconv.ParseInt(fmt.Sprint(res[1]), 10, 64)
	ref, _ := res[2].(int64)
	if ok == 1 {
		return true, false, time.Time{}, nil
	}
	return false, ref == 1, time.UnixMicro(us), nil
}
