package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/fake/traffic"
	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
)

// buildBinary builds prq once per test run.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "prq")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestSIGTERMLetsRunningJobFinish runs the real binary (`prq all`), sends
// SIGTERM while an LLM call is in flight, and expects the job to finish
// and the process to exit 0.
func TestSIGTERMLetsRunningJobFinish(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildBinary(t)
	srv := redisForTest(t)
	cfg := defaultConfig()
	apiKey := "sk-term-" + randomHex(6)
	fakes, err := startFakes(&cfg, 1, apiKey, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer fakes.close()
	// every call takes 2 s: long enough to be in flight at SIGTERM
	slow := fakeopenai.New(fakeopenai.Config{Models: []fakeopenai.Model{{Name: "gpt-4o-mini", RPM: 1000, TPM: 10_000_000, Latency: 2 * time.Second},
		{Name: "gpt-4o", RPM: 1000, TPM: 10_000_000, Latency: 2 * time.Second}}, Keys: []string{apiKey}})
	url, closeSlow, err := listenServe(slow)
	if err != nil {
		t.Fatal(err)
	}
	defer closeSlow()
	addr := freeAddr(t)
	secret := randomHex(16)
	cmd := exec.Command(bin, "all", "--log-format", "json")
	var logs syncBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	cmd.Env = append(os.Environ(), "REDIS_URL="+srv.URL(), "PRQ_ADDR="+addr, "GITHUB_APP_ID=1", "GITHUB_PRIVATE_KEY="+string(fakes.keyPEM),
		"GITHUB_WEBHOOK_SECRET="+secret, "GITHUB_API_URL="+fakes.githubURL, "OPENAI_API_KEY="+apiKey, "OPENAI_BASE_URL="+url+"/v1", "GITHUB_APP_SLUG=prq")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	p := testPRs(t, 1)[0]
	p.Files = p.Files[:1]
	fakes.github.AddPR(3, "tenant-3", p.Name(), p)
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
	fmt.Fprint(os.Stderr)
}
