package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/internal/harness"
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
	out, err := prq("keys", "create", "docs-bot", "--tier", "paid", "--quota-tokens", "1000", "--quota-dollars", "2.5", "--quota-period", "week", "--models", "gpt-4o-mini, gpt-4o")
	if err != nil {
		t.Fatal(err)
	}
	var created struct {
		Key    string
		Record struct {
			ID, Tier     string
			QuotaTokens  int64   `json:"quota_tokens"`
			QuotaDollars float64 `json:"quota_dollars"`
			QuotaPeriod  string  `json:"quota_period"`
			Models       []string
		}
	}
	if err := json.Unmarshal([]byte(out), &created); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	r := created.Record
	if !strings.HasPrefix(created.Key, "prq-sk-") || r.Tier != "paid" || r.QuotaTokens != 1000 || r.QuotaDollars != 2.5 || r.QuotaPeriod != "week" || len(r.Models) != 2 {
		t.Fatalf("created %+v", created)
	}
	list, err := prq("keys", "list")
	if err != nil || !strings.Contains(list, r.ID) || strings.Contains(list, created.Key) {
		t.Fatalf("list (%v): %s", err, list)
	}
	if out, err := prq("keys", "rotate", r.ID); err != nil || !strings.Contains(out, "prq-sk-") || strings.Contains(out, created.Key) {
		t.Fatalf("rotate (%v): %s", err, out)
	}
	// a name is unique among the keys not revoked: revoke and rotate take it
	if _, err := prq("keys", "create", "docs-bot"); err == nil || exitCode(err) != 1 || !strings.Contains(err.Error(), `a key named "docs-bot" exists (id `+r.ID+")") {
		t.Fatalf("a second docs-bot: %v", err)
	}
	if out, err := prq("keys", "rotate", "docs-bot"); err != nil || !strings.Contains(out, r.ID) {
		t.Fatalf("rotate by name (%v): %s", err, out)
	}
	if out, err := prq("keys", "revoke", "docs-bot"); err != nil || !strings.Contains(out, `"revoked"`) || !strings.Contains(out, r.ID) {
		t.Fatalf("revoke by name (%v): %s", err, out)
	}
	if _, err := prq("keys", "revoke", "docs-bot"); err == nil || !strings.Contains(err.Error(), "neither an id nor the name of a key not revoked") {
		t.Fatalf("revoke a revoked key's name: %v", err)
	}
	if out, err := prq("keys", "revoke", r.ID); err != nil || !strings.Contains(out, `"revoked"`) {
		t.Fatalf("revoke (%v): %s", err, out)
	}
	if _, err := prq("keys", "create", "docs-bot"); err != nil { // the name is free again
		t.Fatalf("docs-bot after its revocation: %v", err)
	}
	for _, args := range [][]string{{"keys"}, {"keys", "create"}, {"keys", "revoke"}, {"keys", "frob"}, {"keys", "create", "x", "--tier", "gold"}} {
		if _, err := prq(args...); err == nil {
			t.Errorf("prq %v: no error", args)
		}
	}
	// limits the limiters cannot hold are refused, naming the flag
	for _, fv := range [][2]string{{"--tpm", "100000000000"}, {"--quota-tokens", "9223372036854775807"}, {"--quota-dollars", "1e7"}, {"--quota-dollars", "-1"}, {"--quota-dollars", "NaN"}} {
		flag, v := fv[0], fv[1]
		if _, err := prq("keys", "create", "big", flag, v); err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("prq keys create big %s %s: %v, want an error naming %s", flag, v, err, flag)
		}
	}
}

// TestGatewayCommand: prq gateway --admit serves the endpoint alone, with
// its own admission loop, against the fake provider, and stops with its
// context.
func TestGatewayCommand(t *testing.T) {
	fake := httptest.NewServer(fakeopenai.New(fakeopenai.Config{Models: []fakeopenai.Model{{Name: "gpt-4o-mini", RPM: 1000, TPM: 100000}, {Name: "gpt-4o", RPM: 1000, TPM: 100000}}, Keys: []string{"sk-up"}}))
	defer fake.Close()
	redisURL := redistest.Shared(t).URL()
	addr, err := harness.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	env := envOf(map[string]string{"REDIS_URL": redisURL, "OPENAI_API_KEY": "sk-up", "OPENAI_BASE_URL": fake.URL + "/v1", "PRQ_ALLOW_NO_PERSISTENCE": "true"})
	var out bytes.Buffer
	if err := run(context.Background(), []string{"keys", "create", "cli-agent", "--tier", "chat"}, env, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var created struct{ Key string }
	json.Unmarshal(out.Bytes(), &created)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	logs := &harness.SyncBuffer{}
	go func() { done <- run(ctx, []string{"gateway", "--admit", "--addr", addr}, env, logs, logs) }()
	var res *http.Response
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions",
			strings.NewReader(`{"model":"gpt-4o-mini","max_tokens":20,"messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Authorization", "Bearer "+created.Key)
		if res, err = http.DefaultClient.Do(req); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("gateway never answered: %v\n%s", err, logs.String())
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK || res.Header.Get("x-prq-key") == "" {
		t.Fatalf("status %d, x-prq-key %q\n%s", res.StatusCode, res.Header.Get("x-prq-key"), logs.String())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("gateway stopped with %v", err)
	}
}

// TestPlanCommand: plan list prints [] when there is none (as keys list
// does), set and get round-trip, an unknown tier is a usage error.
func TestPlanCommand(t *testing.T) {
	env := envOf(map[string]string{"REDIS_URL": redistest.New(t).URL()})
	prq := func(args ...string) (string, error) {
		var out, errb bytes.Buffer
		err := run(context.Background(), args, env, &out, &errb)
		return out.String(), err
	}
	if out, err := prq("plan", "list"); err != nil || strings.TrimSpace(out) != "[]" {
		t.Fatalf("empty plan list (%v): %q", err, out)
	}
	if out, err := prq("plan", "set", "42", "paid", "upgraded"); err != nil || !strings.Contains(out, `"paid"`) {
		t.Fatalf("plan set (%v): %s", err, out)
	}
	if out, err := prq("plan", "get", "42"); err != nil || !strings.Contains(out, `"paid"`) || !strings.Contains(out, "upgraded") {
		t.Fatalf("plan get (%v): %s", err, out)
	}
	if out, err := prq("plan", "list"); err != nil || !strings.Contains(out, `"paid"`) {
		t.Fatalf("plan list (%v): %s", err, out)
	}
	if _, err := prq("plan", "set", "42", "gold"); exitCode(err) != 2 {
		t.Fatalf("an unknown tier: %v (exit %d), want exit 2", err, exitCode(err))
	}
}
