package fakeopenai

import (
	"encoding/json"
	"strconv"
	"testing"
)

// TestWalkthroughGroupsByTheme: the fake's walkthrough is the same for
// the same prompt, one bullet per theme in the order of its first file.
func TestWalkthroughGroupsByTheme(t *testing.T) {
	user := "Task: write the walkthrough of the pull request below: …\nFiles (4):\n" +
		"- pkg/a.go (modified, +3 -1)\n- pkg/a_test.go (added, +10 -0)\n- pkg/b.go (added, +2 -0)\n- README.md (modified, +1 -1): excluded by *.md\n\nFile: pkg/a.go …\n"
	want := "This pull request changes 4 files in 3 themes.\n\n" +
		"- **`pkg/`** (+5 -1): `pkg/a.go`, `pkg/b.go`\n" +
		"- **Tests** (+10 -0): `pkg/a_test.go`\n" +
		"- **Documentation** (+1 -1): `README.md`"
	if got := walkthrough(user); got != want {
		t.Fatalf("walkthrough:\n%s\nwant:\n%s", got, want)
	}
	var req chatRequest
	if err := json.Unmarshal([]byte(`{"messages":[{"role":"system","content":"s"},{"role":"user","content":`+strconv.Quote(user)+`}]}`), &req); err != nil {
		t.Fatal(err)
	}
	if k := kindOf(req); k != "walkthrough" {
		t.Fatalf("kind %q, want walkthrough", k)
	}
}
