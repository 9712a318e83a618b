package review

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/prq-dev/prq/diff"
	"github.com/prq-dev/prq/llm"
)

func TestParse(t *testing.T) {
	good := `{"summary":"ok","comments":[{"line":3,"start_line":null,"side":"RIGHT","body":"check the error"}]}`
	for _, tc := range []struct {
		name, in string
		comments int
		err      string // substring of the error; "" for success
	}{
		{"bare", good, 1, ""},
		{"no side and no start_line (json_object models)", `{"summary":"s","comments":[{"line":3,"body":"b"}]}`, 1, ""},
		{"clean file", `{"summary":"fine","comments":[]}`, 0, ""},
		{"fenced with prose", "Here:\n```json\n" + good + "\n```\nDone.", 1, ""},
		{"prose around", "My review: " + good + " Thanks!", 1, ""},
		{"delimited", "BEGIN REVIEW\n" + good + "\nEND REVIEW", 1, ""},
		{"quoted braces before the answer", "The code has `if err != nil {}` in it.\n" + good, 1, ""},
		{"braces alone are not a clean review", "The code has `{}` in it and looks fine.", 0, `"summary" is missing`},
		{"prose only", "The file looks fine, no problems.", 0, "no JSON object"},
		{"empty", "  ", 0, "empty reply"},
		{"cut off", good[:len(good)/2], 0, "no JSON object"},
		{"delimited and cut off", "BEGIN REVIEW\n" + good[:20], 0, "without END REVIEW"},
		{"unknown field", `{"summary":"s","comments":[],"verdict":"ok"}`, 0, "unknown field"},
		{"comments missing", `{"summary":"s"}`, 0, `"comments" is missing`},
		{"comments null", `{"summary":"s","comments":null}`, 0, "must be a list"},
		{"line zero", `{"summary":"s","comments":[{"line":0,"body":"b"}]}`, 0, "not a line number"},
		{"empty body", `{"summary":"s","comments":[{"line":2,"body":"  "}]}`, 0, "empty body"},
		{"bad side", `{"summary":"s","comments":[{"line":2,"side":"UP","body":"b"}]}`, 0, "side"},
		{"two reviews", good + "\n" + good, 0, "2 review objects"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Parse(tc.in)
			if tc.err == "" {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				if len(r.Comments) != tc.comments {
					t.Fatalf("%d comments, want %d", len(r.Comments), tc.comments)
				}
				return
			}
			if !errors.Is(err, ErrUnusable) || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("Parse = %+v, %v; want ErrUnusable containing %q", r, err, tc.err)
			}
		})
	}
}

func TestSchemaIsStrict(t *testing.T) {
	// OpenAI's strict mode: every object closed and every property required.
	var walk func(path string, v map[string]any)
	walk = func(path string, v map[string]any) {
		if v["type"] == "object" {
			if v["additionalProperties"] != false {
				t.Errorf("%s: additionalProperties must be false", path)
			}
			props, _ := v["properties"].(map[string]any)
			req := map[string]bool{}
			for _, r := range v["required"].([]any) {
				req[r.(string)] = true
			}
			for k, p := range props {
				if !req[k] {
					t.Errorf("%s.%s: not required", path, k)
				}
				walk(path+"."+k, p.(map[string]any))
			}
		}
		if items, ok := v["items"].(map[string]any); ok {
			walk(path+"[]", items)
		}
	}
	var s map[string]any
	if err := json.Unmarshal(Schema, &s); err != nil {
		t.Fatal(err)
	}
	walk("$", s)
}

