package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/prq-dev/prq/internal/config"
)

// TestConfigReferenceCommitted: docs/configuration.md is exactly what
// `prq config reference` prints, and what it prints does not depend on
// the environment: secrets set there never appear.
func TestConfigReferenceCommitted(t *testing.T) {
	secrets := map[string]string{
		"GITHUB_WEBHOOK_SECRET": "whsec-9f2c41d0e8b7a6c5", "PRQ_ADMIN_TOKEN": "admin-7d1e5a9c3b2f4e60",
		"OPENAI_API_KEY": "sk-live-3c8e1f0a9b7d", "GITHUB_PRIVATE_KEY": "-----BEGIN RSA PRIVATE KEY-----\nMIIE",
		"REDIS_URL": "redis://:hunter2-redis@10.0.0.9:6379", "PRQ_ADDR": ":9999",
	}
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"config", "reference"}, envOf(secrets), &out, &errb); err != nil {
		t.Fatalf("prq config reference: %v\n%s", err, errb.String())
	}
	for name, v := range secrets {
		if strings.Contains(out.String(), v) {
			t.Fatalf("the reference shows %s from the environment", name)
		}
	}
	committed, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatalf("read docs/configuration.md: %v; generate it: %s", err, config.ReferenceCommand)
	}
	if got := out.String(); got != string(committed) {
		want, have := strings.Split(got, "\n"), strings.Split(string(committed), "\n")
		line := 0
		for line < len(want) && line < len(have) && want[line] == have[line] {
			line++
		}
		at := func(ls []string) string {
			if line < len(ls) {
				return ls[line]
			}
			return "(end of file)"
		}
		t.Fatalf("docs/configuration.md is not the output of `prq config reference`; regenerate it:\n\n  %s\n\nfirst difference at line %d:\n  committed: %s\n  generated: %s",
			config.ReferenceCommand, line+1, at(have), at(want))
	}
}

func TestConfigReferenceUsage(t *testing.T) {
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"config", "reference", "extra"}, envOf(nil), &out, &errb); exitCode(err) != 2 {
		t.Fatalf("an argument: %v (exit %d)", err, exitCode(err))
	}
	if err := run(context.Background(), []string{"config", "reference", "--help"}, envOf(nil), &out, &errb); err != nil || !strings.Contains(out.String(), config.ReferenceCommand) {
		t.Fatalf("--help: %v\n%s", err, out.String())
	}
	if err := run(context.Background(), []string{"config"}, envOf(nil), &out, &errb); err == nil || !strings.Contains(err.Error(), "check|reference") {
		t.Fatalf("no subcommand: %v", err)
	}
}
