package server

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/internal/dashboard"
	"github.com/prq-dev/prq/ratelimit"
)

// TestDashboardShowsEachKey: a model served by several keys shows each
// key on the dashboard by its short hash (never the key), what its bucket
// could admit (input and output too, where the model limits them apart)
// and, for a key paused alone, why.
func TestDashboardShowsEachKey(t *testing.T) {
	secrets := []string{"sk-dash-key-a-0123456789", "sk-dash-key-b-0123456789", "sk-dash-key-c-0123456789"}
	s, _ := newTestServer(t, func(c *config.Config) {
		keys := make([]config.Secret, len(secrets))
		for i, k := range secrets {
			keys[i] = config.Secret(k)
		}
		c.Providers = []config.ProviderConfig{{Name: "org", Kind: config.KindOpenAI, BaseURL: "http://127.0.0.1:1/v1",
			KeyEnv: config.EnvList{"ORG_A", "ORG_B", "ORG_C"}, Keys: keys}}
		for i := range c.Models {
			c.Models[i].Provider = "org"
			c.Models[i].InputTokensPerMinute, c.Models[i].OutputTokensPerMinute = 20000, 5000
		}
	})
	model := s.cfg.Jobs.ReviewModel
	if err := s.sched.PauseKey(context.Background(), model, 1, "401 invalid_api_key", time.Minute); err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	dashboard.New(dashSource{s}, s.store, false).AdminAPI(true).ServeHTTP(w, httptest.NewRequest("GET", "/api/dashboard", nil))
	body := w.Body.String()
	for _, k := range secrets {
		if strings.Contains(body, k) {
			t.Fatal("an API key reached the dashboard")
		}
	}
	var st struct {
		Models []struct {
			Name string `json:"name"`
			Keys []struct {
				Hash      string `json:"hash"`
				Available int64  `json:"available"`
				Output    int64  `json:"available_output"`
				Paused    string `json:"paused"`
			} `json:"keys"`
		} `json:"models"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	found := false
	for _, m := range st.Models {
		if m.Name != model {
			continue
		}
		found = true
		if len(m.Keys) != 3 {
			t.Fatalf("%s shows %d keys, want 3: %s", model, len(m.Keys), body)
		}
		for i, k := range m.Keys {
			if k.Hash != ratelimit.KeyHash(secrets[i]) {
				t.Errorf("key %d named %q, want its hash %s", i, k.Hash, ratelimit.KeyHash(secrets[i]))
			}
			if k.Output != 5000 || k.Available <= 0 {
				t.Errorf("key %d: available %d, output %d; want a full bucket (output 5000)", i, k.Available, k.Output)
			}
			if (k.Paused != "") != (i == 1) || (i == 1 && !strings.Contains(k.Paused, "401")) {
				t.Errorf("key %d paused %q; want only key 1, with its reason", i, k.Paused)
			}
		}
	}
	if !found {
		t.Fatalf("%s is not on the dashboard: %s", model, body)
	}
}
