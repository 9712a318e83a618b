package gateway

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/ratelimit"
)

// KeyPrefix starts every virtual key.
const KeyPrefix = "prq-sk-"

// Tiers a key may have: chat is admission's chat class, the others its
// batch tiers.
var Tiers = []string{admission.ClassChat, string(jobs.TierPaid), string(jobs.TierTrial), string(jobs.TierFree)}

// Key is a virtual key's record. The secret is never stored: only its
// SHA-256.
type Key struct {
	// ID is the first 12 hex digits of the SHA-256 of the key as created;
	// it stays when the key is rotated, and names the key in metrics and
	// logs.
	ID   string `json:"id"`
	Name string `json:"name"`
	Tier string `json:"tier"`
	// QuotaTokens per QuotaPeriod (input plus output); 0: no quota.
	QuotaTokens int64 `json:"quota_tokens"`
	// QuotaDollars per QuotaPeriod (US dollars at the models' prices);
	// 0: no quota. A call must fit both quotas.
	QuotaDollars float64          `json:"quota_dollars"`
	QuotaPeriod  ratelimit.Period `json:"quota_period"`
	// TPM caps the key's tokens per minute (0: none).
	TPM int64 `json:"tpm,omitempty"`
	// Models the key may use (empty: all).
	Models  []string  `json:"models,omitempty"`
	Created time.Time `json:"created"`
	Rotated time.Time `json:"rotated,omitzero"`
	Revoked time.Time `json:"revoked,omitzero"`
	// Hash is the current secret's SHA-256, hex (empty in Public).
	Hash string `json:"hash,omitempty"`
}

// Spec is what a new key is created with.
type Spec struct {
	Name         string           `json:"name"`
	Tier         string           `json:"tier"`
	QuotaTokens  int64            `json:"quota_tokens"`
	QuotaDollars float64          `json:"quota_dollars"`
	QuotaPeriod  ratelimit.Period `json:"quota_period"`
	TPM          int64            `json:"tpm"`
	Models       []string         `json:"models"`
}

// The largest limits a key may have: what the limiters hold exactly (a
// key's tokens per minute are a bucket level scaled by the minute in µs,
// a quota is summed in Lua's doubles, exact below 2^53: a million
// dollars is 10^15 nano-dollars), far above any real use.
const (
	MaxQuotaTokens  = 1 << 50 // 1,125,899,906,842,624
	MaxQuotaDollars = 1e6
	MaxTPM          = 1 << 33 // 8,589,934,592
)

// checkLimits reports a quota or tokens per minute the limiters cannot
// hold, naming the flag (and the API's field).
func checkLimits(quota int64, dollars float64, tpm int64) error {
	switch {
	case quota < 0 || quota > MaxQuotaTokens:
		return fmt.Errorf("--quota-tokens (quota_tokens) must be between 0 and %d, got %d", int64(MaxQuotaTokens), quota)
	case !(dollars >= 0 && dollars <= MaxQuotaDollars): // NaN too
		return fmt.Errorf("--quota-dollars (quota_dollars) must be between 0 and %d US dollars, got %v", int64(MaxQuotaDollars), dollars)
	case tpm < 0 || tpm > MaxTPM:
		return fmt.Errorf("--tpm (tpm) must be between 0 and %d, got %d", int64(MaxTPM), tpm)
	}
	return nil
}

func (s *Spec) validate() error {
	s.Name = strings.TrimSpace(s.Name)
	if s.Tier == "" {
		s.Tier = string(jobs.TierFree)
	}
	if s.QuotaPeriod == "" {
		s.QuotaPeriod = ratelimit.Day
	}
	switch {
	case s.Name == "" || len(s.Name) > 100:
		return fmt.Errorf("%w: a name of 1 to 100 characters is required", ErrInvalidSpec)
	case !slices.Contains(Tiers, s.Tier):
		return fmt.Errorf("%w: tier %q: want chat, paid, trial or free", ErrInvalidSpec, s.Tier)
	}
	if err := checkLimits(s.QuotaTokens, s.QuotaDollars, s.TPM); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidSpec, err)
	}
	if _, err := ratelimit.ParsePeriod(string(s.QuotaPeriod)); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidSpec, err)
	}
	for _, m := range s.Models {
		if strings.TrimSpace(m) == "" {
			return fmt.Errorf("%w: an empty model name", ErrInvalidSpec)
		}
	}
	return nil
}

