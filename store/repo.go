package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/jobs"
)

// repoSettingTTL is how long a repository setting the planner recorded
// holds without a plan renewing it.
const repoSettingTTL = 30 * 24 * time.Hour

func chatOffKey(pr jobs.PR) string {
	return "prq:repo:" + jobs.PR{Installation: pr.Installation, Owner: pr.Owner, Repo: pr.Repo}.Key() + ":chat_off"
}

// SetChatOff records whether a repository's configuration turns chat
// off (.prq.yaml chat: false), as the last plan of one of its pull
// requests read it.
func (s *Store) SetChatOff(ctx context.Context, pr jobs.PR, off bool) error {
	var err error
	if off {
		err = s.rdb.Set(ctx, chatOffKey(pr), "1", repoSettingTTL).Err()
	} else {
		err = s.rdb.Del(ctx, chatOffKey(pr)).Err()
	}
	if err != nil {
		return fmt.Errorf("store: set chat of %s/%s: %w", pr.Owner, pr.Repo, err)
	}
	return nil
}

// ChatOff reports whether a repository's configuration turns chat off.
func (s *Store) ChatOff(ctx context.Context, pr jobs.PR) (bool, error) {
	err := s.rdb.Get(ctx, chatOffKey(pr)).Err()
	switch {
	case errors.Is(err, redis.Nil):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("store: chat of %s/%s: %w", pr.Owner, pr.Repo, err)
	}
	return true, nil
}
