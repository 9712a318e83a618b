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
// quota. It forwards to Upstream as it is, under the path it came on
// after /v1 (chat completions, responses, messages, embeddings), and
// counts the usage in any of their shapes; it is measured, not used.
type AfterTheFact struct {
	// Upstream is the provider's base URL (…/v1); UpstreamKey its key.
	Upstream, UpstreamKey string
	// Quota is each key's token allowance; Quotas, when they name a key,
	// its own.
	Quota  int64
	Quotas map[string]int64
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

// ServeHTTP serves POST /v1/… (non-streaming): the key is a bearer token
// or an x-api-key.
func (a *AfterTheFact) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	if key == "" {
		key = r.Header.Get("x-api-key")
	}
	a.mu.Lock()
	if a.used == nil {
		a.used = map[string]int64{}
	}
	quota := a.Quota
	if q, ok := a.Quotas[key]; ok {
		quota = q
	}
	over := a.used[key] >= quota
	a.mu.Unlock()
	if over {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprint(w, `{"error":{"message":"token quota exceeded","type":"insufficient_quota","param":null,"code":"quota_exceeded"}}`)
		return
	}
	body, _ := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	path := "/chat/completions"
	if _, rest, ok := strings.Cut(r.URL.Path, "/v1/"); ok {
		path = "/" + rest
	}
	up, err := http.NewRequestWithContext(r.Context(), http.MethodPost, strings.TrimRight(a.Upstream, "/")+path, bytes.NewReader(body))
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
			Total  int64 `json:"total_tokens"`
			Input  int64 `json:"input_tokens"`  // Anthropic's
			Output int64 `json:"output_tokens"` // and Anthropic's
		} `json:"usage"`
	}
	if json.Unmarshal(reply, &u) == nil {
		total := u.Usage.Total
		if total == 0 {
			total = u.Usage.Input + u.Usage.Output
		}
		a.mu.Lock()
		a.used[key] += total // counted after the fact
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
