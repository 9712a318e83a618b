package baseline

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
)

// AfterTheFact is the token limit most LLM gateways ship (Azure API
// Management's llm-token-limit, per-key budgets in proxies): a request
// passes while the key's counted usage is below its quota, and its usage
// is counted when the reply comes back. Concurrent requests all pass the
// check before any of them is counted, so a key can spend far past its
// quota. It forwards to Upstream as it is; it is measured, not used.
type AfterTheFact struct {
	// Upstream is the provider's base URL (…/v1); UpstreamKey its key.
	Upstream, UpstreamKey string
	// Quota is each key's token allowance.
	Quota int64
	// Client makes upstream calls. Defaults to http.DefaultClient.
	Client *http.Client

	mu   sync.Mutex
	used map[string]int64
}

// Used returns a key's counted usage.
func (a *AfterTheFact) Used(key string) int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.used[key]
}

// ServeHTTP serves POST …/chat/completions (non-streaming).
func (a *AfterTheFact) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	a.mu.Lock()
	if a.used == nil {
		a.used = map[string]int64{}
	}
	over := a.used[key] >= a.Quota
	a.mu.Unlock()
	if over {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprint(w, `{"error":{"message":"token quota exceeded","type":"insufficient_quota","param":null,"code":"quota_exceeded"}}`)
		return
	}
	body, _ := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	up, err := http.NewRequestWithContext(r.Context(), http.MethodPost, strings.TrimRight(a.Upstream, "/")+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	up.Header.Set("Content-Type", "application/json")
	up.Header.Set("Authorization", "Bearer "+a.UpstreamKey)
	c := a.Client
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(up)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	reply, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	var u struct {
		Usage struct {
			Total int64 `json:"total_tokens"`
		} `json:"usage"`
	}
	if json.Unmarshal(reply, &u) == nil && u.Usage.Total > 0 {
		a.mu.Lock()
		a.used[key] += u.Usage.Total // counted after the fact
		a.mu.Unlock()
	}
	for _, h := range []string{"Content-Type", "Retry-After", "Retry-After-Ms"} {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	w.Write(reply)
}
