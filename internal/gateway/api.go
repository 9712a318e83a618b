package gateway

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prq-dev/prq/ratelimit"
)

// KeysAPI serves the keys' admin API (the caller puts it behind the admin
// token and the same-origin guard):
//
//	GET  /api/keys               the keys, without secrets, with their quotas' use
//	POST /api/keys               create from a Spec; the reply has the secret, once
//	POST /api/keys/{id}/revoke   revoke
//	POST /api/keys/{id}/rotate   a new secret, once
//
// A new key's name must be unique among keys not revoked (as prq keys
// create's), and each of its models one of models, the configured ones.
func KeysAPI(ks *Keys, models []string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/keys", func(w http.ResponseWriter, r *http.Request) {
		keys, err := ks.List(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		type listed struct {
			Key
			Used int64 `json:"quota_used"`
			// UsedDollars is what the key's calls cost of its dollar
			// quota this period (reservations of calls in flight included).
			UsedDollars float64   `json:"used_dollars"`
			Reset       time.Time `json:"quota_reset,omitzero"`
			// Spent is the key's calls' cost this month (UTC), at the models' prices.
			Spent float64 `json:"spent_this_month"`
		}
		spent, err := ks.Spend(r.Context(), ks.now())
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		out := make([]listed, 0, len(keys))
		for _, k := range keys {
			u, err := ks.Usage(r.Context(), k)
			if err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			d, err := ks.DollarUsage(r.Context(), k)
			if err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			out = append(out, listed{Key: k, Used: u.Used, UsedDollars: float64(d.Used) / ratelimit.NanoDollars, Reset: cmp.Or(u.Reset, d.Reset), Spent: spent[k.ID]})
		}
		writeJSON(w, http.StatusOK, out)
	})
	mux.HandleFunc("POST /api/keys", func(w http.ResponseWriter, r *http.Request) {
		var s Spec
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&s); err != nil {
			http.Error(w, "a key spec as JSON: "+err.Error(), http.StatusBadRequest)
			return
		}
		for _, m := range s.Models {
			if !slices.Contains(models, m) {
				http.Error(w, fmt.Sprintf("%v: model %q is not a configured model (configured: %s)", ErrInvalidSpec, m, strings.Join(models, ", ")), http.StatusBadRequest)
				return
			}
		}
		secret, k, err := ks.CreateUnique(r.Context(), s)
		if err != nil {
			http.Error(w, err.Error(), statusOf(err))
			return
		}
		writeJSON(w, http.StatusCreated, map[string]any{"key": secret, "record": k})
	})
	mux.HandleFunc("POST /api/keys/{id}/{op}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		switch r.PathValue("op") {
		case "revoke":
			k, err := ks.Revoke(r.Context(), id)
			if err != nil {
				http.Error(w, err.Error(), statusOf(err))
				return
			}
			writeJSON(w, http.StatusOK, map[string]any{"record": k})
		case "rotate":
			secret, k, err := ks.Rotate(r.Context(), id)
			if err != nil {
				http.Error(w, err.Error(), statusOf(err))
				return
			}
			writeJSON(w, http.StatusOK, map[string]any{"key": secret, "record": k})
		default:
			http.NotFound(w, r)
		}
	})
	return mux
}

func statusOf(err error) int {
	switch {
	case errors.Is(err, ErrUnknownKey):
		return http.StatusNotFound
	case errors.Is(err, ErrRevoked):
		return http.StatusConflict
	case errors.Is(err, ErrInvalidSpec):
		return http.StatusBadRequest
	}
	return http.StatusServiceUnavailable
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
