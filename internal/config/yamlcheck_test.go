package config

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestFileErrors: each mistake in the file is named by file, line and
// setting path, a typo gets the nearest setting, and no message speaks
// Go (a type name like config.ModelConfig or int64, !!str).
func TestFileErrors(t *testing.T) {
	goSpeak := regexp.MustCompile(`config\.[A-Z]|int64|float64|!!|unmarshal|struct|\[\]string`)
	tests := []struct {
		name, yaml string
		want       []string // each error's text, after "config: FILE:"
	}{
		{"typo in a list entry", "models:\n  - name: a\n    requests_per_minute: 10\n  - name: b\n    token_per_minute: 100\n",
			[]string{"5: models[1].token_per_minute: unknown setting; did you mean tokens_per_minute?"}},
		{"typo at the top", "modles: []\n", []string{"1: modles: unknown setting; did you mean models?"}},
		{"typo in a section", "github:\n  check_run: false\n", []string{"2: github.check_run: unknown setting; did you mean check_runs?"}},
		{"typo in a map entry", "tiers:\n  paid:\n    wieght: 3\n", []string{"3: tiers.paid.wieght: unknown setting; did you mean weight?"}},
		{"nothing near", "zzzzzzzzz: 1\n", []string{"1: zzzzzzzzz: unknown setting (docs/configuration.md lists them)"}},
		{"word for a number", "models:\n  - name: a\n    requests_per_minute: eight\n", []string{`3: models[0].requests_per_minute: want a whole number, got "eight"`}},
		{"fraction for a whole number", "github:\n  max_review_parts: 1.5\n", []string{`2: github.max_review_parts: want a whole number, got "1.5"`}},
		{"word for a bool", "allow_eviction: sometimes\n", []string{`1: allow_eviction: want true or false, got "sometimes"`}},
		{"bad duration", "retention: forever\n", []string{`1: retention: "forever" is not a duration (like 30s or 5m)`}},
		{"list for a duration", "retention: [1h]\n", []string{"1: retention: want a duration (like 30s or 5m), got a list"}},
		{"value for a section", "worker: 5\n", []string{`1: worker: want a section of settings (name: value lines), got "5"`}},
		{"section for a value", "addr:\n  port: 1\n", []string{"2: addr: want a single value, got a section"}},
		{"section for a list", "models:\n  name: a\n", []string{"2: models: want a list (lines starting with -), got a section"}},
		{"list for the file", "- a\n", []string{"1: the file: want a section of settings (name: value lines), got a list"}},
		{"several at once", "modles: []\nworker:\n  concurency: 3\n", []string{"1: modles: unknown setting; did you mean models?", "3: worker.concurency: unknown setting; did you mean concurrency?"}},
		{"syntax: indentation", "log:\n  level: info\n format: json\n", []string{"3: YAML syntax: did not find expected key"}},
		{"syntax: tab", "worker:\n  concurrency: 5\n\tfoo: 1\n", []string{"3: YAML syntax: found a tab character"}},
	}
	dir := t.TempDir()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "-")+".yaml")
			if err := os.WriteFile(file, []byte(tt.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Load(func(k string) string { return map[string]string{"PRQ_CONFIG": file}[k] }, nil)
			if err == nil {
				t.Fatal("accepted")
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tt.want) {
				t.Fatalf("%d errors, want %d:\n%v", len(lines), len(tt.want), err)
			}
			for i, w := range tt.want {
				if !strings.HasPrefix(lines[i], "config: "+file+":"+w) {
					t.Errorf("error %d:\n  %s\nwant it to begin:\n  config: %s:%s", i, lines[i], file, w)
				}
			}
			if goSpeak.MatchString(err.Error()) {
				t.Errorf("speaks Go: %v", err)
			}
		})
	}
	// what is right still loads, anchors and merge keys included
	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(good, []byte("base: &b {requests_per_minute: 10, tokens_per_minute: 100}\n"), 0o600)
	if _, err := Load(func(k string) string { return map[string]string{"PRQ_CONFIG": good}[k] }, nil); err == nil || !strings.Contains(err.Error(), "base: unknown setting") {
		t.Fatalf("an unknown top-level anchor holder: %v", err)
	}
	os.WriteFile(good, []byte("models:\n  - &m {name: a, requests_per_minute: 10, tokens_per_minute: 100}\n  - {<<: *m, name: b}\nworker: {concurrency: 3}\nlog:\n"), 0o600)
	c, err := Load(func(k string) string { return map[string]string{"PRQ_CONFIG": good}[k] }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Models) != 2 || c.Models[1].TokensPerMinute != 100 || c.Worker.Concurrency != 3 || c.Log.Level != "info" {
		t.Fatalf("loaded %+v", c)
	}
}

func TestNearest(t *testing.T) {
	names := []string{"tokens_per_minute", "requests_per_minute", "burst_tokens", "name"}
	for in, want := range map[string]string{"token_per_minute": "tokens_per_minute", "Tokens_Per_Minute": "tokens_per_minute", "nmae": "name", "zzz": "", "requests": ""} {
		if got := Nearest(in, names); got != want {
			t.Errorf("Nearest(%q) = %q, want %q", in, got, want)
		}
	}
}
