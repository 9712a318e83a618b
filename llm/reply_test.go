package llm

import (
	"strings"
	"testing"
)

func TestJSONObjects(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string
	}{
		{"bare", `{"a":1}`, []string{`{"a":1}`}},
		{"spaces", "\n  {\"a\": {\"b\": 2}}\n", []string{`{"a": {"b": 2}}`}},
		{"fenced", "Here you go:\n```json\n{\"a\":1}\n```\nThanks.", []string{`{"a":1}`}},
		{"fence without language", "```\n{\"a\":1}\n```", []string{`{"a":1}`}},
		{"prose around", `Sure! The review is {"a":1} and that is all.`, []string{`{"a":1}`}},
		{"quoted code before the answer", "The code has `if x {}` in it. {\"summary\":\"s\",\"comments\":[]}", []string{`{}`, `{"summary":"s","comments":[]}`}},
		{"prose only", "The file looks fine to me.", nil},
		{"truncated", `{"summary":"s","comments":[{"line":3,`, nil},
		{"array is not an object", `[{"a":1}]`, []string{`{"a":1}`}},
		{"braces in strings", `{"body":"use {} here"}`, []string{`{"body":"use {} here"}`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := JSONObjects(tc.in)
			var gs []string
			for _, g := range got {
				gs = append(gs, string(g))
			}
			if strings.Join(gs, "|") != strings.Join(tc.want, "|") {
				t.Errorf("JSONObjects(%q) = %q, want %q", tc.in, gs, tc.want)
			}
		})
	}
}

func FuzzJSONObjects(f *testing.F) {
	f.Add("```json\n{\"a\":1}\n```")
	f.Add(`x {"a":{"b":[1,2,{"c":3}]}} y {}`)
	f.Fuzz(func(t *testing.T, in string) {
		for _, obj := range JSONObjects(in) {
			if len(obj) == 0 || obj[0] != '{' {
				t.Fatalf("returned %q, not an object", obj)
			}
		}
	})
}
