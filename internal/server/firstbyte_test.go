package server

import (
	"testing"
	"time"

	"github.com/prq-dev/prq/internal/config"
)

// TestFirstByteOfModels: a model's first-byte limit is its own, else
// openai.first_byte_timeout, none for a reasoning model without its own,
// and none when it would not come before the call timeout.
func TestFirstByteOfModels(t *testing.T) {
	cfg := config.Default()
	for _, tc := range []struct {
		name string
		m    config.ModelConfig
		want time.Duration
	}{
		{"default", config.ModelConfig{Name: "a"}, 30 * time.Second},
		{"own", config.ModelConfig{Name: "a", FirstByteTimeout: config.Duration(5 * time.Second)}, 5 * time.Second},
		{"reasoning", config.ModelConfig{Name: "a", Reasoning: true}, 0},
		{"reasoning, own", config.ModelConfig{Name: "a", Reasoning: true, FirstByteTimeout: config.Duration(90 * time.Second)}, 90 * time.Second},
		{"past the call timeout", config.ModelConfig{Name: "a", FirstByteTimeout: config.Duration(3 * time.Minute)}, 0},
	} {
		if got := firstByte(&cfg, tc.m); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}
