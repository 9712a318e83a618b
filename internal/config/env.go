package config

// envSetting is an environment variable Load reads into the setting at
// Path (after the file, before the flags). A set, non-empty variable
// wins over the file.
type envSetting struct{ Name, Path string }

// envSettings are the environment variables Load reads, besides
// PRQ_CONFIG (the file itself) and the provider keys named in
// providers[].key_env.
var envSettings = []envSetting{
	{"REDIS_URL", "redis_url"},
	{"PRQ_ADDR", "addr"},
	{"PRQ_ALLOW_EVICTION", "allow_eviction"},
	{"PRQ_ALLOW_NO_PERSISTENCE", "allow_no_persistence"},
	{"PRQ_SHUTDOWN_TIMEOUT", "shutdown_timeout"},
	{"PRQ_LOG_FORMAT", "log.format"},
	{"PRQ_LOG_LEVEL", "log.level"},
	{"PRQ_CONCURRENCY", "worker.concurrency"},
	{"GITHUB_APP_ID", "github.app_id"},
	{"GITHUB_APP_SLUG", "github.app_slug"},
	{"GITHUB_PRIVATE_KEY_PATH", "github.private_key_path"},
	{"GITHUB_PRIVATE_KEY", "github.private_key"},
	{"GITHUB_WEBHOOK_SECRET", "github.webhook_secret"},
	{"GITHUB_API_URL", "github.api_url"},
	{"GITLAB_URL", "gitlab.url"},
	{"GITLAB_WEBHOOK_TOKEN", "gitlab.webhook_token"},
	{"OPENAI_API_KEY", "openai.api_key"},
	{"OPENAI_BASE_URL", "openai.base_url"},
	{"PRQ_ADMIN_TOKEN", "admin.token"},
}

// readEnv applies envSettings.
func (c *Config) readEnv(getenv func(string) string) error {
	for _, e := range envSettings {
		v := getenv(e.Name)
		if v == "" {
			continue
		}
		if problem := c.setText(e.Path, v); problem != "" {
			return &SettingError{Name: e.Name, Source: "environment", Problem: problem}
		}
		c.sources[e.Name] = "environment"
	}
	return nil
}
