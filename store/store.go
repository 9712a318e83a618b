// Package store keeps prq's durable state in Redis: installations and
// their plans, pull-request runs with their files and per-file results,
// progress counters, and what was posted to GitHub (so nothing is posted
// twice). It does not queue jobs (asynq does) or decide admission.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/jobs"
)

// ErrNotFound is returned when a record does not exist.
var ErrNotFound = errors.New("store: not found")

// Store is prq's Redis-backed state.
//
// A write (or a read) and the renewal of its key's retention go in one
// pipeline, not a MULTI: a renewal lost with its connection only leaves
// the key to the next write's, and a transaction would cost two more
// commands for nothing a reader could see.
type Store struct {
	rdb redis.UniversalClient
	// DefaultTier is the tier of installations without a plan.
	DefaultTier jobs.Tier
	// RunTTL is how long a PR run's data lives after its last change.
	// Defaults to 14 days.
	RunTTL time.Duration
	// NowFunc is the clock. Defaults to time.Now.
	NowFunc func() time.Time
	// noSetNXGet: this Redis refused SET NX GET (before 7.0); setNXGet
	// sends a SET NX and a GET instead
	noSetNXGet atomic.Bool
}

// setNXGet sets key to value for ttl unless it exists, and returns what
// it held (redis.Nil: it was free, and holds value now): one SET NX GET,
// or, on a Redis before 7.0 (which refuses NX with GET), a SET NX then a
// GET of the holder.
func (s *Store) setNXGet(ctx context.Context, key, value string, ttl time.Duration) (string, error) {
	if !s.noSetNXGet.Load() {
		held, err := s.rdb.SetArgs(ctx, key, value, redis.SetArgs{Mode: "NX", Get: true, TTL: ttl}).Result()
		if err == nil || errors.Is(err, redis.Nil) || !strings.Contains(err.Error(), "syntax error") {
			return held, err
		}
		s.noSetNXGet.Store(true)
	}
	for range 3 {
		ok, err := s.rdb.SetNX(ctx, key, value, ttl).Result()
		if err != nil {
			return "", err
		}
		if ok {
			return "", redis.Nil
		}
		held, err := s.rdb.Get(ctx, key).Result()
		if !errors.Is(err, redis.Nil) {
			return held, err
		}
		// it expired between the two: again
	}
	return "", fmt.Errorf("set %s: held and gone three times over", key)
}

// New returns a store on rdb.
func New(rdb redis.UniversalClient, defaultTier jobs.Tier) *Store {
	if defaultTier == "" {
		defaultTier = jobs.TierFree
	}
	return &Store{rdb: rdb, DefaultTier: defaultTier, RunTTL: 14 * 24 * time.Hour, NowFunc: time.Now}
}

// Redis returns the client.
func (s *Store) Redis() redis.UniversalClient { return s.rdb }

// Plan is an installation's plan.
type Plan struct {
	Installation int64     `json:"installation"`
	Account      string    `json:"account,omitempty"`
	AccountID    int64     `json:"account_id,omitempty"`
	Tier         jobs.Tier `json:"tier"`
	Reason       string    `json:"reason,omitempty"` // paid_user, trial_user, open_source_user, ...
	Suspended    bool      `json:"suspended,omitempty"`
	Deleted      bool      `json:"deleted,omitempty"`
	// TokenRefused is why GitHub refused the installation a token
	// ("uninstalled", "suspended"), seen by a worker before the webhook
	// said so; cleared when the installation is created or unsuspended.
	TokenRefused string    `json:"token_refused,omitempty"`
	Default      bool      `json:"default,omitempty"`  // no plan stored: the default tier
	Explicit     bool      `json:"explicit,omitempty"` // set by an operator: wins over Marketplace
	UpdatedAt    time.Time `json:"updated_at"`
}

func instKey(id int64) string { return "prq:inst:" + strconv.FormatInt(id, 10) }

const instIndex = "prq:insts"

// SetPlan stores an installation's plan.
func (s *Store) SetPlan(ctx context.Context, p Plan) error {
	if p.Installation <= 0 {
		return fmt.Errorf("store: set plan: installation must be positive, got %d", p.Installation)
	}
	if _, err := jobs.ParseTier(string(p.Tier)); err != nil {
		return fmt.Errorf("store: set plan: %w", err)
	}
	p.Default = false
	p.UpdatedAt = s.NowFunc().UTC()
	b, _ := json.Marshal(p)
	// two slots on Redis Cluster: the record first, then the index
	if err := s.rdb.Set(ctx, instKey(p.Installation), b, 0).Err(); err != nil {
		return fmt.Errorf("store: set plan %d: %w", p.Installation, err)
	}
	if err := s.rdb.SAdd(ctx, instIndex, p.Installation).Err(); err != nil {
		return fmt.Errorf("store: set plan %d: %w", p.Installation, err)
	}
	return nil
}

// UpdatePlan applies fn to the stored plan (or a default one) and saves it.
func (s *Store) UpdatePlan(ctx context.Context, id int64, fn func(*Plan)) error {
	p, err := s.GetPlan(ctx, id)
	if err != nil {
		return err
	}
	fn(&p)
	return s.SetPlan(ctx, p)
}

