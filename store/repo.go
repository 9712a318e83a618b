package store

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/prq-dev/prq/jobs"
)

func settingsKey(pr jobs.PR) string { return prTag(pr) + ":settings" }

// SetRepoSettings records what the webhook needs of the repository
// configuration (.prq.yaml) in effect for a pull request, as its last
// plan read it at its base (each pull request its own: another's base
// may hold another file).
func (s *Store) SetRepoSettings(ctx context.Context, pr jobs.PR, rs jobs.RepoSettings) error {
	k := settingsKey(pr)
	pipe := s.rdb.Pipeline()
	pipe.HSet(ctx, k, "chat_off", boolField(rs.ChatOff), "drafts", boolField(rs.Drafts), "instructions", rs.Instructions, "language", rs.Language)
	pipe.PExpire(ctx, k, s.RunTTL)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("store: set repository settings of %s/%s: %w", pr.Owner, pr.Repo, err)
	}
	return nil
}

// RepoSettings returns a pull request's repository settings as its last
// plan recorded them; known is false when no plan has yet.
func (s *Store) RepoSettings(ctx context.Context, pr jobs.PR) (rs jobs.RepoSettings, known bool, err error) {
	m, err := s.rdb.HGetAll(ctx, settingsKey(pr)).Result()
	if err != nil {
		return rs, false, fmt.Errorf("store: repository settings of %s/%s: %w", pr.Owner, pr.Repo, err)
	}
	if len(m) == 0 {
		return rs, false, nil
	}
	return jobs.RepoSettings{ChatOff: m["chat_off"] == "1", Drafts: m["drafts"] == "1", Instructions: m["instructions"], Language: m["language"]}, true, nil
}

func boolField(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func controlKey(pr jobs.PR) string { return prTag(pr) + ":control" }

// Control is what the people on a pull request said of its automatic
// reviews: paused (until resumed) or ignored.
type Control struct {
	Paused, Ignored bool
}

// SetPaused pauses or resumes a pull request's automatic reviews.
func (s *Store) SetPaused(ctx context.Context, pr jobs.PR, paused bool) error {
	return s.setControl(ctx, pr, "paused", paused)
}

// SetIgnored marks a pull request never to be reviewed automatically.
func (s *Store) SetIgnored(ctx context.Context, pr jobs.PR) error {
	return s.setControl(ctx, pr, "ignored", true)
}

func (s *Store) setControl(ctx context.Context, pr jobs.PR, field string, on bool) error {
	k := controlKey(pr)
	pipe := s.rdb.Pipeline()
	pipe.HSet(ctx, k, field, boolField(on))
	pipe.PExpire(ctx, k, s.RunTTL)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("store: set %s of %s: %w", field, pr, err)
	}
	return nil
}

// Control returns what was said of a pull request's automatic reviews,
// and keeps it another retention: a pause or ignore lasts while the pull
// request is active.
func (s *Store) Control(ctx context.Context, pr jobs.PR) (Control, error) {
	k := controlKey(pr)
	pipe := s.rdb.Pipeline()
	all := pipe.HGetAll(ctx, k)
	pipe.PExpire(ctx, k, s.RunTTL)
	if _, err := pipe.Exec(ctx); err != nil {
		return Control{}, fmt.Errorf("store: control of %s: %w", pr, err)
	}
	m := all.Val()
	return Control{Paused: m["paused"] == "1", Ignored: m["ignored"] == "1"}, nil
}

func lastConfigKey(inst int64, repo string) string {
	return "prq:repocfg:" + strconv.FormatInt(inst, 10) + ":" + repo
}

// LastConfigTTL is how long a repository's last valid configuration
// file is kept after it was last read valid.
const LastConfigTTL = 30 * 24 * time.Hour

// LastConfig is a repository's last valid configuration file: its blob
// sha, where it was read, and its content.
type LastConfig struct {
	SHA, Source string
	Content     []byte
}

// SetLastConfig keeps a repository's (owner/name) last valid
// configuration file, for LastConfigTTL.
func (s *Store) SetLastConfig(ctx context.Context, inst int64, repo string, c LastConfig) error {
	k := lastConfigKey(inst, repo)
	pipe := s.rdb.Pipeline()
	pipe.HSet(ctx, k, "sha", c.SHA, "source", c.Source, "content", c.Content)
	pipe.PExpire(ctx, k, LastConfigTTL)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("store: keep the last valid configuration of %s: %w", repo, err)
	}
	return nil
}

// LastConfig returns a repository's last valid configuration file; ok
// is false when none is kept.
func (s *Store) LastConfig(ctx context.Context, inst int64, repo string) (c LastConfig, ok bool, err error) {
	m, err := s.rdb.HGetAll(ctx, lastConfigKey(inst, repo)).Result()
	if err != nil {
		return c, false, fmt.Errorf("store: the last valid configuration of %s: %w", repo, err)
	}
	if m["sha"] == "" {
		return c, false, nil
	}
	return LastConfig{SHA: m["sha"], Source: m["source"], Content: []byte(m["content"])}, true, nil
}

// TouchLastConfig renews the lifetime of a repository's last valid
// configuration file (it was read valid again).
func (s *Store) TouchLastConfig(ctx context.Context, inst int64, repo string) error {
	if err := s.rdb.PExpire(ctx, lastConfigKey(inst, repo), LastConfigTTL).Err(); err != nil {
		return fmt.Errorf("store: renew the last valid configuration of %s: %w", repo, err)
	}
	return nil
}
