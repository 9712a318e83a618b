package main

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prq-dev/prq/internal/harness"
	"github.com/prq-dev/prq/internal/redistest"
)

// BenchmarkServeUnsignedFlood runs the real `prq serve` and posts 32
// concurrent 25 MB unsigned webhook bodies at it, b.N rounds; it reports
// serve's resident memory before and its peak (VmHWM) after. The issue's
// target is a peak of at most 150 MB.
//
//	go test -run '^$' -bench ServeUnsignedFlood -benchtime 3x ./cmd/prq
func BenchmarkServeUnsignedFlood(b *testing.B) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		b.Skip("needs /proc to read serve's peak RSS")
	}
	bin := buildBinary(b)
	srv := redistest.New(b)
	addr, err := harness.FreeAddr()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "--log-level", "error")
	cmd.Env = append(os.Environ(), "REDIS_URL="+srv.URL(), "PRQ_ADDR="+addr, "GITHUB_WEBHOOK_SECRET="+harness.RandomHex(32),
		"PRQ_ADMIN_TOKEN="+harness.RandomHex(32))
	var logs harness.SyncBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	base := "http://" + addr
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get(base + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("serve did not start:\n%s", logs.String())
		}
	}
	time.Sleep(time.Second)
	pid := strconv.Itoa(cmd.Process.Pid)
	before := harness.ProcStatusBytes(pid, "VmRSS") / 1024
	body := bytes.Repeat([]byte("x"), 25<<20)
	client := &http.Client{Timeout: time.Minute}
	codes := map[int]int{}
	var mu sync.Mutex
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var wg sync.WaitGroup
		for j := 0; j < 32; j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, _ := http.NewRequest(http.MethodPost, base+"/webhook", bytes.NewReader(body))
				req.Header.Set("X-GitHub-Event", "push")
				req.Header.Set("X-GitHub-Delivery", "flood")
				code := -1 // the connection closed before an answer was read
				if resp, err := client.Do(req); err == nil {
					code = resp.StatusCode
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				mu.Lock()
				codes[code]++
				mu.Unlock()
			}()
		}
		wg.Wait()
	}
	b.StopTimer()
	peak := harness.ProcStatusBytes(pid, "VmHWM") / 1024
	b.ReportMetric(float64(before)/1024, "RSS-before-MB")
	b.ReportMetric(float64(peak)/1024, "peak-RSS-MB")
	b.Logf("serve: RSS %d MB before, peak %d MB under %d rounds of 32 x 25 MB unsigned posts; answers %v", before/1024, peak/1024, b.N, codes)
}
