package config

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

func defaultSettings(t *testing.T) []setting {
	t.Helper()
	def, err := Load(func(string) string { return "" }, nil)
	if err != nil {
		t.Fatal(err)
	}
	return settingsOf(def)
}

// TestMeanings: every setting has a meaning of a sentence or two and
// every meaning names a setting; every top-level section has a part and
// every part names one; an Unset text stands only where the defaults
// hold no value (where they do, the reference prints it).
func TestMeanings(t *testing.T) {
	settings := defaultSettings(t)
	seen := map[string]bool{}
	tops := map[string]bool{"": true}
	for _, s := range settings {
		seen[s.Path] = true
		if s.Path == s.Top() { // a top-level section: its part says what it is
			tops[s.Path] = true
			continue
		}
		m, ok := meanings[s.Path]
		switch {
		case !ok || m.Text == "":
			t.Errorf("setting %s has no meaning: add one to meanings (reference_text.go)", s.Path)
		case len(m.Text) > 300 || strings.Count(m.Text, ". ") > 2:
			t.Errorf("meaning of %s is %d bytes: keep it to a sentence or two and link the docs page for more", s.Path, len(m.Text))
		case m.Unset != "" && s.Set:
			t.Errorf("meaning of %s has Unset %q, but the defaults set it to %s: drop Unset", s.Path, m.Unset, formatValue(s.Value))
		}
	}
	for path := range meanings {
		if !seen[path] {
			t.Errorf("meanings has %s, which is not a setting", path)
		}
	}
	for top := range tops {
		if parts[top].Text == "" {
			t.Errorf("section %q has no part: add one to parts (reference_text.go)", top)
		}
	}
	for top := range parts {
		if !tops[top] {
			t.Errorf("parts has %q, which is not a top-level section", top)
		}
	}
}

// TestReference: the reference shows every setting once with the
// defaults Load gives, every variable and flag, what Validate requires
// per command, and never a secret.
func TestReference(t *testing.T) {
	var b bytes.Buffer
	if err := Reference(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, s := range defaultSettings(t) {
		if s.Path == s.Top() {
			if !strings.Contains(out, "\n## "+s.Path+"\n") {
				t.Errorf("no section %s", s.Path)
			}
			continue
		}
		row := regexp.MustCompile(`(?m)^\| <a id="` + regexp.QuoteMeta(anchor(s.Path)) + `"></a>` + "`" + regexp.QuoteMeta(s.Path) + "`" + ` \| [^|]+ \| (.*?) \| `)
		ms := row.FindAllStringSubmatch(out, -1)
		if len(ms) != 1 {
			t.Errorf("%s has %d rows", s.Path, len(ms))
			continue
		}
		if s.Set && s.Kind == kindLeaf && s.Type != secretType && ms[0][1] != cell(formatValue(s.Value)) {
			t.Errorf("%s shows default %s, Load gives %s", s.Path, ms[0][1], formatValue(s.Value))
		}
	}
	for _, e := range envSettings {
		if !strings.Contains(out, "| `"+e.Name+"` | [`"+e.Path+"`](#"+anchor(e.Path)+") |") {
			t.Errorf("no row for %s", e.Name)
		}
	}
	for _, f := range flagSettings {
		if !strings.Contains(out, "| `--"+f.Name) {
			t.Errorf("no row for --%s", f.Name)
		}
	}
	for _, want := range []string{
		"**Required** by `serve`, `worker` and `all`.", // redis_url
		"**Required** by `serve` and `all`.",           // the webhook secret
		"`0.5`",                                        // scheduler.chat_cap, from Default
		"```yaml\nmodels:\n  - {name: gpt-4o-mini, requests_per_minute: 500, tokens_per_minute: 200000, max_output_tokens: 512}\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the reference lacks %q", want)
		}
	}
	var again bytes.Buffer
	if err := Reference(&again); err != nil || again.String() != out {
		t.Errorf("a second reference differs (map order?): %v", err)
	}
	if n := strings.Count(out, "**Secret**: never printed."); n != 7 {
		t.Errorf("%d settings marked secret, want the 7 Secret fields", n)
	}
}

func TestFormatNeverPrintsASecret(t *testing.T) {
	c := Default()
	c.GitHub.WebhookSecret = "s3cr3t-value-0123456789"
	for _, s := range settingsOf(&c) {
		if s.Path == "github.webhook_secret" {
			if got := defaultCell(s, meanings[s.Path]); strings.Contains(got, "s3cr3t") {
				t.Fatalf("the cell shows the secret: %s", got)
			}
			return
		}
	}
	t.Fatal("no github.webhook_secret setting")
}
