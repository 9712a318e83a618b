package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func fallbackModels(list string) string {
	return "jobs:\n  summary_model: a\n  review_model: a\n  chat_model: a\nmodels:\n" +
		"  - name: a\n    requests_per_minute: 10\n    tokens_per_minute: 10000\n    fallbacks: " + list + "\n" +
		"  - name: b\n    requests_per_minute: 10\n    tokens_per_minute: 10000\n"
}

func TestGatewaySettings(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want string // "" when valid
	}{
		{"defaults", "", ""},
		{"set", "gateway:\n  max_wait: 15s\n  min_output: 32\n", ""},
		{"negative wait", "gateway:\n  max_wait: -1s\n", "gateway.max_wait"},
		{"negative output", "gateway:\n  min_output: -4\n", "gateway.min_output"},
		{"quota week", "quota:\n  period: week\n", ""},
		{"negative fallback wait", "gateway:\n  fallback_wait: -1s\n", "gateway.fallback_wait"},
		{"fallbacks", fallbackModels("[b]"), ""},
		{"fallback to itself", fallbackModels("[a]"), "models.a.fallbacks"},
		{"fallback twice", fallbackModels("[b, b]"), "models.a.fallbacks"},
		{"fallback unknown", fallbackModels("[c]"), `"c" is not a configured model`},
		{"bodies in flight", "gateway:\n  max_body_bytes_in_flight: 1048576\n", ""},
		{"negative bodies in flight", "gateway:\n  max_body_bytes_in_flight: -1\n", "gateway.max_body_bytes_in_flight"},
		{"first byte", "openai:\n  first_byte_timeout: 10s\n", ""},
		{"negative first byte", "openai:\n  first_byte_timeout: -1s\n", "openai.first_byte_timeout"},
		{"negative model first byte", strings.Replace(fallbackModels("[b]"), "  - name: b\n", "  - name: b\n    first_byte_timeout: -2s\n", 1), "models.b.first_byte_timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "prq.yaml")
			if err := os.WriteFile(f, []byte(tt.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			c, err := Load(func(k string) string { return map[string]string{"PRQ_CONFIG": f}[k] }, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = c.Validate(ModeCheck)
			if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
				t.Fatalf("got %v, want %q", err, tt.want)
			}
			if tt.name == "set" && (c.Gateway.MaxWait.D() != 15*time.Second || c.Gateway.MinOutput != 32) {
				t.Fatalf("read %+v", c.Gateway)
			}
		})
	}
}