func TestSystemPromptsAndFormats(t *testing.T) {
	if !strings.Contains(strings.ToLower(System(llm.FormatJSONObject)), "json") {
		t.Error("json_object needs the word JSON in a message")
	}
	if s := System(llm.FormatText); !strings.Contains(s, Begin) || !strings.Contains(s, End) {
		t.Error("text mode must describe its delimiters")
	}
	if f := Format(llm.FormatJSONSchema); f.Name != SchemaName || len(f.Schema) == 0 {
		t.Errorf("json_schema format %+v", f)
	}
	for model, want := range map[string]llm.FormatType{
		"gpt-4o": llm.FormatJSONSchema, "gpt-4o-mini": llm.FormatJSONSchema, "openai/gpt-4.1": llm.FormatJSONSchema,
		"o3-mini": llm.FormatJSONSchema, "gpt-4o-2024-05-13": llm.FormatJSONObject, "gpt-3.5-turbo": llm.FormatJSONObject,
		"llama-3.1-70b": llm.FormatJSONObject, "claude-sonnet-4": llm.FormatText,
	} {
		if got := DefaultFormat(model); got != want {
			t.Errorf("DefaultFormat(%s) = %s, want %s", model, got, want)
		}
	}
}

func TestPlace(t *testing.T) {
	// head lines 10..13 (11, 12 added), base line 11 deleted; a second hunk at 40..41
	d, err := diff.Parse("@@ -10,3 +10,4 @@\n a\n-b\n+c\n+d\n e\n@@ -40,2 +41,2 @@\n x\n-y\n+z")
	if err != nil {
		t.Fatal(err)
	}
	ip := func(n int) *int { return &n }
	r := Reply{Comments: []Finding{
		{Line: 12, Side: "RIGHT", Body: "on a line"},
		{Line: 12, StartLine: ip(11), Side: "RIGHT", Body: "a range in one hunk"},
		{Line: 42, StartLine: ip(12), Side: "RIGHT", Body: "a range across hunks"},
		{Line: 11, Side: "LEFT", Body: "a deleted line"},
		{Line: 15, Side: "RIGHT", Body: "two lines after the hunk"},
		{Line: 25, Side: "RIGHT", Body: "far from any hunk"},
		{Line: 900, Body: "outside the file's diff"},
	}}
	comments, notes := Place(r, d)
	type got struct {
		line, start int
		side        diff.Side
		moved       bool
	}
	var gs []got
	for _, c := range comments {
		gs = append(gs, got{c.Line, c.StartLine, c.Side, c.Moved})
	}
	want := []got{{12, 0, diff.Right, false}, {42, 0, diff.Right, false}, {11, 0, diff.Left, false}, {13, 0, diff.Right, true}}
	if len(gs) != len(want) {
		t.Fatalf("comments %+v, want %+v", gs, want)
	}
	for i := range want {
		if gs[i] != want[i] {
			t.Errorf("comment %d: %+v, want %+v", i, gs[i], want[i])
		}
	}
	if !strings.Contains(comments[0].Body, "on a line") || !strings.Contains(comments[0].Body, "a range in one hunk") {
		t.Errorf("two findings on one line are merged: %q", comments[0].Body)
	}
	if !strings.HasPrefix(comments[3].Body, "(about line 15)") {
		t.Errorf("a moved finding says so: %q", comments[3].Body)
	}
	if len(notes) != 2 || notes[0].Line != 25 || notes[1].Line != 900 {
		t.Errorf("notes %+v, want lines 25 and 900 in the body", notes)
	}

	// A range alone keeps its start line.
	comments, _ = Place(Reply{Comments: []Finding{{Line: 12, StartLine: ip(10), Side: "RIGHT", Body: "r"}}}, d)
	if len(comments) != 1 || comments[0].StartLine != 10 {
		t.Errorf("range: %+v", comments)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(`{"summary":"s","comments":[{"line":3,"body":"b"}]}`)
	f.Add("```json\n{}\n```")
	f.Fuzz(func(t *testing.T, in string) {
		r, err := Parse(in)
		if err != nil {
			if !errors.Is(err, ErrUnusable) {
				t.Fatalf("error %v is not ErrUnusable", err)
			}
			return
		}
		for _, c := range r.Comments {
			if c.Line < 1 || strings.TrimSpace(c.Body) == "" {
				t.Fatalf("accepted a bad comment %+v", c)
			}
		}
	})
}