// hasQuota reports a key with a quota, of tokens or dollars.
func (k Key) hasQuota() bool { return k.QuotaTokens > 0 || k.QuotaDollars > 0 }

// Allows reports whether the key may use model.
func (k Key) Allows(model string) bool {
	return len(k.Models) == 0 || slices.Contains(k.Models, model)
}

// Public is the key's record without its hash.
func (k Key) Public() Key {
	k.Hash = ""
	return k
}

// Sentinel errors of the key store.
var (
	ErrUnknownKey = errors.New("gateway: unknown key")
	ErrRevoked    = errors.New("gateway: key revoked")
	// ErrInvalidSpec wraps what is wrong with a new key's spec.
	ErrInvalidSpec = errors.New("gateway: invalid key")
	// ErrInvalidRecord wraps what is wrong with a stored key's record
	// (limits written before they were checked, or by hand): the key is
	// refused until it is recreated.
	ErrInvalidRecord = errors.New("gateway: key record unusable")
)

// Keys stores virtual keys in Redis. Every key of the store shares one
// hash tag, so a change is one MULTI on Redis Cluster too.
type Keys struct {
	rdb redis.UniversalClient
	now func() time.Time
}

// NewKeys returns the key store.
func NewKeys(rdb redis.UniversalClient) *Keys { return &Keys{rdb: rdb, now: time.Now} }

const keysTag = "{prq:gw}"

func recordKey(id string) string { return keysTag + ":key:" + id }
func hashKey(hash string) string { return keysTag + ":hash:" + hash }
func indexKey() string           { return keysTag + ":keys" }
func digest(secret string) string {
	s := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(s[:])
}
func shortHash(secret string) string { return digest(secret)[:12] }

func newSecret() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("gateway: new key: %w", err)
	}
	return KeyPrefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// Create makes a key and returns its secret (shown once) and record.
func (ks *Keys) Create(ctx context.Context, s Spec) (string, Key, error) {
	return ks.create(ctx, s, false)
}

// CreateUnique is Create refusing (ErrInvalidSpec) a name a key not
// revoked has, atomically, so the name picks one key (Resolve): prq keys
// create uses it.
func (ks *Keys) CreateUnique(ctx context.Context, s Spec) (string, Key, error) {
	return ks.create(ctx, s, true)
}

func (ks *Keys) create(ctx context.Context, s Spec, unique bool) (string, Key, error) {
	if err := s.validate(); err != nil {
		return "", Key{}, err
	}
	secret, err := newSecret()
	if err != nil {
		return "", Key{}, err
	}
	k := Key{ID: shortHash(secret), Name: s.Name, Tier: s.Tier, QuotaTokens: s.QuotaTokens, QuotaDollars: s.QuotaDollars, QuotaPeriod: s.QuotaPeriod,
		TPM: s.TPM, Models: s.Models, Created: ks.now().UTC().Truncate(time.Second), Hash: digest(secret)}
	rec, _ := json.Marshal(k)
	write := func(p redis.Pipeliner) error {
		p.Set(ctx, recordKey(k.ID), rec, 0)
		p.Set(ctx, hashKey(k.Hash), k.ID, 0)
		p.SAdd(ctx, indexKey(), k.ID)
		return nil
	}
	if !unique {
		_, err = ks.rdb.TxPipelined(ctx, write)
	} else {
		// WATCH the index, which every create changes, and read the
		// names under it; a concurrent create makes it try again
		for range 10 {
			err = ks.rdb.Watch(ctx, func(tx *redis.Tx) error {
				if ids, err := ks.liveNamed(ctx, tx, k.Name); err != nil {
					return err
				} else if len(ids) > 0 {
					return fmt.Errorf("%w: a key named %q exists (id %s); names are unique among keys not revoked: pick another, or revoke that one first", ErrInvalidSpec, k.Name, ids[0])
				}
				_, err := tx.TxPipelined(ctx, write)
				return err
			}, indexKey())
			if !errors.Is(err, redis.TxFailedErr) {
				break
			}
		}
	}
	if errors.Is(err, ErrInvalidSpec) {
		return "", Key{}, err
	}
	if err != nil {
		return "", Key{}, fmt.Errorf("gateway: create key: %w", err)
	}
	return secret, k.Public(), nil
}

