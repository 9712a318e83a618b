package config

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// TestValidateReportsInSectionOrder: a configuration wrong in every
// section gets one problem per wrong setting, in the sections' order
// (the order `prq config check` and `prq doctor` print them in). Each
// map the checks range over (tiers, job models) holds one wrong entry,
// so the order is fixed.
func TestValidateReportsInSectionOrder(t *testing.T) {
	c := Default()
	neg := Duration(-time.Second)
	c.RedisURL = "bogus://x"
	c.Addr = "nope"
	c.Retention = 0
	c.GitHub.APIURL = "ftp://x"
	c.GitHub.WriteGap = neg
	c.GitHub.ChatWriteBurst = IntPtr(-1)
	c.Admin.ReadOnly = BoolPtr(false)
	c.Gateway.MaxWait = neg
	c.OpenAI.FirstByteTimeout = neg
	c.Models = []ModelConfig{{Name: "m", Provider: "elsewhere", RequestsPerMinute: 10, TokensPerMinute: 1000, MaxOutputTokens: -1, BatchQueueTokens: -1}}
	c.Jobs = JobsConfig{SummaryModel: "m", ReviewModel: "m", ChatModel: "gone"}
	c.Batch.Every = Duration(time.Millisecond)
	c.Tiers = map[string]Tier{"paid": {Weight: 0}}
	c.DefaultTier = "gold"
	c.Scheduler.Mode = "random"
	c.Chat.PerUserPerHour = IntPtr(-1)
	c.Quota.Period = "fortnight"
	c.Retry.Batch.MaxAttempts = 0
	c.Filters.Exclude = []string{"["}
	err := c.Validate(ModeWorker)
	var got []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var se *SettingError
		if !errors.As(e, &se) {
			t.Fatalf("%v is not a SettingError", e)
		}
		got = append(got, se.Name)
	}
	want := []string{
		"REDIS_URL", "PRQ_ADDR", "retention",
		"GITHUB_API_URL", "github.write_gap", "github.chat_write_burst",
		"admin.read_only", "gateway.max_wait", "openai.first_byte_timeout",
		"GITHUB_APP_ID", "GITHUB_PRIVATE_KEY_PATH", "OPENAI_API_KEY",
		"models.m", "models.m.batch_queue_tokens", "models.m.provider",
		"jobs.chat_model", "batch.every",
		"tiers.paid.weight", "default_tier",
		"scheduler.mode", "chat.per_user_per_hour", "quota.period",
		"retry.batch.max_attempts", "filters.exclude",
	}
	if !slices.Equal(got, want) {
		t.Errorf("problems named\n%q\nwant\n%q\n(all: %v)", got, want, err)
	}
}
