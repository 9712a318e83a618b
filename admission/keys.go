package admission

import (
	"strconv"

	"github.com/prq-dev/prq/ratelimit"
)

// keySet names every Redis key of one model's admission state. All share
// the bucket's hash tag, so one script call works on Redis Cluster.
// list gives them in the order admission's scripts read KEYS[1..18] (lua/order.lua), then,
// for a model with several API keys, per key (KeyStates[i],
// KeyPaused[i]) from KEYS[19].
type keySet struct {
	State          string // K[1] the model bucket's state (ratelimit)
	Tickets        string // K[2] hash: id -> encoded ticket
	Lex            string // K[3] zset of flows, members "class|tenant|rank|id"
	Chat           string // K[4] chat zset: id by arrival sequence
	HeadsPaid      string // K[5] flow heads of paid: tenant by finish tag
	HeadsTrial     string // K[6] flow heads of trial
	HeadsFree      string // K[7] flow heads of free
	VirtualTimes   string // K[8] hash of virtual times, the chat sequence and backfill's due
	Age            string // K[9] zset: id by enqueue µs
	Released       string // K[10] zset: id by release deadline µs
	Stats          string // K[11] hash of counters
	Reservations   string // K[12] hash: id -> "<cost> ... <cost> d<id>,...[ k<key>][ s[<µs>]][ c][ t][ w][ a<µs>]", a cost per dimension (docs/limiter.md)
	ReservationAge string // K[13] zset: id by its charge's time µs (admission, moved by started, calling, sent)
	Delayed        string // K[14] zset: "id NUL ticket" by due µs
	Paused         string // K[15] string: why admissions are paused
	Waits          string // K[16] list: recent waits "class:µs", newest first
	HeadsChat      string // K[17] flow heads of chat: tenant by finish tag
	BatchAge       string // K[18] zset: batch id by enqueue µs (aging order)
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

// list returns the keys in the order admission's scripts read KEYS.
func (k keySet) list() []string {
	out := []string{k.State, k.Tickets, k.Lex, k.Chat, k.HeadsPaid, k.HeadsTrial, k.HeadsFree,
		k.VirtualTimes, k.Age, k.Released, k.Stats, k.Reservations, k.ReservationAge, k.Delayed, k.Paused, k.Waits,
		k.HeadsChat, k.BatchAge}
	if len(k.KeyStates) > 1 { // one key: State, paused with the model
		for i := range k.KeyStates {
			out = append(out, k.KeyStates[i], k.KeyPaused[i])
		}
	}
	return out
}

// wake is the channel where a registration wakes the admission loops.
func (k keySet) wake() string { return k.Tickets + ":wake" }
