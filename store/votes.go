package store

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/jobs"
)

// Finding kinds, as the acceptance rate tells them apart: a finding
// posted with a committable suggestion, or in prose alone.
const (
	FindingSuggestion = "suggestion"
	FindingProse      = "prose"
)

// TrackedFinding is a finding posted as a line comment whose reactions
// are read back: who made it and when.
type TrackedFinding struct {
	// Model is the model whose review raised it.
	Model string `json:"model"`
	// Kind is FindingSuggestion or FindingProse.
	Kind string `json:"kind"`
	// Posted is when it was posted (unix seconds).
	Posted int64 `json:"posted"`
	// What is the review it was posted in ("review:<head><round>").
	What string `json:"what,omitempty"`
}

func trackedKey(pr jobs.PR) string { return prTag(pr) + ":tracked" }

// TrackFindings records the line comments of a review whose reactions
// are read back later, by finding key; one recorded already keeps its
// first record. Kept as long as the pull request's other data, at most
// MaxPostedFindings.
func (s *Store) TrackFindings(ctx context.Context, pr jobs.PR, fs map[string]TrackedFinding) error {
	if err := addFindings(ctx, s, trackedKey(pr), "", fs); err != nil {
		return fmt.Errorf("store: track findings %s: %w", pr, err)
	}
	return nil
}

// TrackedFindings returns the pull request's tracked findings by key.
func (s *Store) TrackedFindings(ctx context.Context, pr jobs.PR) (map[string]TrackedFinding, error) {
	m, err := s.rdb.HGetAll(ctx, trackedKey(pr)).Result()
	if err != nil {
		return nil, fmt.Errorf("store: tracked findings %s: %w", pr, err)
	}
	out := make(map[string]TrackedFinding, len(m))
	for k, v := range m {
		var f TrackedFinding
		if json.Unmarshal([]byte(v), &f) == nil && f.Model != "" && f.Kind != "" {
			out[k] = f
		}
	}
	return out, nil
}

//go:embed votes.lua
var votesLua string

var votesScript = redis.NewScript(votesLua)

// votesKeep is how long a month's per-comment counts are kept: past it,
// a finding's reactions are no longer read (its pull request expired
// long before), and the totals keep what they last counted.
const votesKeep = 400 * 24 * time.Hour

// The acceptance keys share one hash tag, so votes.lua runs on Redis
// Cluster.
const acceptanceTotals = "{prq:acceptance}:totals"

func acceptanceComments(posted time.Time) string {
	return "{prq:acceptance}:comments:" + posted.UTC().Format("2006-01")
}

// SetVotes records the 👍 (up) and 👎 (down) people gave the comment of
// a tracked finding, each person once, as last read: the totals by model
// and kind move by the change since the comment was last read, so
// reading it again, or a retry, counts nothing twice; a reaction taken
// back is taken off.
func (s *Store) SetVotes(ctx context.Context, installation, commentID int64, f TrackedFinding, up, down int) error {
	comment := strconv.FormatInt(installation, 10) + "/" + strconv.FormatInt(commentID, 10)
	keys := []string{acceptanceComments(time.Unix(f.Posted, 0)), acceptanceTotals}
	if err := votesScript.Run(ctx, s.rdb, keys, comment, f.Model+"|"+f.Kind, up, down, int64(votesKeep.Seconds())).Err(); err != nil {
		return fmt.Errorf("store: set votes on %s: %w", comment, err)
	}
	return nil
}

// Acceptance is the 👍 and 👎 people gave one model's findings of one
// kind (each person once per comment).
type Acceptance struct {
	Model, Kind string
	Up, Down    int64
}

// Rate is the share of the votes that are 👍 (0 with none).
func (a Acceptance) Rate() float64 {
	if a.Up+a.Down == 0 {
		return 0
	}
	return float64(a.Up) / float64(a.Up+a.Down)
}

// HashReader reads a Redis hash (a redis.UniversalClient).
type HashReader interface {
	HGetAll(ctx context.Context, key string) *redis.MapStringStringCmd
}

// ReadAcceptance returns the findings' votes by model and kind, sorted,
// across every process: what /metrics and the dashboard show.
func ReadAcceptance(ctx context.Context, rdb HashReader) ([]Acceptance, error) {
	m, err := rdb.HGetAll(ctx, acceptanceTotals).Result()
	if err != nil {
		return nil, fmt.Errorf("store: read acceptance: %w", err)
	}
	by := map[[2]string]*Acceptance{}
	for k, v := range m {
		i := strings.LastIndexByte(k, '|')
		j := strings.LastIndexByte(k[:max(i, 0)], '|')
		if i < 0 || j < 0 {
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		mk := [2]string{k[:j], k[j+1 : i]}
		a := by[mk]
		if a == nil {
			a = &Acceptance{Model: mk[0], Kind: mk[1]}
			by[mk] = a
		}
		switch k[i+1:] {
		case "up":
			a.Up = n
		case "down":
			a.Down = n
		}
	}
	out := make([]Acceptance, 0, len(by))
	for _, a := range by {
		out = append(out, *a)
	}
	slices.SortFunc(out, func(a, b Acceptance) int {
		if c := strings.Compare(a.Model, b.Model); c != 0 {
			return c
		}
		return strings.Compare(a.Kind, b.Kind)
	})
	return out, nil
}

// votesDue orders the pull requests whose findings' reactions are to be
// read again, by when (unix ms); a member leaves when a pass claims it,
// and comes back only while the pull request has tracked findings.
const votesDue = "prq:votes:due"

// ScheduleVotes sets when the pull request's findings' reactions are to
// be read next (a later or earlier time replaces the one set).
func (s *Store) ScheduleVotes(ctx context.Context, pr jobs.PR, at time.Time) error {
	if err := s.rdb.ZAdd(ctx, votesDue, redis.Z{Score: float64(at.UnixMilli()), Member: string(mustJSON(pr))}).Err(); err != nil {
		return fmt.Errorf("store: schedule votes %s: %w", pr, err)
	}
	return nil
}

// DueVotes claims at most limit pull requests whose reactions are due by
// now: each is claimed by one caller, whichever process asks.
func (s *Store) DueVotes(ctx context.Context, now time.Time, limit int64) ([]jobs.PR, error) {
	ms, err := s.rdb.ZRangeByScore(ctx, votesDue, &redis.ZRangeBy{Min: "-inf", Max: strconv.FormatInt(now.UnixMilli(), 10), Count: limit}).Result()
	if err != nil {
		return nil, fmt.Errorf("store: due votes: %w", err)
	}
	var out []jobs.PR
	for _, m := range ms {
		n, err := s.rdb.ZRem(ctx, votesDue, m).Result()
		if err != nil {
			return out, fmt.Errorf("store: claim due votes: %w", err)
		}
		var pr jobs.PR
		if n == 1 && json.Unmarshal([]byte(m), &pr) == nil && pr.Validate() == nil {
			out = append(out, pr)
		}
	}
	return out, nil
}