// liveNamed returns the ids of the keys not revoked that have name.
func (ks *Keys) liveNamed(ctx context.Context, c redis.Cmdable, name string) ([]string, error) {
	ids, err := c.SMembers(ctx, indexKey()).Result()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, id := range ids {
		raw, err := c.Get(ctx, recordKey(id)).Bytes()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var k Key
		if json.Unmarshal(raw, &k) == nil && k.Name == name && k.Revoked.IsZero() {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out, nil
}

// Resolve returns the id of a key given its id or the name of a key not
// revoked; ErrUnknownKey when neither, or when several keys not revoked
// share the name (the admin API does not keep names unique).
func (ks *Keys) Resolve(ctx context.Context, idOrName string) (string, error) {
	if n, err := ks.rdb.Exists(ctx, recordKey(idOrName)).Result(); err != nil {
		return "", fmt.Errorf("gateway: resolve key: %w", err)
	} else if n == 1 {
		return idOrName, nil
	}
	ids, err := ks.liveNamed(ctx, ks.rdb, idOrName)
	switch {
	case err != nil:
		return "", fmt.Errorf("gateway: resolve key: %w", err)
	case len(ids) == 0:
		return "", fmt.Errorf("%w %q: neither an id nor the name of a key not revoked (prq keys list)", ErrUnknownKey, idOrName)
	case len(ids) > 1:
		return "", fmt.Errorf("%w %q: %d keys not revoked have that name (ids %s): give the id", ErrUnknownKey, idOrName, len(ids), strings.Join(ids, ", "))
	}
	return ids[0], nil
}

// get reads a record, hash included.
func (ks *Keys) get(ctx context.Context, id string) (Key, error) {
	raw, err := ks.rdb.Get(ctx, recordKey(id)).Bytes()
	if errors.Is(err, redis.Nil) {
		return Key{}, ErrUnknownKey
	}
	if err != nil {
		return Key{}, fmt.Errorf("gateway: read key %s: %w", id, err)
	}
	var k Key
	if err := json.Unmarshal(raw, &k); err != nil {
		return Key{}, fmt.Errorf("gateway: key %s unreadable: %w", id, err)
	}
	return k, nil
}

// Authenticate returns the record of a secret, or ErrUnknownKey or
// ErrRevoked.
func (ks *Keys) Authenticate(ctx context.Context, secret string) (Key, error) {
	if !strings.HasPrefix(secret, KeyPrefix) {
		return Key{}, ErrUnknownKey
	}
	h := digest(secret)
	id, err := ks.rdb.Get(ctx, hashKey(h)).Result()
	if errors.Is(err, redis.Nil) {
		return Key{}, ErrUnknownKey
	}
	if err != nil {
		return Key{}, fmt.Errorf("gateway: authenticate: %w", err)
	}
	k, err := ks.get(ctx, id)
	if err != nil {
		return Key{}, err
	}
	switch {
	case k.Hash != h: // rotated: the old mapping is being removed
		return Key{}, ErrUnknownKey
	case !k.Revoked.IsZero():
		return Key{}, ErrRevoked
	}
	if err := checkLimits(k.QuotaTokens, k.QuotaDollars, k.TPM); err != nil {
		return Key{}, fmt.Errorf("%w: key %s: %w", ErrInvalidRecord, k.ID, err)
	}
	if _, err := ratelimit.ParsePeriod(string(k.QuotaPeriod)); err != nil && k.hasQuota() {
		return Key{}, fmt.Errorf("%w: key %s: %w", ErrInvalidRecord, k.ID, err)
	}
	return k, nil
}

// List returns every key, revoked ones too, by creation.
func (ks *Keys) List(ctx context.Context) ([]Key, error) {
	ids, err := ks.rdb.SMembers(ctx, indexKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("gateway: list keys: %w", err)
	}
	out := make([]Key, 0, len(ids))
	for _, id := range ids {
		k, err := ks.get(ctx, id)
		if errors.Is(err, ErrUnknownKey) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, k.Public())
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.Before(out[j].Created)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// update rewrites a record under WATCH, so concurrent changes of one key
// do not lose each other; change may touch the pipeline too.
func (ks *Keys) update(ctx context.Context, id string, change func(k *Key, p redis.Pipeliner) error) (Key, error) {
	var out Key
	err := ks.rdb.Watch(ctx, func(tx *redis.Tx) error {
		raw, err := tx.Get(ctx, recordKey(id)).Bytes()
		if errors.Is(err, redis.Nil) {
			return ErrUnknownKey
		}
		if err != nil {
			return err
		}
		var k Key
		if err := json.Unmarshal(raw, &k); err != nil {
			return fmt.Errorf("key %s unreadable: %w", id, err)
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			if err := change(&k, p); err != nil {
				return err
			}
			rec, _ := json.Marshal(k)
			p.Set(ctx, recordKey(id), rec, 0)
			return nil
		})
		out = k
		return err
	}, recordKey(id))
	if errors.Is(err, ErrUnknownKey) || errors.Is(err, ErrRevoked) {
		return Key{}, err
	}
	if err != nil {
		return Key{}, fmt.Errorf("gateway: update key %s: %w", id, err)
	}
	return out.Public(), nil
}

// Revoke disables a key at once; its record stays for the list, and its
// secret is answered "revoked".
func (ks *Keys) Revoke(ctx context.Context, id string) (Key, error) {
	return ks.update(ctx, id, func(k *Key, p redis.Pipeliner) error {
		if k.Revoked.IsZero() {
			k.Revoked = ks.now().UTC().Truncate(time.Second)
		}
		return nil
	})
}

// Rotate replaces a key's secret (the old one stops working at once) and
// returns the new one; the id, quota and usage stay.
func (ks *Keys) Rotate(ctx context.Context, id string) (string, Key, error) {
	secret, err := newSecret()
	if err != nil {
		return "", Key{}, err
	}
	k, err := ks.update(ctx, id, func(k *Key, p redis.Pipeliner) error {
		if !k.Revoked.IsZero() {
			return ErrRevoked
		}
		p.Del(ctx, hashKey(k.Hash))
		k.Hash = digest(secret)
		k.Rotated = ks.now().UTC().Truncate(time.Second)
		p.Set(ctx, hashKey(k.Hash), id, 0)
		return nil
	})
	if err != nil {
		return "", Key{}, err
	}
	return secret, k, nil
}

// spendKey is the keys' spend in the month (UTC) holding t, by key id.
func spendKey(t time.Time) string { return keysTag + ":spend:" + t.UTC().Format("2006-01") }

// AddSpend adds dollars to key id's spend this month; months are kept
// 400 days.
func (ks *Keys) AddSpend(ctx context.Context, id string, dollars float64) error {
	k := spendKey(ks.now())
	_, err := ks.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HIncrByFloat(ctx, k, id, dollars)
		p.Expire(ctx, k, 400*24*time.Hour)
		return nil
	})
	return err
}

