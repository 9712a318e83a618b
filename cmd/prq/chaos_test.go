package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestChaos runs short versions of `prq chaos`: workers killed with
// SIGKILL and restarted under load (with GitLab tenants beside GitHub's
// too), and Redis restarted (AOF on) mid-run.
// Nothing may be lost or done twice.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("kills processes and waits out asynq's 30 s lease")
	}
	bin := buildBinary(t)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"crash", []string{"--scenarios", "crash", "--prs", "40", "--kills", "4", "--kill-every", "2s", "--arrivals", "10s"}, " 0 duplicates, 0 jobs lost"},
		// GitLab merge requests beside the pull requests: opened, pushed
		// to, chat and commands, through signed webhooks
		{"crash gitlab", []string{"--scenarios", "crash", "--gitlab-tenants", "3", "--prs", "40", "--kills", "4", "--kill-every", "2s", "--arrivals", "10s"}, "0 quick actions run for the bot, 0 live references"},
		{"redis-restart", []string{"--scenarios", "redis-restart", "--prs", "30", "--arrivals", "8s"}, " 0 duplicates, 0 jobs lost"},
		// the model-based life-cycle test, short: a few seeded sequences
		{"lifecycle", []string{"--scenarios", "lifecycle", "--seed", "1", "--sequences", "4", "--steps", "20", "--kill-percent", "0"}, "4/4 sequences of 20 steps passed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			args := append([]string{"chaos", "--worker-binary", bin, "--out", t.TempDir(), "--timeout", "3m"}, tc.args...)
			err := run(context.Background(), args, func(string) string { return "" }, &out, &out)
			t.Logf("%s", out.String())
			if err != nil {
				t.Fatalf("chaos: %v", err)
			}
			if !strings.Contains(out.String(), tc.want) {
				t.Fatalf("unexpected report:\n%s", out.String())
			}
		})
	}
}
