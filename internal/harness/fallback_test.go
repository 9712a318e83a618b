package harness

import (
	"strings"
	"testing"
	"time"

	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/jobs"
)

// TestPRJobsFallBack: the summary and review models' provider fails
// every call (5xx), or refuses the one key (the models paused); each
// model has a fallback on another provider. Every pull request is
// reviewed on the fallbacks, through their own admission: neither
// provider answers a 429, each moved job is counted in
// prq_jobs_fallbacks_total, and the summary says which files a fallback
// model made.
func TestPRJobsFallBack(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		reason string
		// fail makes the primary provider fail prq's calls
		fail func(c *config.Config, s *stack)
	}{
		{"provider", func(_ *config.Config, s *stack) { s.fakes.OpenAI.SetFaults(fakeopenai.Faults{ServerError: 1}) }},
		{"paused", func(c *config.Config, _ *stack) {
			c.Providers[0].Keys = []config.Secret{"sk-revoked-" + config.Secret(RandomHex(8))}
		}},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			t.Parallel()
			const compress = 30
			per := time.Duration(float64(time.Minute) / compress)
			backupKey := "sk-backup-" + RandomHex(8)
			backup := fakeopenai.New(fakeopenai.Config{Period: per, Keys: []string{backupKey}, Seed: 2, LatencyScale: 1.0 / compress, Models: []fakeopenai.Model{
				{Name: "gpt-4.1-mini", RPM: 600, TPM: 60000, Latency: 800 * time.Millisecond, Jitter: 400 * time.Millisecond},
				{Name: "gpt-4.1", RPM: 300, TPM: 24000, Latency: 8 * time.Second, Jitter: 5 * time.Second},
			}})
			url, closeFake, err := ListenServe(backup)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(closeFake)
			s := startStack(t, stackOpts{compress: compress, providers: func(c *config.Config, f *Fakes) {
				c.Providers = []config.ProviderConfig{
					{Name: "openai", Kind: config.KindOpenAI, BaseURL: f.OpenAIURL, KeyEnv: config.EnvList{"OPENAI_API_KEY"}, Keys: []config.Secret{c.OpenAI.APIKey}},
					{Name: "backup", Kind: config.KindOpenAI, BaseURL: url, KeyEnv: config.EnvList{"BACKUP_API_KEY"}, Keys: []config.Secret{config.Secret(backupKey)}},
				}
				c.OpenAI.BaseURL = ""
				var fallbacks []config.ModelConfig
				for i := range c.Models {
					m := &c.Models[i]
					m.Provider = "openai"
					b := *m
					b.Name, b.Provider = strings.Replace(m.Name, "gpt-4o", "gpt-4.1", 1), "backup"
					m.Fallbacks = []string{b.Name}
					fallbacks = append(fallbacks, b)
				}
				c.Models = append(c.Models, fallbacks...)
				if tc.reason == "paused" {
					tc.fail(c, nil)
				}
			}})
			if tc.reason == "provider" {
				tc.fail(nil, s)
			}
			var prs []jobs.PR
			for i, p := range testPRs(t, 4) {
				prs = append(prs, s.openPR(int64(i+1), jobs.TierPaid, p))
			}
			s.waitDone(prs, 90*time.Second)
			jobsPlanned, reviews := 0, 0
			for _, pr := range prs {
				p := s.published(pr)
				files := p.run.SummaryTotal
				jobsPlanned += p.run.SummaryTotal + p.run.ReviewTotal
				reviews += len(p.reviews)
				if files == 0 || !strings.Contains(p.summaryText(), " by a fallback model") || !strings.Contains(p.summaryText(), "by gpt-4.1-mini, a fallback model") {
					t.Errorf("%s: the summary does not say the fallback made it:\n%s", pr, p.summaryText())
				}
				if strings.Contains(p.summaryText(), "could not be processed") {
					t.Errorf("%s: files failed:\n%s", pr, p.summaryText())
				}
			}
			if reviews == 0 {
				t.Error("no review was posted")
			}
			bst := backup.Stats()
			if bst["gpt-4.1-mini"].Requests == 0 || bst["gpt-4.1"].Requests == 0 {
				t.Errorf("the fallbacks answered %+v, want summaries and reviews", bst)
			}
			for name, f := range map[string]*fakeopenai.Server{"primary": s.fakes.OpenAI, "backup": backup} {
				for m, st := range f.Stats() {
					if st.RateLimited != 0 {
						t.Errorf("%s %s: %d provider 429s", name, m, st.RateLimited)
					}
				}
			}
			moved := s.metric("prq_jobs_fallbacks_total", map[string]string{"reason": tc.reason})
			if moved < float64(jobsPlanned) || moved != s.metric("prq_jobs_fallbacks_total", nil) {
				t.Errorf("prq_jobs_fallbacks_total{reason=%q} = %v (all reasons %v), want every one of the %d jobs", tc.reason, moved, s.metric("prq_jobs_fallbacks_total", nil), jobsPlanned)
			}
		})
	}
}
