package harness

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prq-dev/prq/fake/traffic"
	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/internal/logging"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/internal/server"
)

// BenchmarkWebhook drives POST /webhook of a real serve process (real
// Redis on loopback, the same wiring as `prq serve`) with signed
// pull_request.opened deliveries from 8 concurrent senders, and reports
// requests/s and latency percentiles.
func BenchmarkWebhook(b *testing.B) {
	srv := redistest.New(b)
	cfg := config.Default()
	cfg.RedisURL, cfg.Addr = srv.URL(), "127.0.0.1:0"
	cfg.AllowNoPersistence = true
	secret := RandomHex(32)
	cfg.GitHub.WebhookSecret = config.Secret(secret)
	cfg.Log.Level = "error"
	conn, _ := config.ParseRedisURL(cfg.RedisURL)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, err := server.New(ctx, &cfg, logging.New(io.Discard, cfg.Log), conn)
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	done := Serve(ctx, a, io.Discard, server.Roles{HTTP: true}, server.Options{})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	sender := &traffic.Sender{URL: "http://" + a.ListenAddr() + "/webhook", Secret: []byte(secret), Client: client}
	var next atomic.Int64
	lat := make([]time.Duration, b.N)
	var failed atomic.Int64
	b.ResetTimer()
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				body := traffic.PullRequestEvent("opened", traffic.PR{Installation: 1 + i%50, Owner: "acme", Repo: "api", Number: int(i) + 1, Head: fmt.Sprintf("%040d", i), Base: "b"})
				start := time.Now()
				code, err := sender.Send(context.Background(), "pull_request", fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), i), body)
				lat[i] = time.Since(start)
				if err != nil || code != 202 {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	if failed.Load() > 0 {
		b.Fatalf("%d deliveries not accepted", failed.Load())
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "requests/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	cancel()
	<-done
}
