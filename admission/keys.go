package admission

import (
	"strconv"

	"github.com/prq-dev/prq/ratelimit"
)

// keySet names every Redis key of one model's admission state. All share
// the bucket's hash tag, so one script call works on Redis Cluster.
// list gives them in the order admission's scripts read KEYS (keyTable),
// then, for a model with several API keys, per key (KeyStates[i],
// KeyPaused[i]) from KEYS[19].
type keySet struct {
	State          string // the model bucket's state (ratelimit)
	Tickets        string // hash: id -> encoded ticket
	Lex            string // zset of flows, members "class|tenant|rank|id"
	Chat           string // chat zset: id by arrival sequence
	HeadsPaid      string // flow heads of paid: tenant by finish tag
	HeadsTrial     string // flow heads of trial
	HeadsFree      string // flow heads of free
	VirtualTimes   string // hash of virtual times, the chat sequence and backfill's due
	Age            string // zset: id by enqueue µs
	Released       string // zset: id by release deadline µs
	Stats          string // hash of counters
	Reservations   string // hash: id -> reservation (format: docs/limiter.md; codec: reservation.go)
	ReservationAge string // zset: id by its charge's time µs, only for reservations an older prq wrote (no " @<µs>")
	Delayed        string // zset: "id NUL ticket" by due µs
	Paused         string // string: why admissions are paused
	Waits          string // list: recent waits "class:µs", newest first
	HeadsChat      string // flow heads of chat: tenant by finish tag
	BatchAge       string // zset: batch id by enqueue µs (aging order)
	// KeyStates are the bucket states of the model's API keys (the
	// first is State); KeyPaused say why a key is paused (a string with
	// a TTL, like Paused). Keys are named by their short hash only.
	KeyStates, KeyPaused []string
}

func newKeySet(b *ratelimit.Bucket) keySet {
	p := b.Tag() + ":adm:"
	ks := keySet{
		State:          b.StateKey(),
		Tickets:        p + "tickets",
		Lex:            p + "lex",
		Chat:           p + "chat",
		HeadsPaid:      p + "heads:paid",
		HeadsTrial:     p + "heads:trial",
		HeadsFree:      p + "heads:free",
		VirtualTimes:   p + "vt",
		Age:            p + "age",
		Released:       p + "released",
		Stats:          p + "stats",
		Reservations:   p + "res",
		ReservationAge: p + "resage",
		Delayed:        p + "delayed",
		Paused:         p + "paused",
		Waits:          p + "waits",
		HeadsChat:      p + "heads:chat",
		BatchAge:       p + "bage",
		KeyStates:      make([]string, b.Keys()),
		KeyPaused:      make([]string, b.Keys()),
	}
	for i := range b.Keys() {
		ks.KeyStates[i] = b.KeyStateKey(i)
		ks.KeyPaused[i] = p + "paused:key:" + strconv.Itoa(i) + ":" + b.KeyLabel(i)
	}
	return ks
}

// keyTable is the order of the KEYS every admission script reads, the
// one table of it: KEYS[i+1] is keyTable[i]. lua/prelude.lua's header
// names them in the same order (TestLuaKeysMatchTable), and the scripts
// read them by that position.
var keyTable = []struct {
	name string // as prelude.lua's header names it
	of   func(keySet) string
}{
	{"state", func(k keySet) string { return k.State }},
	{"tickets", func(k keySet) string { return k.Tickets }},
	{"lex", func(k keySet) string { return k.Lex }},
	{"chat", func(k keySet) string { return k.Chat }},
	{"heads:paid", func(k keySet) string { return k.HeadsPaid }},
	{"heads:trial", func(k keySet) string { return k.HeadsTrial }},
	{"heads:free", func(k keySet) string { return k.HeadsFree }},
	{"vt", func(k keySet) string { return k.VirtualTimes }},
	{"age", func(k keySet) string { return k.Age }},
	{"released", func(k keySet) string { return k.Released }},
	{"stats", func(k keySet) string { return k.Stats }},
	{"res", func(k keySet) string { return k.Reservations }},
	{"resage", func(k keySet) string { return k.ReservationAge }},
	{"delayed", func(k keySet) string { return k.Delayed }},
	{"paused", func(k keySet) string { return k.Paused }},
	{"waits", func(k keySet) string { return k.Waits }},
	{"heads:chat", func(k keySet) string { return k.HeadsChat }},
	{"bage", func(k keySet) string { return k.BatchAge }},
}

// list returns the keys in the order admission's scripts read KEYS.
func (k keySet) list() []string {
	out := make([]string, len(keyTable), len(keyTable)+2*len(k.KeyStates))
	for i, e := range keyTable {
		out[i] = e.of(k)
	}
	if len(k.KeyStates) > 1 { // one key: State, paused with the model
		for i := range k.KeyStates {
			out = append(out, k.KeyStates[i], k.KeyPaused[i])
		}
	}
	return out
}

// wake is the channel where a registration wakes the admission loops.
func (k keySet) wake() string { return k.Tickets + ":wake" }
