package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/prq-dev/prq/internal/redistest"
)

// TestKeysCommand: prq keys create NAME --flags prints the secret once;
// list shows the record without it; rotate and revoke by id.
func TestKeysCommand(t *testing.T) {
	env := envOf(map[string]string{"REDIS_URL": redistest.Shared(t).URL()})
	prq := func(args ...string) (string, error) {
		var out, errb bytes.Buffer
		err := run(context.Background(), args, env, &out, &errb)
		return out.String(), err
	}
	out, err := prq("keys", "create", "docs-bot", "--tier", "paid", "--quota-tokens", "1000", "--quota-period", "week", "--models", "gpt-4o-mini, gpt-4o")
	if err != nil {
		t.Fatal(err)
	}
	var created struct {
		Key    string
		Record struct {
			ID, Tier    string
			QuotaTokens int64 `json:"quota_tokens"`
			QuotaPeriod string `json:"quota_period"`
			Models      []string
		}
	}
	if err := json.Unmarshal([]byte(out), &created); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	r := created.Record
	if !strings.HasPrefix(created.Key, "prq-sk-") || r.Tier != "paid" || r.QuotaTokens != 1000 || r.QuotaPeriod != "week" || len(r.Models) != 2 {
		t.Fatalf("created %+v", created)
	}
	list, err := prq("keys", "list")
	if err != nil || !strings.Contains(list, r.ID) || strings.Contains(list, created.Key) {
		t.Fatalf("list (%v): %s", err, list)
	}
	if out, err := prq("keys", "rotate", r.ID); err != nil || !strings.Contains(out, "prq-sk-") || strings.Contains(out, created.Key) {
		t.Fatalf("rotate (%v): %s", err, out)
	}
	if out, err := prq("keys", "revoke", r.ID); err != nil || !strings.Contains(out, `"revoked"`) {
		t.Fatalf("revoke (%v): %s", err, out)
	}
	for _, args := range [][]string{{"keys"}, {"keys", "create"}, {"keys", "revoke"}, {"keys", "frob"}, {"keys", "create", "x", "--tier", "gold"}} {
		if _, err := prq(args...); err == nil {
			t.Errorf("prq %v: no error", args)
		}
	}
}
