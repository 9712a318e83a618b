package config

import (
	"cmp"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// Effective returns a copy of the configuration with the defaults that
// are applied where a setting is used filled in, so `prq config check`
// shows what runs: github.check_runs true rather than null,
// models[].period 1m rather than 0s. The defaults come from the
// reference's words (meanings[].Unset, docs/configuration.md) wherever
// they are a literal, so what is printed and what is documented cannot
// differ; the few derived from other settings are filled after them. A
// setting whose default depends on how it is used (models[].
// output_format, by model family) stays unset. c is not changed.
func (c *Config) Effective() *Config {
	out := *c
	out.Providers = slices.Clone(c.Providers)
	out.Models = slices.Clone(c.Models)
	out.Tiers = maps.Clone(c.Tiers)
	v := reflect.ValueOf(&out).Elem()
	for _, path := range slices.Sorted(maps.Keys(meanings)) {
		if text, ok := unsetLiteral(meanings[path].Unset); ok && meanings[text] == (meaning{}) { // not another setting's name
			fillZero(v, strings.Split(path, "."), text)
		}
	}
	if out.GitHub.WebhookMaxInFlightBytes == 0 {
		out.GitHub.WebhookMaxInFlightBytes = out.GitHub.WebhookMaxBytes + 4<<20 // as the webhook handler does
	}
	if out.Gateway.HeaderTimeout == 0 {
		out.Gateway.HeaderTimeout = out.OpenAI.Timeout
	}
	for i, m := range out.Models {
		if l, err := c.Models[i].Limits(); err == nil {
			m.TokensPerMinute = cmp.Or(m.TokensPerMinute, l.TokensPerPeriod)
			m.BurstRequests = cmp.Or(m.BurstRequests, l.BurstRequests)
			m.BurstTokens = cmp.Or(m.BurstTokens, l.BurstTokens)
			m.Window = cmp.Or(m.Window, Duration(l.Window))
		}
		if p, ok := c.ProviderOf(m.Name); ok && m.CachedInputCounts == nil {
			m.CachedInputCounts = BoolPtr(m.CachedInputCountsOr(p.Kind))
		}
		if p, ok := m.PricesOf(); ok && m.Prices == nil {
			m.Prices = &PricesConfig{Input: p.Input, CachedInput: p.CachedInput, CacheWrite: p.CacheWrite, Output: p.Output}
		}
		out.Models[i] = m
	}
	return &out
}

// literalUnset matches a default written as code: `20`, or a list of
// them: `OWNER`, `MEMBER`, `COLLABORATOR`.
var literalUnset = regexp.MustCompile("^`[^`]+`(, `[^`]+`)*$")

// unsetLiteral turns a literal Unset into YAML text ("" and false when
// it is words, not a value).
func unsetLiteral(unset string) (string, bool) {
	if !literalUnset.MatchString(unset) {
		return "", false
	}
	items := strings.Split(unset, ", ")
	for i, it := range items {
		items[i] = strings.Trim(it, "`")
	}
	if len(items) == 1 {
		return items[0], true
	}
	return "[" + strings.Join(items, ", ") + "]", true
}

// fillZero sets the setting at the path's parts (models[] and <name>
// reach every entry) to the YAML text where it holds its zero value.
func fillZero(v reflect.Value, parts []string, text string) {
	if len(parts) == 0 {
		if v.IsZero() {
			_ = yaml.Unmarshal([]byte(text), v.Addr().Interface()) // TestEffectiveFillsDocumentedDefaults checks each
		}
		return
	}
	if v.Kind() == reflect.Pointer {
		if v.IsNil() { // an absent section (models[].prices): nothing to fill
			return
		}
		v = v.Elem()
	}
	name, list := strings.CutSuffix(parts[0], "[]")
	var f reflect.Value
	for i := range v.NumField() {
		if yamlName(v.Type().Field(i)) == name {
			f = v.Field(i)
		}
	}
	switch {
	case !f.IsValid():
		return
	case list:
		for i := range f.Len() {
			fillZero(f.Index(i), parts[1:], text)
		}
	case f.Kind() == reflect.Map && len(parts) > 1 && parts[1] == "<name>":
		for _, k := range f.MapKeys() {
			e := reflect.New(f.Type().Elem()).Elem()
			e.Set(f.MapIndex(k))
			fillZero(e, parts[2:], text)
			f.SetMapIndex(k, e)
		}
	default:
		fillZero(f, parts[1:], text)
	}
}

// DiffDefaults renders, secrets redacted, only the settings whose
// effective value differs from the defaults' (a list, like models, as a
// whole).
func (c *Config) DiffDefaults() (string, error) {
	def := Default()
	cur, err := asTree(c.Effective())
	if err != nil {
		return "", err
	}
	base, err := asTree(def.Effective())
	if err != nil {
		return "", err
	}
	d := diffTree(cur, base)
	if len(d) == 0 {
		return "# every setting has its default\n", nil
	}
	b, err := yaml.Marshal(d)
	if err != nil {
		return "", fmt.Errorf("config: diff: %w", err)
	}
	return string(b), nil
}

// asTree is the redacted configuration as YAML's generic tree.
func asTree(c *Config) (map[string]any, error) {
	var m map[string]any
	if err := yaml.Unmarshal([]byte(c.Redacted()), &m); err != nil {
		return nil, fmt.Errorf("config: diff: %w", err)
	}
	return m, nil
}

// diffTree keeps what differs in cur from base, descending into maps.
func diffTree(cur, base map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range cur {
		b, ok := base[k]
		if ok && reflect.DeepEqual(v, b) {
			continue
		}
		vm, isMap := v.(map[string]any)
		bm, baseMap := b.(map[string]any)
		if isMap && baseMap {
			if d := diffTree(vm, bm); len(d) > 0 {
				out[k] = d
			}
			continue
		}
		out[k] = v
	}
	return out
}
