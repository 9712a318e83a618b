package config

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/prq-dev/prq/webhook"
)

// TestEffectiveFillsDocumentedDefaults: every setting whose reference
// gives a literal default (docs/configuration.md) shows that value in
// the effective configuration, in every entry of a list or a map.
func TestEffectiveFillsDocumentedDefaults(t *testing.T) {
	def := Default() // with entries that leave everything unset
	def.Models = []ModelConfig{{Name: "m", RequestsPerMinute: 10, TokensPerMinute: 1000}}
	def.Tiers = map[string]Tier{"paid": {Weight: 1}}
	def.Providers = []ProviderConfig{{Name: "p", Kind: KindOpenAI}}
	tree, err := asTree(def.Effective())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for path, m := range meanings {
		text, ok := unsetLiteral(m.Unset)
		if _, other := meanings[text]; !ok || other {
			continue
		}
		var want any
		if err := yaml.Unmarshal([]byte(text), &want); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for _, got := range lookup(tree, strings.Split(path, ".")) {
			n++
			if !sameValue(got, want) {
				t.Errorf("%s: effective %v, the reference says %v", path, got, want)
			}
		}
	}
	if n < 20 {
		t.Fatalf("only %d values checked", n)
	}
	if def.GitHub.CheckRuns != nil || def.Models[0].Period != 0 {
		t.Fatal("Effective changed the configuration it copied")
	}
}

// lookup returns the values at path in a YAML tree, every entry's for
// models[] and <name>.
func lookup(v any, parts []string) []any {
	if len(parts) == 0 {
		return []any{v}
	}
	m, _ := v.(map[string]any)
	name, list := strings.CutSuffix(parts[0], "[]")
	if parts[0] == "<name>" {
		var out []any
		for _, e := range m {
			out = append(out, lookup(e, parts[1:])...)
		}
		return out
	}
	if list {
		var out []any
		es, _ := m[name].([]any)
		for _, e := range es {
			out = append(out, lookup(e, parts[1:])...)
		}
		return out
	}
	if _, ok := m[name]; !ok {
		return nil // an absent optional section (models[].prices)
	}
	return lookup(m[name], parts[1:])
}

func sameValue(a, b any) bool {
	as, bs := fmt.Sprint(a), fmt.Sprint(b)
	if da, err := time.ParseDuration(as); err == nil {
		if db, err := time.ParseDuration(bs); err == nil {
			return da == db
		}
	}
	return as == bs
}

func TestDiffDefaults(t *testing.T) {
	c := Default()
	if d, err := c.DiffDefaults(); err != nil || d != "# every setting has its default\n" {
		t.Fatalf("the defaults differ from themselves (%v):\n%s", err, d)
	}
	c.Worker.Concurrency = 5
	c.GitHub.CheckRuns = BoolPtr(false)
	c.GitHub.MaxReviewParts = 20 // the default, written out: not a difference
	c.GitHub.WebhookSecret = "a-secret-not-to-print"
	d, err := c.DiffDefaults()
	if err != nil {
		t.Fatal(err)
	}
	want := "github:\n    check_runs: false\n    webhook_secret: '[redacted]'\nworker:\n    concurrency: 5\n"
	if d != want {
		t.Fatalf("diff:\n%s\nwant:\n%s", d, want)
	}
}

// TestEffectiveDefaultsFollowTheirCode: the defaults the reference
// takes from the code that applies them are what that code applies: a
// model's period (Limits), its output cap (as Validate counts it) and
// who may talk to the bot (the webhook handler's).
func TestEffectiveDefaultsFollowTheirCode(t *testing.T) {
	c := Default()
	c.Models = []ModelConfig{{Name: "m", RequestsPerMinute: 10, TokensPerMinute: 100000, OutputTokensPerMinute: 1000}}
	c.Jobs = JobsConfig{SummaryModel: "m", ReviewModel: "m", ChatModel: "m"}
	eff := c.Effective()
	l, err := c.Models[0].Limits()
	if err != nil {
		t.Fatal(err)
	}
	if got := eff.Models[0].Period.D(); got != l.Period || got == 0 {
		t.Errorf("effective period %s, Limits applies %s", got, l.Period)
	}
	out := eff.Models[0].MaxOutputTokens
	err = c.Validate(ModeCheck)
	if want := fmt.Sprintf("max_output_tokens %d exceeds output_tokens_per_minute 1000", out); out == 0 || err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("effective max_output_tokens %d; Validate: %v", out, err)
	}
	if got := eff.GitHub.ChatAssociations; !slices.Equal(got, webhook.DefaultChatAssociations) {
		t.Errorf("effective chat_associations %q, the webhook handler's %q", got, webhook.DefaultChatAssociations)
	}
}