// Spend returns each key's spend in the month (UTC) holding t, by id.
func (ks *Keys) Spend(ctx context.Context, t time.Time) (map[string]float64, error) {
	m, err := ks.rdb.HGetAll(ctx, spendKey(t)).Result()
	if err != nil {
		return nil, err
	}
	out := make(map[string]float64, len(m))
	for id, v := range m {
		out[id], _ = strconv.ParseFloat(v, 64)
	}
	return out, nil
}

// Usage is a key's token quota use in its current window (zero without
// a quota).
func (ks *Keys) Usage(ctx context.Context, k Key) (ratelimit.Usage, error) {
	if k.QuotaTokens <= 0 {
		return ratelimit.Usage{}, nil
	}
	q, err := ratelimit.NewQuota(ks.rdb, ratelimit.QuotaConfig{Period: k.QuotaPeriod})
	if err != nil {
		return ratelimit.Usage{}, err
	}
	return q.Used(ctx, tenantOf(k), "", k.QuotaTokens)
}

// DollarUsage is a key's dollar quota use in its current window, in
// nano-dollars (zero without a quota).
func (ks *Keys) DollarUsage(ctx context.Context, k Key) (ratelimit.Usage, error) {
	if k.QuotaDollars <= 0 {
		return ratelimit.Usage{}, nil
	}
	q, err := ratelimit.NewQuota(ks.rdb, ratelimit.QuotaConfig{Period: k.QuotaPeriod})
	if err != nil {
		return ratelimit.Usage{}, err
	}
	return q.UsedDollars(ctx, tenantOf(k), "", ratelimit.Nano(k.QuotaDollars))
}
