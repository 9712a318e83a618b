package demo

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prq-dev/prq/internal/config"
)

func TestProgressLine(t *testing.T) {
	tl := tally{opened: 40, reviewed: 17, chats: 5}
	tests := []struct {
		name  string
		flows []flow
		want  string
	}{
		{"before the first rates", nil,
			"demo 10s: 40 PRs opened, 17 reviewed, 5 chat replies; 213 jobs waiting"},
		{"within the limits", []flow{{"gpt-4o", 3600, 4000}, {"gpt-4o-mini", 2900, 10000}},
			"demo 10s: 40 PRs opened, 17 reviewed, 5 chat replies; 213 jobs waiting (tokens/s arriving/limit: gpt-4o 3.6k/4.0k, gpt-4o-mini 2.9k/10.0k)"},
		{"one model over its limit", []flow{{"gpt-4o", 25500, 4000}, {"gpt-4o-mini", 950, 10000}},
			"demo 10s: 40 PRs opened, 17 reviewed, 5 chat replies; 213 jobs wait: more work arrives than the provider's limit admits (tokens/s arriving/limit: gpt-4o 25.5k/4.0k, gpt-4o-mini 950/10.0k)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := progressLine(10*time.Second, tl, 213, tt.flows); got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

// TestQuiet: the demo logs warnings and errors unless --verbose, which
// keeps the configured level.
func TestQuiet(t *testing.T) {
	for _, tt := range []struct {
		level   string
		verbose bool
		want    string
	}{{"info", false, "warn"}, {"debug", false, "warn"}, {"error", false, "error"}, {"info", true, "info"}, {"debug", true, "debug"}} {
		if got := quiet(config.LogConfig{Format: "text", Level: tt.level}, tt.verbose); got.Level != tt.want || got.Format != "text" {
			t.Errorf("quiet(%s, verbose %v) = %+v, want level %s", tt.level, tt.verbose, got, tt.want)
		}
	}
}

// TestDefaultAddrWhen8080Taken: with 127.0.0.1:8080 taken (by this test,
// or already by something else) the demo takes a free port and says why.
func TestDefaultAddrWhen8080Taken(t *testing.T) {
	if ln, err := net.Listen("tcp", "127.0.0.1:8080"); err == nil {
		defer ln.Close()
	}
	var out strings.Builder
	if got := defaultAddr(&out); got != "127.0.0.1:0" {
		t.Errorf("with 8080 taken the demo listens on %s", got)
	}
	if !strings.Contains(out.String(), "127.0.0.1:8080 is taken (") || !strings.Contains(out.String(), "takes a free port") {
		t.Errorf("the demo does not say why its port moved: %q", out.String())
	}
}
