package config

import (
	"strings"
	"testing"
)

func TestChatSettings(t *testing.T) {
	d := Default()
	if *d.Chat.PerUserPerHour != 20 || *d.Chat.PerPRPerHour != 60 || *d.Scheduler.ChatCap != 0.5 {
		t.Fatalf("defaults: per user %d, per PR %d, chat cap %v", *d.Chat.PerUserPerHour, *d.Chat.PerPRPerHour, *d.Scheduler.ChatCap)
	}
	load := func(yml string) (*Config, error) { return loadChecked(t, yml) }
	c, err := load("chat:\n  per_user_per_hour: 5\n  per_pr_per_hour: 0\nscheduler:\n  chat_cap: 0.3\ntiers:\n  free:\n    weight: 1\n    chat_quota_tokens: 2000\n")
	if err != nil {
		t.Fatal(err)
	}
	if *c.Chat.PerUserPerHour != 5 || *c.Chat.PerPRPerHour != 0 || *c.Scheduler.ChatCap != 0.3 || c.Tiers["free"].ChatQuotaTokens != 2000 {
		t.Fatalf("read %+v, chat cap %v, free %+v", c.Chat, *c.Scheduler.ChatCap, c.Tiers["free"])
	}
	for yml, setting := range map[string]string{
		"chat:\n  per_user_per_hour: -1\n":                            "chat.per_user_per_hour",
		"chat:\n  per_pr_per_hour: -2\n":                              "chat.per_pr_per_hour",
		"scheduler:\n  chat_cap: 0\n":                                 "scheduler.chat_cap",
		"scheduler:\n  chat_cap: 1.5\n":                               "scheduler.chat_cap",
		"tiers:\n  paid:\n    weight: 8\n    chat_quota_tokens: -1\n": "tiers.paid.chat_quota_tokens",
	} {
		if _, err := load(yml); err == nil || !strings.Contains(err.Error(), setting) {
			t.Errorf("%q: %v, want an error naming %s", yml, err, setting)
		}
	}
}

// TestChatReserveSettings: scheduler.chat_reserve names configured
// models with tokens not below 0; chat_idle defaults to 10m and must be
// positive.
func TestChatReserveSettings(t *testing.T) {
	if d := Default(); d.Scheduler.ChatIdle.D().String() != "10m0s" || d.Scheduler.ChatReserve != nil {
		t.Fatalf("defaults: idle %s, reserve %v", d.Scheduler.ChatIdle.D(), d.Scheduler.ChatReserve)
	}
	load := func(yml string) (*Config, error) { return loadChecked(t, yml) }
	model := Default().Models[0].Name
	c, err := load("scheduler:\n  chat_idle: 2m\n  chat_reserve:\n    " + model + ": 4000\n")
	if err != nil {
		t.Fatal(err)
	}
	if c.Scheduler.ChatReserve[model] != 4000 || c.Scheduler.ChatIdle.D().String() != "2m0s" {
		t.Fatalf("read reserve %v, idle %s", c.Scheduler.ChatReserve, c.Scheduler.ChatIdle.D())
	}
	for yml, setting := range map[string]string{
		"scheduler:\n  chat_reserve:\n    no-such-model: 10\n": "scheduler.chat_reserve",
		"scheduler:\n  chat_reserve:\n    " + model + ": -1\n": "scheduler.chat_reserve",
		"scheduler:\n  chat_idle: 0s\n":                        "scheduler.chat_idle",
	} {
		if _, err := load(yml); err == nil || !strings.Contains(err.Error(), setting) {
			t.Errorf("%q: %v, want an error naming %s", yml, err, setting)
		}
	}
}

// TestSendLagSetting: scheduler.send_lag defaults to 250ms, may be 0
// (none) and is refused outside [0, 10s].
func TestSendLagSetting(t *testing.T) {
	if d := Default(); d.Scheduler.SendLag.D().String() != "250ms" {
		t.Fatalf("default send lag %s, want 250ms", d.Scheduler.SendLag.D())
	}
	load := func(yml string) (*Config, error) { return loadChecked(t, yml) }
	for yml, want := range map[string]string{"scheduler:\n  send_lag: 0s\n": "0s", "scheduler:\n  send_lag: 40ms\n": "40ms", "scheduler:\n  mode: strict\n": "250ms"} {
		c, err := load(yml)
		if err != nil {
			t.Fatalf("%q: %v", yml, err)
		}
		if got := c.Scheduler.SendLag.D().String(); got != want {
			t.Errorf("%q: send lag %s, want %s", yml, got, want)
		}
	}
	for _, yml := range []string{"scheduler:\n  send_lag: -1s\n", "scheduler:\n  send_lag: 11s\n"} {
		if _, err := load(yml); err == nil || !strings.Contains(err.Error(), "scheduler.send_lag") {
			t.Errorf("%q: %v, want an error naming scheduler.send_lag", yml, err)
		}
	}
}

// loadChecked loads yml as PRQ_CONFIG (loadYAML) and validates it for
// check.
func loadChecked(t *testing.T, yml string) (*Config, error) {
	t.Helper()
	c := loadYAML(t, yml, nil)
	return c, c.Validate(ModeCheck)
}
