package openapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Schema is the subset of an OpenAPI 3.0 schema object GitHub's request
// descriptions use, its references resolved: the validation keywords
// only (the generator drops descriptions and examples, and refuses a
// keyword this package cannot check).
type Schema struct {
	Type       Types              `json:"type,omitempty"`
	Nullable   bool               `json:"nullable,omitempty"`
	Enum       []any              `json:"enum,omitempty"`
	Format     string             `json:"format,omitempty"`
	Pattern    string             `json:"pattern,omitempty"`
	Properties map[string]*Schema `json:"properties,omitempty"`
	Required   []string           `json:"required,omitempty"`
	// AdditionalProperties is nil when absent (allowed), else a schema:
	// true is the empty schema, false a schema that refuses everything.
	AdditionalProperties *Additional `json:"additionalProperties,omitempty"`
	Items                *Schema     `json:"items,omitempty"`
	OneOf                []*Schema   `json:"oneOf,omitempty"`
	AnyOf                []*Schema   `json:"anyOf,omitempty"`
	AllOf                []*Schema   `json:"allOf,omitempty"`
	Minimum              *float64    `json:"minimum,omitempty"`
	Maximum              *float64    `json:"maximum,omitempty"`
	MinLength            *int        `json:"minLength,omitempty"`
	MaxLength            *int        `json:"maxLength,omitempty"`
	MinItems             *int        `json:"minItems,omitempty"`
	MaxItems             *int        `json:"maxItems,omitempty"`
}

// Keywords are the schema keywords Schema checks; the generator refuses
// a description whose schemas use another validation keyword.
var Keywords = []string{"type", "nullable", "enum", "format", "pattern", "properties", "required", "additionalProperties", "items",
	"oneOf", "anyOf", "allOf", "minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems"}

// Types is a schema's type: one name in OpenAPI 3.0, a list in 3.1.
type Types []string

// UnmarshalJSON reads "string" or ["string", "null"].
func (t *Types) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*t = Types{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return fmt.Errorf("openapi: type %s is neither a name nor a list", b)
	}
	*t = many
	return nil
}

// MarshalJSON writes one name as a name.
func (t Types) MarshalJSON() ([]byte, error) {
	if len(t) == 1 {
		return json.Marshal(t[0])
	}
	return json.Marshal([]string(t))
}

// Additional is additionalProperties: a boolean or a schema.
type Additional struct {
	Allowed bool    // the boolean form
	Schema  *Schema // the schema form (Allowed is then true)
}

// UnmarshalJSON reads true, false or a schema.
func (a *Additional) UnmarshalJSON(b []byte) error {
	var ok bool
	if err := json.Unmarshal(b, &ok); err == nil {
		*a = Additional{Allowed: ok}
		return nil
	}
	var s Schema
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	*a = Additional{Allowed: true, Schema: &s}
	return nil
}

// MarshalJSON writes the boolean or the schema.
func (a Additional) MarshalJSON() ([]byte, error) {
	if a.Schema != nil {
		return json.Marshal(a.Schema)
	}
	return json.Marshal(a.Allowed)
}

// Decode reads a JSON document for Validate (numbers kept exact).
func Decode(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if d.More() {
		return nil, fmt.Errorf("openapi: more than one JSON value")
	}
	return v, nil
}

// Mode says how strictly a body is checked.
type Mode int

const (
	// AsGitHub refuses what GitHub's description refuses (the fake).
	AsGitHub Mode = iota
	// Strict also refuses an object member the schema does not name
	// (where additionalProperties does not allow it explicitly): GitHub
	// ignores those, so a misspelt field would otherwise go unseen.
	Strict
)

// Validate checks v (from Decode) against s and returns every violation,
// each naming where it is ("comments[0].side").
func (s *Schema) Validate(v any, mode Mode) []string {
	var out []string
	s.validate("", v, mode, &out)
	return out
}

func at(path, member string) string {
	if path == "" {
		return member
	}
	return path + "." + member
}

func where(path string) string {
	if path == "" {
		return "the body"
	}
	return path
}

