package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The retry budgets default per class, a file may set part of one, and a
// budget that would never let a job run is refused by name.
func TestRetryBudgets(t *testing.T) {
	load := func(t *testing.T, yml string) *Config {
		t.Helper()
		file := filepath.Join(t.TempDir(), "prq.yaml")
		if err := os.WriteFile(file, []byte(yml), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := Load(func(k string) string {
			if k == "PRQ_CONFIG" {
				return file
			}
			return ""
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	d := Default()
	if got, want := d.Retry.Batch, (RetryBudget{MaxAttempts: 20, MaxAge: Duration(24 * time.Hour)}); got != want {
		t.Errorf("default batch budget = %+v, want %+v", got, want)
	}
	if got, want := d.Retry.Chat, (RetryBudget{MaxAttempts: 8, MaxAge: Duration(30 * time.Minute)}); got != want {
		t.Errorf("default chat budget = %+v, want %+v", got, want)
	}
	c := load(t, "retry:\n  batch:\n    max_attempts: 5\n  chat:\n    max_age: 2m\n")
	if got, want := c.Retry.Batch, (RetryBudget{MaxAttempts: 5, MaxAge: Duration(24 * time.Hour)}); got != want {
		t.Errorf("batch budget = %+v, want %+v", got, want)
	}
	if got, want := c.Retry.Chat, (RetryBudget{MaxAttempts: 8, MaxAge: Duration(2 * time.Minute)}); got != want {
		t.Errorf("chat budget = %+v, want %+v", got, want)
	}
	c = load(t, "retry:\n  batch:\n    max_attempts: 0\n  chat:\n    max_age: -1s\n")
	err := c.Validate(ModeCheck)
	for _, name := range []string{"retry.batch.max_attempts", "retry.chat.max_age"} {
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("Validate = %v, want it to name %s", err, name)
		}
	}
}
