package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

func replayKey(digest string) string { return "prq:wh:replay:" + digest }

// ClaimDelivery records that the signed delivery body whose digest is
// digest came as delivery, for window, unless it is already recorded: it
// returns the delivery id that holds the digest (delivery itself when it
// was free, or when GitHub redelivers under the same id). A replay of a
// captured body under a new id finds the first id (webhook.Replays).
// One SET NX GET (setNXGet).
func (s *Store) ClaimDelivery(ctx context.Context, digest, delivery string, window time.Duration) (string, error) {
	held, err := s.setNXGet(ctx, replayKey(digest), delivery, window)
	if errors.Is(err, redis.Nil) {
		return delivery, nil
	}
	if err != nil {
		return "", fmt.Errorf("store: claim delivery %s: %w", delivery, err)
	}
	return held, nil
}

// ReleaseDelivery frees digest if delivery still holds it: work that was
// not saved must be takeable again when GitHub redelivers it.
func (s *Store) ReleaseDelivery(ctx context.Context, digest, delivery string) error {
	if err := unlockScript.Run(ctx, s.rdb, []string{replayKey(digest)}, delivery).Err(); err != nil {
		return fmt.Errorf("store: release delivery %s: %w", delivery, err)
	}
	return nil
}
