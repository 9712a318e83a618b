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
		{"unknown field ignored", `{"summary":"s","comments":[],"verdict":"ok"}`, 0, ""},
		{"summary not a string", `{"summary":3,"comments":[]}`, 0, `"summary" is not a string`},
		{"comments not a list", `{"summary":"s","comments":{"line":2}}`, 0, `"comments" must be a list`},
		{"findings not a list", `{"summary":"s","findings":"none"}`, 0, `"findings" must be a list`},
		{"comment not an object", `{"summary":"s","comments":["line 2: bad"]}`, 0, "comment 1: not an object"},
		{"no line", `{"summary":"s","comments":[{"body":"b"}]}`, 0, "no line number"},
		{"line not a number", `{"summary":"s","comments":[{"line":"twelve","body":"b"}]}`, 0, `line "twelve" is not a line number`},
		{"negative string line", `{"summary":"s","comments":[{"line":"-3","body":"b"}]}`, 0, "not a line number"},
		{"body not a string", `{"summary":"s","comments":[{"line":2,"body":["b"]}]}`, 0, "body is not a string"},
		{"lower-case side", `{"summary":"s","comments":[{"line":2,"side":"left","body":"b"}]}`, 1, ""},
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

// TestParseTolerant: replies that carry what prq needs in a looser shape
// (fields of the model's own, line numbers as strings, "findings" for
// "comments") read as the same review as the clean reply, and name what
// they carried that prq ignored.
func TestParseTolerant(t *testing.T) {
	clean := `{"summary":"ok","comments":[{"line":3,"start_line":null,"side":"RIGHT","body":"check the error"},{"line":9,"start_line":7,"side":"LEFT","body":"a range"}]}`
	want, err := Parse(clean)
	if err != nil || len(want.Ignored) != 0 {
		t.Fatalf("clean reply: %+v %v", want, err)
	}
	for _, tc := range []struct {
		name, in string
		ignored  []string
	}{
		{"extra fields per comment", `{"summary":"ok","comments":[{"path":"a.go","line":3,"start_line":null,"side":"RIGHT","severity":"high","body":"check the error","suggestion":"if err != nil {}"},{"path":"a.go","line":9,"start_line":7,"side":"LEFT","severity":"low","body":"a range"}]}`,
			[]string{"comments[].path", "comments[].severity", "comments[].suggestion"}},
		{"extra top-level fields", `{"verdict":"request changes","summary":"ok","confidence":0.8,"comments":[{"line":3,"start_line":null,"side":"RIGHT","body":"check the error"},{"line":9,"start_line":7,"side":"LEFT","body":"a range"}]}`,
			[]string{"confidence", "verdict"}},
		{"string line numbers", `{"summary":"ok","comments":[{"line":"3","start_line":null,"side":"RIGHT","body":"check the error"},{"line":" 9","start_line":"7","side":"LEFT","body":"a range"}]}`, nil},
		{"findings for comments", `{"summary":"ok","findings":[{"line":3,"start_line":null,"side":"RIGHT","body":"check the error"},{"line":9,"start_line":7,"side":"LEFT","body":"a range"}]}`, nil},
		{"all at once, fenced", "Here you go:\n```json\n" + `{"summary":"ok","findings":[{"file":"a.go","line":"3","side":"right","body":"check the error"},{"line":9,"start_line":"7","side":"LEFT","body":"a range","severity":"nit"}]}` + "\n```",
			[]string{"comments[].file", "comments[].severity"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.in)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !equalReviews(got, want) {
				t.Errorf("review %+v, want the clean reply's %+v", got, want)
			}
			if strings.Join(got.Ignored, ",") != strings.Join(tc.ignored, ",") {
				t.Errorf("ignored %q, want %q", got.Ignored, tc.ignored)
			}
		})
	}
}

func equalReviews(a, b Reply) bool {
	if a.Summary != b.Summary || len(a.Comments) != len(b.Comments) {
		return false
	}
	for i := range a.Comments {
		x, y := a.Comments[i], b.Comments[i]
		if x.Line != y.Line || x.Side != y.Side || x.Body != y.Body || (x.StartLine == nil) != (y.StartLine == nil) || (x.StartLine != nil && *x.StartLine != *y.StartLine) {
			return false
		}
	}
	return true
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
	if !strings.Contains(strings.ToLower(Guide(llm.FormatJSONObject)), "json") {
		t.Error("json_object needs the word JSON in a message")
	}
	if s := Guide(llm.FormatText); !strings.Contains(s, Begin) || !strings.Contains(s, End) {
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

// FuzzParse: no reply crashes the reader, and a reply it accepts holds
// what a review needs.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"summary":"ok","comments":[{"line":3,"side":"RIGHT","body":"b"}]}`,
		`{"summary":"ok","findings":[{"line":"3","start_line":"1","severity":"x","body":"b"}]}`,
		"BEGIN REVIEW\n{\"summary\":\"s\",\"comments\":[]}\nEND REVIEW",
		"```json\n{\"summary\":\"s\",\"comments\":[{\"line\":1e3,\"body\":\"b\"}]}\n```",
		`{"summary":null,"comments":[null]}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		r, err := Parse(in)
		if err != nil {
			if !errors.Is(err, ErrUnusable) {
				t.Fatalf("error %v is not ErrUnusable", err)
			}
			return
		}
		if r.Comments == nil {
			t.Fatal("accepted a reply without a list of comments")
		}
		for _, c := range r.Comments {
			if c.Line < 1 || strings.TrimSpace(c.Body) == "" || (c.Side != "" && c.Side != "RIGHT" && c.Side != "LEFT") {
				t.Fatalf("accepted comment %+v", c)
			}
		}
	})
}
