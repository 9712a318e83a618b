package harness

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/ratelimit"
)

// TestEndToEndWindow runs the whole pipeline with reviews on a provider
// that counts in a sliding window (the fake's window mode) and the review
// model configured limiter: window, its limit binding: every PR is
// published, the provider answers no 429, and no window of its ledger
// holds more than the limit. Compressed 15×, with the default margin:
// the charge moves to each request's write and the margin follows the
// way measured from there (the metric says it was measured), on a loaded
// machine too (race detector, packages in parallel), where the way from
// prq's decision to the write alone takes tens of ms.
func TestEndToEndWindow(t *testing.T) {
	endToEndWindow(t, "window")
}

// TestEndToEndAutoLimiter is the same with limiter: auto: the review
// model starts as a token bucket, the provider's headers show a window
// within its first replies, and every process counts in the window from
// then on (the metric says so); every PR is published.
func TestEndToEndAutoLimiter(t *testing.T) {
	endToEndWindow(t, "auto")
}

func endToEndWindow(t *testing.T, limiter string) {
	const compress = 15
	per := time.Duration(float64(time.Minute) / compress)
	m := config.ModelConfig{Name: "gpt-window", RequestsPerMinute: 300, TokensPerMinute: 6000,
		MaxOutputTokens: 600, Period: config.Duration(per), Limiter: limiter}
	if limiter == "auto" {
		// a margin set, as set: that path stays tested end to end too
		m.WindowMargin = config.Duration(200 * time.Millisecond)
	}
	key := "sk-gw-" + RandomHex(8)
	fake := fakeopenai.New(fakeopenai.Config{
		Models: []fakeopenai.Model{{Name: m.Name, RPM: m.RequestsPerMinute, TPM: m.TokensPerMinute, Latency: 800 * time.Millisecond / compress, Jitter: 400 * time.Millisecond / compress}},
		Period: per, Keys: []string{key}, Seed: 5, Record: true, Limiter: fakeopenai.LimiterWindow,
	})
	s := stackWithProvider(t, compress, fake, "gw", []string{key}, m, func(c *config.Config) { c.Jobs.ReviewModel = m.Name })
	// the margin while the calls go on (it goes back to the default two
	// windows after the last measured call, which the end may be past),
	// on /metrics and as the measured processes share it in the window's
	// state (fields yc, yp: only a measured margin is written there)
	b, _ := s.app.Scheduler().Bucket(m.Name)
	margins := watchMargin("http://"+s.app.ListenAddr()+"/metrics", m.Name, s.redis.Client(t), b.StateKey())
	runE2E(t, s, 6)
	margin, shared := margins()

	st := fake.Stats()[m.Name]
	if st.RateLimited != 0 && limiter == "window" {
		t.Errorf("the window provider answered %d 429s", st.RateLimited)
	}
	var adm []ratelimit.Admission
	for _, a := range fake.Admissions(m.Name) {
		adm = append(adm, ratelimit.Admission{At: a.At, Cost: a.Cost})
	}
	rep := ratelimit.CheckWindows(adm, m.TokensPerMinute, per)
	// how many reviews went in the place of an earlier file of their run
	_, metrics := get(t, "http://"+s.app.ListenAddr()+"/metrics", "")
	reordered := 0
	for _, line := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(line, "prq_admitted_jobs_total{") && strings.Contains(line, `model="gpt-window"`) && strings.Contains(line, `via="same_pr"`) {
			if f := regexp.MustCompile(`} (\d+)`).FindStringSubmatch(line); f != nil {
				n, _ := strconv.Atoi(f[1])
				reordered += n
			}
		}
	}
	if limiter == "window" {
		// the margin was measured: shared by a measured process, at least
		// 5 ms and at most the default, per/60 (twice a way of a third of
		// that or more on a loaded machine: the default), and /metrics
		// showed it
		switch {
		case !strings.Contains(metrics, `prq_window_margin_seconds{model="gpt-window"}`):
			t.Error("/metrics has no window margin for the review model")
		case shared < ratelimit.MinWindowMargin || shared > per/60:
			t.Errorf("measured margin shared in the window's state %s, want between %s and the default %s", shared, ratelimit.MinWindowMargin, per/60)
		case margin <= 0 || margin.Truncate(time.Microsecond) > shared:
			t.Errorf("window margin on /metrics at least %s while the calls went on, want above 0 and at most the %s measured", margin, shared)
		default:
			t.Logf("window margin measured: %.1f ms at the least on /metrics, %.1f ms the longest shared (default %s)",
				float64(margin.Microseconds())/1000, float64(shared.Microseconds())/1000, per/60)
		}
		f := regexp.MustCompile(`prq_admission_lookahead_seconds\{model="gpt-window"\} (\S+)`).FindStringSubmatch(metrics)
		// admission looked ahead by the measured time to a call: above 0,
		// at most a tenth of the window
		if f == nil {
			t.Error("/metrics has no look-ahead for the review model")
		} else if v, err := strconv.ParseFloat(f[1], 64); err != nil || v <= 0 || v > (per/10+per/600).Seconds() {
			t.Errorf("look-ahead %s s on /metrics, want measured: above 0, at most a tenth of the window (%s)", f[1], per/10)
		} else {
			t.Logf("look-ahead measured: %.1f ms", v*1000)
		}
		// and the dashboard shows both
		if code, body := get(t, "http://"+s.app.ListenAddr()+"/api/dashboard", string(s.app.Config().Admin.Token)); code != 200 || !strings.Contains(body, `"window_margin_ms":`) || !strings.Contains(body, `"look_ahead_ms":`) {
			t.Errorf("/api/dashboard: %d, no window margin or look-ahead for the review model: %.300s", code, body)
		}
	}
	if limiter == "auto" {
		b, _ := s.app.Scheduler().Bucket(m.Name)
		if c, err := b.Counting(context.Background()); err != nil || c != ratelimit.LimiterWindow {
			t.Errorf("limiter auto counts as %q (%v) after the run; want a window", c, err)
		}
		if !strings.Contains(metrics, `prq_limiter_counts_in_window{model="gpt-window"} 1`) {
			t.Error("/metrics does not say the review model counts in a window")
		}
		if n := strings.Count(s.logs.String(), "limiter auto now counts in a window"); n != 1 {
			t.Errorf("the switch was logged %d times, want once", n)
		}
		t.Logf("limiter auto: %d 429s before the switch", st.RateLimited)
	}
	t.Logf("window provider: %d calls, %d tokens, fullest window %.3f of the limit, mean fill %.3f while queued; %d reviews in an earlier file's place",
		len(adm), rep.Total, rep.Worst, rep.WhileQueued, reordered)
	if len(adm) == 0 {
		t.Fatal("no review reached the window provider")
	}
	if rep.Violations != 0 {
		t.Errorf("%d windows over the limit (worst %.3f)", rep.Violations, rep.Worst)
	}
	if err := s.stop(); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}

