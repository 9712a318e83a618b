package config

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseRedisURL(t *testing.T) {
	for _, good := range []string{"redis://127.0.0.1:6379", "redis://:pw@h:1/2", "rediss://h:6380", "redis-sentinel://a:26379,b:26379?master=m",
		"redis-cluster://a:7000,b:7001"} {
		if _, err := ParseRedisURL(good); err != nil {
			t.Errorf("%s: %v", good, err)
		}
	}
	for _, bad := range []string{"redis://h", "redis://a:1,b:2", "redis-sentinel://a:1", "redis-cluster://a:1/3", "redis://h:99999", "redis://h:1/x", "::"} {
		if _, err := ParseRedisURL(bad); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

// TestParseRedisURLHidesPassword: no error about a malformed REDIS_URL
// holds any piece of its password (url.Parse quotes the URL, or the bad
// escape inside the password).
func TestParseRedisURLHidesPassword(t *testing.T) {
	tests := []struct{ name, url, password string }{
		{"bad escape in password", "redis://user:Zq7%zzKxW9@127.0.0.1:6379", "Zq7%zzKxW9"},
		{"bad escape after an @ in password", "redis://user:Pw@Zq%g1Kx@127.0.0.1:6379", "Pw@Zq%g1Kx"},
		{"space in host", "redis://:Hq8vLm2T@red is:6379", "Hq8vLm2T"},
		{"bad port", "redis://:Hq8vLm2T@h:6x79", "Hq8vLm2T"},
		{"control character", "redis://:Hq8vLm2T\x7f@h:6379", "Hq8vLm2T"},
		{"no scheme", "user:Hq8vLm2T@h:6379", "Hq8vLm2T"},
		{"no port", "redis://:Hq8vLm2T@h", "Hq8vLm2T"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseRedisURL(tt.url)
			if err == nil {
				t.Fatalf("%q accepted", tt.url)
			}
			for i := 0; i+3 <= len(tt.password); i++ {
				if piece := tt.password[i : i+3]; strings.Contains(err.Error(), piece) {
					t.Fatalf("the error shows %q of the password: %v", piece, err)
				}
			}
			c := Default()
			c.RedisURL = tt.url
			if err := c.Validate(ModeCheck); err == nil || strings.Contains(err.Error(), tt.password[:4]) {
				t.Fatalf("validate: %v", err)
			}
		})
	}
}

func TestWeakSecretsRefused(t *testing.T) {
	strong := "3f9c1e0b7a5d42c8e6f1a9b0c7d2e4f6"
	tests := []struct {
		name, secret string
		want         string // "" when accepted
	}{
		{"generated", strong, ""},
		{"change-me", "change-me", "placeholder"},
		{"CHANGEME padded", "CHANGEME-CHANGEME-please", "placeholder"},
		{"changeme", "changeme", "placeholder"},
		{"secret", "secret", "placeholder"},
		{"password", "Password", "placeholder"},
		{"xxx", "xxx", "placeholder"},
		{"test", "test", "placeholder"},
		{"repeated", "xxxxxxxxxxxxxxxxxxxxxxxx", "repeated"},
		{"short", "k3P9qZ", "shorter than 16"},
		{"fifteen bytes", "abcdefghij12345", "shorter than 16"},
		{"sixteen bytes", "abcdefghij123456", ""},
		{"sixteen spaces", "                ", "whitespace"},
		{"seventeen newlines", "\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n", "whitespace"},
		{"a trailing newline", strong + "\n", "line break"},
		{"a CR inside", "3f9c1e0b7a5d\r42c8e6f1a9b0c7d2", "line break"},
		{"a tab inside", "3f9c1e0b7a5d\t42c8e6f1a9b0c7d2", "control character"},
		{"padded", " " + strong + " ", "whitespace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, setting := range []string{"GITHUB_WEBHOOK_SECRET", "PRQ_ADMIN_TOKEN"} {
				for _, m := range []Mode{ModeServe, ModeAll} {
					env := map[string]string{"REDIS_URL": "redis://127.0.0.1:6379", "GITHUB_WEBHOOK_SECRET": strong, "PRQ_ADMIN_TOKEN": strong,
						"GITHUB_APP_ID": "1", "GITHUB_PRIVATE_KEY": "pem", "OPENAI_API_KEY": "sk"}
					env[setting] = tt.secret
					c, err := Load(func(k string) string { return env[k] }, nil)
					if err != nil {
						t.Fatal(err)
					}
					err = c.Validate(m)
					if tt.want == "" {
						if err != nil {
							t.Fatalf("%s refused: %v", setting, err)
						}
						continue
					}
					if err == nil || !strings.Contains(err.Error(), setting) || !strings.Contains(err.Error(), tt.want) {
						t.Fatalf("%s %q: got %v, want an error naming %s and saying %q", setting, tt.secret, err, setting, tt.want)
					}
					if len(tt.secret) >= 4 && strings.Contains(err.Error(), tt.secret) {
						t.Fatalf("the error echoes the secret: %v", err)
					}
				}
			}
			// the demo generates its own secrets and is not checked
			c := Default()
			c.GitHub.WebhookSecret, c.Admin.Token = Secret(tt.secret), Secret(tt.secret)
			if err := c.Validate(ModeDemo); err != nil {
				t.Fatalf("demo: %v", err)
			}
		})
	}
}

