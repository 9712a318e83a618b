package appmanifest

import (
	"strings"
	"testing"
)

// FuzzEnvFile: whatever an existing env file holds, the updated one
// keeps each of its lines that sets no managed setting, in order, and
// sets each managed setting exactly once, to the new value.
func FuzzEnvFile(f *testing.F) {
	f.Add("OPENAI_API_KEY=sk\nGITHUB_APP_ID=1\n")
	f.Add("# c\nexport GITHUB_PRIVATE_KEY=x\n\nGITHUB_APP_ID = 2\nGITHUB_APP_ID=3")
	f.Add("GITHUB_API_URL\nA=b=c\r\n  GITHUB_APP_SLUG=old")
	f.Add("")
	settings := [][2]string{{"GITHUB_APP_ID", "42"}, {"GITHUB_APP_SLUG", "prq-acme"}, {"GITHUB_PRIVATE_KEY_PATH", "/secrets/my key.pem"},
		{"GITHUB_WEBHOOK_SECRET", "0123456789abcdef0123"}, {"GITHUB_API_URL", "https://api.github.com/"}}
	f.Fuzz(func(t *testing.T, old string) {
		b, err := envFile([]byte(old), "# header\n", settings)
		if err != nil {
			t.Fatal(err)
		}
		got := string(b)
		if old != "" && !strings.HasSuffix(got, "\n") {
			t.Fatalf("no final newline:\n%q", got)
		}
		var kept []string
		count := map[string]int{}
		for _, line := range strings.SplitAfter(got, "\n") {
			if k := envKey(line); managed[k] {
				count[k]++
				continue
			}
			if line != "" && line != "\n" && line != "# header\n" {
				kept = append(kept, strings.TrimSuffix(line, "\n"))
			}
		}
		var want []string
		for _, line := range strings.SplitAfter(old, "\n") {
			if !managed[envKey(line)] && line != "" && line != "\n" && line != "# header\n" {
				want = append(want, strings.TrimSuffix(line, "\n"))
			}
		}
		if strings.Join(kept, "\n") != strings.Join(want, "\n") {
			t.Fatalf("other lines not kept in order:\nold %q\nnew %q", old, got)
		}
		for _, s := range settings {
			v, _ := quote(s[1])
			if count[s[0]] != 1 || !strings.Contains(got, s[0]+"="+v+"\n") {
				t.Fatalf("%s set %d times, want once to %s:\n%q", s[0], count[s[0]], v, got)
			}
		}
		if count["GITHUB_PRIVATE_KEY"] != 0 {
			t.Fatalf("GITHUB_PRIVATE_KEY kept:\n%q", got)
		}
	})
}
