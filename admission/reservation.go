package admission

import (
	"strconv"
	"strings"
)

// reservation is a stored reservation read whole: what admit charged a
// ticket and the marks the ops added since. The format is described in
// docs/limiter.md ("Reservations"); lua/reservation.lua is Lua's reader
// of it, and testdata/reservations.json the golden cases both readers
// are tested against (TestReservationGolden).
type reservation struct {
	Costs   []string // what admit charged each dimension, in order
	Dims    []string // the ids of the dimensions the costs went to ("d"); nil: by position
	Key     int      // the key charged ("k<i>"); 0 without one, -1 when not among the model's keys
	Started bool     // "s" or "s<µs>"
	StartAt int64    // a window's first start, "s<µs>"; -1 without one
	Called  bool     // "c"
	Timed   bool     // "t": the charge's time is the call's
	Written bool     // "w": the charge's time bounds the request's write
	Way     int64    // "a<µs>": the reply bounds the arrival; -1 without one
	At      int64    // "@<µs>": the charge's time; -1 without one (an older prq's: its resage score)
}

// parseReservation reads r, a stored reservation of a model with n keys.
// The key is the first "k<i>" among the model's keys, as KeyOf always
// read it. Parts it does not know are skipped (read tolerantly).
func parseReservation(r string, n int) reservation {
	out := reservation{StartAt: -1, Way: -1, At: -1}
	sawKey := false
	found := false
	for _, f := range strings.Fields(r) {
		switch f[0] {
		case 'k':
			sawKey = true
			if i, err := strconv.Atoi(f[1:]); err == nil && i >= 0 && i < n && !found {
				out.Key, found = i, true
			}
		case 'd':
			out.Dims = []string{}
			for id := range strings.SplitSeq(f[1:], ",") {
				if _, err := strconv.ParseUint(id, 10, 64); err == nil {
					out.Dims = append(out.Dims, id)
				}
			}
		case 's':
			out.Started = true
			if us, err := strconv.ParseInt(f[1:], 10, 64); err == nil && out.StartAt < 0 {
				out.StartAt = us
			}
		case 'c':
			out.Called = true
		case 't':
			out.Timed = true
		case 'w':
			out.Written = true
		case 'a':
			if us, err := strconv.ParseInt(f[1:], 10, 64); err == nil && out.Way < 0 {
				out.Way = us
			}
		case '@':
			if us, err := strconv.ParseInt(f[1:], 10, 64); err == nil && out.At < 0 {
				out.At = us
			}
		default:
			if _, err := strconv.ParseFloat(f, 64); err == nil {
				out.Costs = append(out.Costs, f)
			}
		}
	}
	if sawKey && !found {
		out.Key = -1
	}
	return out
}

// reservationKey reads the key index of a stored reservation (admit
// writes "k<i>"); 0 without one or out of the model's n keys.
func reservationKey(r string, n int) int {
	return max(parseReservation(r, n).Key, 0)
}