func TestAdminUIWritesSettings(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want string // "" when valid
	}{
		{"default is read-only", "", ""},
		{"ui_writes", "admin:\n  ui_writes: true\n", ""},
		{"read_only true alone", "admin:\n  read_only: true\n", ""},
		{"read_only false points to ui_writes", "admin:\n  read_only: false\n", "ui_writes"},
		{"contradiction", "admin:\n  read_only: true\n  ui_writes: true\n", "contradicts"},
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
		})
	}
}

func TestAllowNoPersistenceSources(t *testing.T) {
	for _, tt := range []struct {
		name string
		env  map[string]string
		args []string
		want bool
	}{
		{"default", nil, nil, false},
		{"env", map[string]string{"PRQ_ALLOW_NO_PERSISTENCE": "true"}, nil, true},
		{"flag", nil, []string{"--allow-no-persistence"}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("x", flag.ContinueOnError)
			var fl Flags
			fl.Register(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			c, err := Load(func(k string) string { return tt.env[k] }, &fl)
			if err != nil {
				t.Fatal(err)
			}
			if c.AllowNoPersistence != tt.want {
				t.Fatalf("AllowNoPersistence = %v, want %v", c.AllowNoPersistence, tt.want)
			}
		})
	}
	if _, err := Load(func(k string) string { return map[string]string{"PRQ_ALLOW_NO_PERSISTENCE": "perhaps"}[k] }, nil); err == nil ||
		!strings.Contains(err.Error(), "PRQ_ALLOW_NO_PERSISTENCE") {
		t.Fatalf("a bad PRQ_ALLOW_NO_PERSISTENCE: %v", err)
	}
}

// TestGitLabAloneNeedsNoGitHub: a configuration with GitLab tenants and
// no GitHub App validates for serve (no webhook secret: no GitHub
// webhook) and worker (no App id or key); without GitLab tenants, or
// with half a GitHub App, GitHub's settings are still required.
func TestGitLabAloneNeedsNoGitHub(t *testing.T) {
	strong := "3f9c1e0b7a5d42c8e6f1a9b0c7d2e4f6"
	gitlab := "gitlab:\n  webhook_token: " + strong + "\n  tenants:\n    - {id: 42, path: acme, token: glpat-abc}\n"
	for _, tc := range []struct {
		name, yaml string
		env        map[string]string
		want       string // "" when valid
	}{
		{"gitlab alone", gitlab, nil, ""},
		{"no tenants", "", nil, "GITHUB_WEBHOOK_SECRET"},
		{"no tenants, a worker", "", map[string]string{"GITHUB_WEBHOOK_SECRET": strong}, "GITHUB_APP_ID"},
		{"half a GitHub App", gitlab, map[string]string{"GITHUB_APP_ID": "7"}, "GITHUB_PRIVATE_KEY_PATH"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"REDIS_URL": "redis://127.0.0.1:6379", "PRQ_ADMIN_TOKEN": strong, "OPENAI_API_KEY": "sk"}
			for k, v := range tc.env {
				env[k] = v
			}
			f := filepath.Join(t.TempDir(), "prq.yaml")
			if err := os.WriteFile(f, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			env["PRQ_CONFIG"] = f
			c, err := Load(func(k string) string { return env[k] }, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = c.Validate(ModeAll)
			if (tc.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}
