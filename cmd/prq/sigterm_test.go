package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/fake/traffic"
	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/internal/harness"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
)

// buildBinary builds prq (this package) into a temporary directory.
func buildBinary(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "prq")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestSIGTERMLetsRunningJobFinish runs the real binary (`prq all`), sends
// SIGTERM while an LLM call is in flight, and expects the job to finish
// and the process to exit 0.
func TestSIGTERMLetsRunningJobFinish(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildBinary(t)
	srv := redistest.New(t)
	cfg := config.Default()
	apiKey := "sk-term-" + harness.RandomHex(6)
	fakes, err := harness.StartFakes(&cfg, 1, apiKey, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	defer fakes.Close()
	// every call takes 2 s: long enough to be in flight at SIGTERM
	slow := fakeopenai.New(fakeopenai.Config{Models: []fakeopenai.Model{{Name: "gpt-4o-mini", RPM: 1000, TPM: 10_000_000, Latency: 2 * time.Second},
		{Name: "gpt-4o", RPM: 1000, TPM: 10_000_000, Latency: 2 * time.Second}}, Keys: []string{apiKey}})
	url, closeSlow, err := harness.ListenServe(slow)
	if err != nil {
		t.Fatal(err)
	}
	defer closeSlow()
	addr, err := harness.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	secret := harness.RandomHex(32)
	cmd := exec.Command(bin, "all", "--log-format", "json")
	var logs harness.SyncBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	// the fakes' worker environment, the slow provider instead of theirs
	cmd.Env = append(fakes.WorkerEnv(srv.URL(), "prq"), "PRQ_ADDR="+addr, "GITHUB_WEBHOOK_SECRET="+secret, "PRQ_ALLOW_NO_PERSISTENCE=true", "OPENAI_BASE_URL="+url+"/v1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	prs, err := harness.SmallPRs(1)
	if err != nil {
		t.Fatal(err)
	}
	p := prs[0]
	p.Files = p.Files[:1]
	fakes.GitHub.AddPR(3, "tenant-3", p.Name(), p)
	sender := &traffic.Sender{URL: "http://" + addr + "/webhook", Secret: []byte(secret)}
	body := traffic.PullRequestEvent("opened", traffic.PR{Installation: 3, Owner: "tenant-3", Repo: p.Name(), Number: p.Number, Head: p.HeadSHA, Base: p.BaseSHA})
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, err := sender.Send(context.Background(), "pull_request", "term-delivery", body)
		if err == nil && code == 202 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("prq did not take the webhook: %d %v\n%s", code, err, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	for slow.Stats()["gpt-4o-mini"].Requests == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no LLM call started\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit: %v\n%s", err, logs.String())
		}
	case <-time.After(40 * time.Second):
		t.Fatalf("prq did not exit after SIGTERM\n%s", logs.String())
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	st := store.New(rdb, jobs.TierFree)
	pr := jobs.PR{Installation: 3, Owner: "tenant-3", Repo: p.Name(), Number: p.Number}
	res, err := st.Results(context.Background(), pr, p.HeadSHA)
	if err != nil || len(res) == 0 {
		t.Fatalf("the in-flight job did not finish before exit (results %d, %v)\n%s", len(res), err, logs.String())
	}
	if !strings.Contains(logs.String(), `"msg":"stopped"`) {
		t.Fatalf("no orderly shutdown in the logs:\n%s", logs.String())
	}
}