// GetPlan returns an installation's plan, or the default tier's when none
// is stored (Default is then true).
func (s *Store) GetPlan(ctx context.Context, id int64) (Plan, error) {
	return s.planOf(id, s.rdb.Get(ctx, instKey(id)))
}

// planOf decodes an installation's plan as read by cmd.
func (s *Store) planOf(id int64, cmd *redis.StringCmd) (Plan, error) {
	b, err := cmd.Bytes()
	if errors.Is(err, redis.Nil) {
		return Plan{Installation: id, Tier: s.DefaultTier, Default: true}, nil
	}
	if err != nil {
		return Plan{}, fmt.Errorf("store: get plan %d: %w", id, err)
	}
	var p Plan
	if err := json.Unmarshal(b, &p); err != nil {
		return Plan{}, fmt.Errorf("store: get plan %d: %w", id, err)
	}
	return p, nil
}

// ListPlans returns every stored plan.
func (s *Store) ListPlans(ctx context.Context) ([]Plan, error) {
	ids, err := s.rdb.SMembers(ctx, instIndex).Result()
	if err != nil {
		return nil, fmt.Errorf("store: list plans: %w", err)
	}
	var out []Plan
	for _, v := range ids {
		id, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			continue
		}
		p, err := s.GetPlan(ctx, id)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

func accountKey(id int64) string { return "prq:account:" + strconv.FormatInt(id, 10) }

// Tier returns the tier an installation's jobs run in: its own plan, else
// its account's Marketplace plan, else the default tier.
func (s *Store) Tier(ctx context.Context, inst int64) (jobs.Tier, error) {
	p, err := s.GetPlan(ctx, inst)
	if err != nil {
		return "", err
	}
	return s.tierOf(ctx, p), nil
}

// Tenant returns what Tier and Disabled return, from one read of the
// installation's plan: the tier its jobs run in, and why its work must
// not run ("" when it may).
func (s *Store) Tenant(ctx context.Context, inst int64) (tier jobs.Tier, disabled string, err error) {
	p, err := s.GetPlan(ctx, inst)
	if err != nil {
		return "", "", err
	}
	if why := disabledOf(p); why != "" {
		return p.Tier, why, nil
	}
	return s.tierOf(ctx, p), "", nil
}

func (s *Store) tierOf(ctx context.Context, p Plan) jobs.Tier {
	if p.Explicit {
		return p.Tier
	}
	if p.AccountID != 0 {
		t, err := s.rdb.HGet(ctx, accountKey(p.AccountID), "tier").Result()
		if err == nil {
			if tier, err := jobs.ParseTier(t); err == nil {
				return tier
			}
		}
	}
	return p.Tier
}

// SetInstallation records an installation event: created, deleted,
// suspend, unsuspend. Its plan tier is kept.
func (s *Store) SetInstallation(ctx context.Context, inst int64, account string, accountID int64, action string) error {
	return s.UpdatePlan(ctx, inst, func(p *Plan) {
		if account != "" {
			p.Account = account
		}
		if accountID != 0 {
			p.AccountID = accountID
		}
		switch action {
		case "deleted":
			p.Deleted = true
		case "suspend":
			p.Suspended = true
		case "unsuspend":
			p.Suspended, p.TokenRefused = false, ""
		case "created":
			p.Deleted, p.Suspended, p.TokenRefused = false, false, ""
		}
		if !p.Explicit {
			p.Tier = s.DefaultTier
		}
	})
}

// SetAccountTier records a Marketplace plan for an account.
func (s *Store) SetAccountTier(ctx context.Context, accountID int64, tier jobs.Tier, reason string) error {
	if err := s.rdb.HSet(ctx, accountKey(accountID), "tier", string(tier), "reason", reason, "updated", s.NowFunc().Unix()).Err(); err != nil {
		return fmt.Errorf("store: account tier %d: %w", accountID, err)
	}
	return nil
}

// Why an installation's work does not run (Disabled).
const (
	DisabledDeleted      = "deleted"
	DisabledSuspended    = "suspended"
	DisabledTokenRefused = "token_refused"
)

// Disabled returns why an installation's work must not run ("" when it
// may): the App was uninstalled, the installation is suspended, or GitHub
// refused it a token.
func (s *Store) Disabled(ctx context.Context, inst int64) (string, error) {
	p, err := s.GetPlan(ctx, inst)
	if err != nil {
		return "", err
	}
	return disabledOf(p), nil
}

func disabledOf(p Plan) string {
	switch {
	case p.Deleted:
		return DisabledDeleted
	case p.Suspended:
		return DisabledSuspended
	case p.TokenRefused != "":
		return DisabledTokenRefused
	}
	return ""
}

// MarkTokenRefused records that GitHub refuses the installation a token
// (why: "uninstalled" or "suspended"): its work stops until the
// installation is created or unsuspended again.
func (s *Store) MarkTokenRefused(ctx context.Context, inst int64, why string) error {
	return s.UpdatePlan(ctx, inst, func(p *Plan) { p.TokenRefused = why })
}
