package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Learnings are what maintainers told prq about their code (`@prq learn
// …`): kept per repository and per installation (its organisation), in
// the order they were added, each list bounded by MaxLearnings entries of
// at most MaxLearningChars characters, and kept LearningsTTL after it was
// last changed or read by a plan.
const (
	MaxLearnings     = 30
	MaxLearningChars = 500
	LearningsTTL     = 400 * 24 * time.Hour
)

// ErrLearningsFull is returned by AddLearning when the list holds
// MaxLearnings already.
var ErrLearningsFull = errors.New("store: learnings full")

// Learning is one learning: its text, who gave it, where, and when. ID is
// the comment that gave it (an add retried with it adds nothing).
type Learning struct {
	ID     int64     `json:"id"`
	Text   string    `json:"text"`
	Author string    `json:"author"`
	Source string    `json:"source,omitempty"` // the comment's link
	At     time.Time `json:"at"`
}

// LearningScope names a list of learnings: an installation's
// organisation-wide list (Repo ""), or one repository's.
type LearningScope struct {
	Installation int64
	Owner, Repo  string
}

func (l LearningScope) key() string {
	k := "prq:learnings:" + strconv.FormatInt(l.Installation, 10)
	if l.Repo != "" {
		k += ":" + l.Owner + "/" + l.Repo
	}
	return k
}

// addLearningScript: KEYS the list; ARGV the entry, its id, the bound,
// the TTL in ms. Returns the entry's position (an entry of that id
// already there: its own), or 0 when the list is full.
var addLearningScript = redis.NewScript(`
local all = redis.call('LRANGE', KEYS[1], 0, -1)
for i, v in ipairs(all) do
  local ok, e = pcall(cjson.decode, v)
  if ok and type(e) == 'table' and tostring(e.id) == ARGV[2] then return i end
end
if #all >= tonumber(ARGV[3]) then return 0 end
local n = redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return n
`)

// removeLearningScript: KEYS the list; ARGV the id. Returns 1 when an
// entry of that id was removed.
var removeLearningScript = redis.NewScript(`
for _, v in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do
  local ok, e = pcall(cjson.decode, v)
  if ok and type(e) == 'table' and tostring(e.id) == ARGV[1] then
    redis.call('LREM', KEYS[1], 1, v)
    return 1
  end
end
return 0
`)

// AddLearning appends l to scope's list once (by l.ID) and returns its
// position, 1-based; ErrLearningsFull when the list is full.
func (s *Store) AddLearning(ctx context.Context, scope LearningScope, l Learning) (int, error) {
	if l.ID <= 0 || l.Text == "" || len([]rune(l.Text)) > MaxLearningChars {
		return 0, fmt.Errorf("store: add learning: want an id and 1 to %d characters of text", MaxLearningChars)
	}
	b, _ := json.Marshal(l)
	n, err := addLearningScript.Run(ctx, s.rdb, []string{scope.key()}, b, strconv.FormatInt(l.ID, 10), MaxLearnings, LearningsTTL.Milliseconds()).Int()
	if err != nil {
		return 0, fmt.Errorf("store: add learning: %w", err)
	}
	if n == 0 {
		return 0, ErrLearningsFull
	}
	return n, nil
}

// RemoveLearning removes the learning given by comment id from scope's
// list; false when there is none (removed already).
func (s *Store) RemoveLearning(ctx context.Context, scope LearningScope, id int64) (bool, error) {
	n, err := removeLearningScript.Run(ctx, s.rdb, []string{scope.key()}, strconv.FormatInt(id, 10)).Int()
	if err != nil {
		return false, fmt.Errorf("store: remove learning: %w", err)
	}
	return n == 1, nil
}

// Learnings returns scope's learnings in the order they were added (an
// entry that does not decode is left out), and keeps them another
// LearningsTTL.
func (s *Store) Learnings(ctx context.Context, scope LearningScope) ([]Learning, error) {
	pipe := s.rdb.Pipeline()
	r := pipe.LRange(ctx, scope.key(), 0, MaxLearnings-1)
	pipe.PExpire(ctx, scope.key(), LearningsTTL)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("store: learnings: %w", err)
	}
	var out []Learning
	for _, v := range r.Val() {
		var l Learning
		if json.Unmarshal([]byte(v), &l) == nil && l.ID > 0 {
			out = append(out, l)
		}
	}
	return out, nil
}
