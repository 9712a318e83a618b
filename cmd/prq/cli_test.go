package main

import (
	"bytes"
	"context"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// sharedFlags are config.Flags' flags besides --config: a command's help
// may list only those it reads.
var sharedFlags = []string{"addr", "redis-url", "log-format", "log-level", "concurrency", "shutdown-timeout", "allow-eviction", "allow-no-persistence"}

// TestEveryCommandHelp walks every command and subcommand: --help (and
// -h) exits 0 with the usage on stdout and nothing on stderr, without
// Redis or any configuration, and lists only the shared flags the
// command reads.
func TestEveryCommandHelp(t *testing.T) {
	all := sharedFlags
	want := map[string][]string{ // shared flags per command line
		"serve":            {"addr", "redis-url", "log-format", "log-level", "allow-eviction", "allow-no-persistence"},
		"worker":           {"redis-url", "log-format", "log-level", "concurrency", "shutdown-timeout", "allow-eviction", "allow-no-persistence"},
		"all":              all,
		"demo":             {"addr", "redis-url", "log-format", "log-level", "concurrency"}, // its own --concurrency: the demo worker's
		"gateway":          {"addr", "redis-url", "log-format", "log-level", "allow-eviction", "allow-no-persistence"},
		"bench":            {"redis-url", "log-format", "log-level", "concurrency", "shutdown-timeout"},
		"bench-worker":     {"redis-url", "log-format", "log-level", "concurrency", "shutdown-timeout"},
		"doctor":           {"redis-url", "allow-eviction", "allow-no-persistence"},
		"plan":             {"redis-url"},
		"plan set":         {"redis-url"},
		"plan get":         {"redis-url"},
		"plan list":        {"redis-url"},
		"keys":             {"redis-url"},
		"keys create":      {"redis-url"},
		"keys list":        {"redis-url"},
		"keys revoke":      {"redis-url"},
		"keys rotate":      {"redis-url"},
		"config":           all,
		"config check":     all,
		"config reference": nil,
		"chaos":            nil,
		"fake":             {"addr"}, // its own --addr: the fake\'s
		"fake github":      {"addr"}, // its own --addr: the fake\'s
		"fake openai":      {"addr"}, // its own --addr: the fake\'s
		"fake gitlab":      {"addr"}, // its own --addr: the fake\'s
		"version":          nil,
	}
	lines := []string{}
	for name := range commands() {
		lines = append(lines, name)
	}
	for l := range want {
		if strings.Contains(l, " ") {
			lines = append(lines, l)
		}
	}
	sort.Strings(lines)
	flagLine := regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`)
	for _, line := range lines {
		for _, h := range []string{"--help", "-h"} {
			t.Run(line+" "+h, func(t *testing.T) {
				var out, errb bytes.Buffer
				err := run(context.Background(), append(strings.Fields(line), h), envOf(nil), &out, &errb)
				if err != nil {
					t.Fatalf("exit %d: %v", exitCode(err), err)
				}
				if errb.Len() > 0 {
					t.Fatalf("wrote to stderr:\n%s", errb.String())
				}
				first := strings.Fields(line)[0]
				if !strings.HasPrefix(out.String(), "Usage: prq "+first) {
					t.Fatalf("stdout is not the command's usage:\n%s", out.String())
				}
				var listed []string
				for _, m := range flagLine.FindAllStringSubmatch(out.String(), -1) {
					if slices.Contains(sharedFlags, m[1]) {
						listed = append(listed, m[1])
					}
				}
				exp := slices.Clone(want[line])
				sort.Strings(exp)
				sort.Strings(listed)
				if !slices.Equal(exp, listed) {
					t.Fatalf("lists the shared flags %v, want %v:\n%s", listed, exp, out.String())
				}
			})
		}
	}
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		var out, errb bytes.Buffer
		if err := run(context.Background(), args, envOf(nil), &out, &errb); err != nil || errb.Len() > 0 || !strings.Contains(out.String(), "Commands:") {
			t.Errorf("prq %v: %v; stdout:\n%s\nstderr:\n%s", args, err, out.String(), errb.String())
		}
		if strings.Contains(out.String(), "bench-worker") {
			t.Errorf("prq %v lists the internal bench-worker:\n%s", args, out.String())
		}
	}
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"help", "serve"}, envOf(nil), &out, &errb); err != nil || !strings.HasPrefix(out.String(), "Usage: prq serve") {
		t.Errorf("prq help serve: %v\n%s", err, out.String())
	}
}

// TestUsageErrors: prq alone, an unknown command, flag or subcommand is
// exit 2 with the message and nothing on stdout.
func TestUsageErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{nil, "no command given"},
		{[]string{"serv"}, "did you mean serve?"},
		{[]string{"serve", "--concurrency", "4"}, "serve: flag provided but not defined: -concurrency; prq serve --help lists its flags"},
		{[]string{"doctor", "--shutdown-timeout", "1s"}, "prq doctor --help"},
		{[]string{"demo", "--workers", "4"}, "not defined: -workers"},
		{[]string{"plan"}, "usage: prq plan"},
		{[]string{"plan", "sett"}, `unknown subcommand "sett"`},
		{[]string{"plan", "set", "5", "platinum"}, "platinum"},
		{[]string{"plan", "set", "x", "paid"}, "positive integer"},
		{[]string{"keys"}, "usage: prq keys"},
		{[]string{"keys", "create", "k", "--tier", "platinum"}, `--tier "platinum"`},
		{[]string{"keys", "create", "k", "--models", "gpt-5"}, `"gpt-5" is not a configured model`},
		{[]string{"keys", "create", "k", "--models", "gpt-4o-minii"}, "did you mean gpt-4o-mini?"},
		{[]string{"config"}, "check|reference"},
		{[]string{"fake"}, "prq fake github|gitlab|openai"},
		{[]string{"version", "extra"}, "no arguments"},
		{[]string{"chaos", "extra"}, "no arguments"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			err := run(context.Background(), tt.args, envOf(nil), &out, &errb)
			if exitCode(err) != 2 || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v (exit %d), want exit 2 naming %q", err, exitCode(err), tt.want)
			}
			if out.Len() > 0 {
				t.Fatalf("wrote to stdout:\n%s", out.String())
			}
		})
	}
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}, {"-v"}} {
		var out, errb bytes.Buffer
		if err := run(context.Background(), args, envOf(nil), &out, &errb); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		if len(lines) != 4 || !strings.HasPrefix(lines[0], "prq ") || !strings.HasPrefix(lines[1], "commit ") || !strings.HasPrefix(lines[2], "built ") {
			t.Fatalf("prq %v printed:\n%s", args, out.String())
		}
	}
	version, commit, date = "v9.9.9", "0123456789abcdef", "2026-12-06T00:00:00Z"
	defer func() { version, commit, date = "", "", "" }()
	var out bytes.Buffer
	if err := run(context.Background(), []string{"--version"}, envOf(nil), &out, &out); err != nil {
		t.Fatal(err)
	}
	if want := "prq v9.9.9\ncommit 0123456789abcdef\nbuilt 2026-12-06T00:00:00Z\n"; !strings.HasPrefix(out.String(), want) {
		t.Fatalf("stamped build printed:\n%s\nwant it to begin:\n%s", out.String(), want)
	}
}