// watchMargin reads model's window margin on url (/metrics), and the
// measured margin shared in its window's state (key state, fields yc and
// yp, µs), every 50 ms until the returned func is called, which returns
// the least margin /metrics showed and the longest shared (0: none).
func watchMargin(url, model string, rdb *redis.Client, state string) func() (least, shared time.Duration) {
	re := regexp.MustCompile(`prq_window_margin_seconds\{model="` + regexp.QuoteMeta(model) + `"\} (\S+)`)
	stop := make(chan struct{})
	done := make(chan [2]time.Duration, 1)
	go func() {
		var least, shared time.Duration
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			if resp, err := http.Get(url); err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if f := re.FindSubmatch(b); f != nil {
					if v, err := strconv.ParseFloat(string(f[1]), 64); err == nil && v > 0 {
						if d := time.Duration(v * float64(time.Second)); least == 0 || d < least {
							least = d
						}
					}
				}
			}
			if vs, err := rdb.HMGet(context.Background(), state, "yc", "yp").Result(); err == nil {
				for _, v := range vs {
					if s, ok := v.(string); ok {
						if us, err := strconv.ParseInt(s, 10, 64); err == nil {
							shared = max(shared, time.Duration(us)*time.Microsecond)
						}
					}
				}
			}
			select {
			case <-stop:
				done <- [2]time.Duration{least, shared}
				return
			case <-tick.C:
			}
		}
	}()
	return func() (time.Duration, time.Duration) {
		close(stop)
		r := <-done
		return r[0], r[1]
	}
}