func (s *Schema) validate(path string, v any, mode Mode, out *[]string) {
	if s == nil {
		return
	}
	fail := func(format string, args ...any) { *out = append(*out, where(path)+": "+fmt.Sprintf(format, args...)) }
	if v == nil {
		if s.Nullable || len(s.Type) == 0 || s.Type.has("null") {
			return
		}
		fail("is null, want %s", strings.Join(s.Type, " or "))
		return
	}
	if len(s.Type) > 0 && !s.Type.match(v) {
		fail("is %s, want %s", kind(v), strings.Join(s.Type, " or "))
		return
	}
	if len(s.Enum) > 0 && !inEnum(s.Enum, v) {
		fail("%s is not one of %s", show(v), show(s.Enum))
	}
	switch x := v.(type) {
	case string:
		n := utf8.RuneCountInString(x)
		if s.MinLength != nil && n < *s.MinLength {
			fail("has %d characters, want at least %d", n, *s.MinLength)
		}
		if s.MaxLength != nil && n > *s.MaxLength {
			fail("has %d characters, want at most %d", n, *s.MaxLength)
		}
		if s.Pattern != "" {
			if re, err := regexp.Compile(s.Pattern); err != nil || !re.MatchString(x) {
				fail("%s does not match %s", show(x), s.Pattern)
			}
		}
		if msg := checkFormat(s.Format, x); msg != "" {
			fail("%s is not a %s (%s)", show(x), s.Format, msg)
		}
	case json.Number:
		f, _ := x.Float64()
		if s.Minimum != nil && f < *s.Minimum {
			fail("%s is below the minimum %v", x, *s.Minimum)
		}
		if s.Maximum != nil && f > *s.Maximum {
			fail("%s is above the maximum %v", x, *s.Maximum)
		}
	case []any:
		if s.MinItems != nil && len(x) < *s.MinItems {
			fail("has %d items, want at least %d", len(x), *s.MinItems)
		}
		if s.MaxItems != nil && len(x) > *s.MaxItems {
			fail("has %d items, want at most %d", len(x), *s.MaxItems)
		}
		for i, item := range x {
			s.Items.validate(fmt.Sprintf("%s[%d]", path, i), item, mode, out)
		}
	case map[string]any:
		for _, name := range s.Required {
			if _, ok := x[name]; !ok {
				*out = append(*out, at(path, name)+": is required")
			}
		}
		names := make([]string, 0, len(x))
		for name := range x {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			if p, ok := s.Properties[name]; ok {
				p.validate(at(path, name), x[name], mode, out)
				continue
			}
			switch ap := s.AdditionalProperties; {
			case ap != nil && ap.Schema != nil:
				ap.Schema.validate(at(path, name), x[name], mode, out)
			case ap != nil && !ap.Allowed:
				*out = append(*out, at(path, name)+": is not a member the description allows")
			case ap == nil && mode == Strict && len(s.Properties) > 0:
				*out = append(*out, at(path, name)+": is not in the description (GitHub ignores it)")
			}
		}
	}
	for _, sub := range s.AllOf {
		sub.validate(path, v, mode, out)
	}
	if len(s.AnyOf) > 0 {
		if n, first := matches(s.AnyOf, path, v, mode); n == 0 {
			fail("matches none of its %d alternatives (the first: %s)", len(s.AnyOf), first)
		}
	}
	if len(s.OneOf) > 0 {
		if n, first := matches(s.OneOf, path, v, mode); n != 1 {
			if n == 0 {
				fail("matches none of its %d alternatives (the first: %s)", len(s.OneOf), first)
			} else {
				fail("matches %d of its alternatives, want exactly one", n)
			}
		}
	}
}

// matches counts the alternatives v satisfies, and names the first
// violation of the first alternative.
func matches(alts []*Schema, path string, v any, mode Mode) (int, string) {
	n, first := 0, ""
	for i, alt := range alts {
		var errs []string
		alt.validate(path, v, mode, &errs)
		if len(errs) == 0 {
			n++
		} else if i == 0 {
			first = errs[0]
		}
	}
	return n, first
}

func (t Types) has(name string) bool {
	for _, x := range t {
		if x == name {
			return true
		}
	}
	return false
}

func (t Types) match(v any) bool {
	for _, name := range t {
		switch x := v.(type) {
		case string:
			if name == "string" {
				return true
			}
		case bool:
			if name == "boolean" {
				return true
			}
		case json.Number:
			if name == "number" {
				return true
			}
			if _, err := strconv.ParseInt(x.String(), 10, 64); name == "integer" && err == nil {
				return true
			}
		case []any:
			if name == "array" {
				return true
			}
		case map[string]any:
			if name == "object" {
				return true
			}
		}
	}
	return false
}

func kind(v any) string {
	switch x := v.(type) {
	case string:
		return "a string " + show(x)
	case bool:
		return "a boolean"
	case json.Number:
		return "the number " + x.String()
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

func show(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func inEnum(enum []any, v any) bool {
	got := show(v)
	for _, e := range enum {
		if show(e) == got {
			return true
		}
	}
	return false
}

// checkFormat checks the formats whose breach GitHub refuses; others
// (email, …) pass.
func checkFormat(format, s string) string {
	switch format {
	case "date-time":
		if _, err := time.Parse(time.RFC3339, s); err != nil {
			return "RFC 3339"
		}
	case "uri":
		if u, err := url.Parse(s); err != nil || u.Scheme == "" {
			return "an absolute URI"
		}
	}
	return ""
}
