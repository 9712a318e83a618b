package bench

import (
	"time"

	"github.com/prq-dev/prq/fake/fakeopenai"
	"github.com/prq-dev/prq/internal/config"
	"github.com/prq-dev/prq/llm"
)

// bill is what the fake provider billed a run for, at the models' list
// prices (llm.ListPrices): each lane at its own (the flex and batch
// lanes at half), the input served from the prompt cache at the cached
// price.
type bill struct {
	Dollars float64 `json:"dollars"`
	// NoCache is the same requests with no input served from the cache:
	// what the same prompts cost without cache use.
	NoCache float64 `json:"dollars_without_cache"`
	// PerPR is Dollars per pull request published.
	PerPR float64 `json:"dollars_per_pr"`
	// CachedShare is the share of prompt tokens served from the cache.
	CachedShare float64 `json:"cached_share"`
	// ByLane is Dollars by lane (sync, flex, batch).
	ByLane map[string]float64 `json:"dollars_by_lane"`
	// Counted is what prq itself counted the calls to cost
	// (prq_llm_cost_dollars_total): Dollars, when its accounting is right.
	Counted float64 `json:"dollars_counted_by_prq"`
}

// billOf prices the fake's bill of every model; prs is how many pull
// requests were published.
func billOf(stats map[string]fakeopenai.ModelStats, prs int) bill {
	b := bill{ByLane: map[string]float64{}}
	var prompt, cached int64
	for model, st := range stats {
		p, ok := llm.ListPrices(model)
		if !ok {
			continue
		}
		for lane, u := range st.Bill {
			lp := p
			if lane != fakeopenai.LaneSync {
				lp = p.Batch()
			}
			r := llm.Response{PromptTokens: u.Prompt, CachedTokens: u.Cached, CacheWriteTokens: u.CacheWrite, OutputTokens: u.Output}
			d := lp.Cost(r)
			b.Dollars += d
			b.ByLane[lane] += d
			b.NoCache += lp.Cost(llm.Response{PromptTokens: u.Prompt, OutputTokens: u.Output})
			prompt += u.Prompt
			cached += u.Cached
		}
	}
	if prs > 0 {
		b.PerPR = b.Dollars / float64(prs)
	}
	if prompt > 0 {
		b.CachedShare = float64(cached) / float64(prompt)
	}
	return b
}

// Providers the bench calls (--provider).
const (
	ProviderOpenAI    = "openai"
	ProviderAnthropic = "anthropic"
)

// claudeModels makes the bench's models Claude models on an Anthropic
// provider, with the OpenAI models' budgets as Anthropic limits them: the
// input tokens per minute binding, output limits out of the way (the fake
// charges a call's whole max_tokens as output and gives none back),
// settled by refund (Anthropic counts what was used, and no cache reads
// against the input limit).
func claudeModels(cfg *config.Config) {
	per := cfg.Models[0].Period
	cfg.Models = []config.ModelConfig{
		{Name: "claude-sonnet-4", Provider: "claude", RequestsPerMinute: 600, InputTokensPerMinute: 40000, OutputTokensPerMinute: 40000, MaxOutputTokens: 300, Period: per, Settle: "refund"},
		{Name: "claude-sonnet-4-5", Provider: "claude", RequestsPerMinute: 300, InputTokensPerMinute: 12000, OutputTokensPerMinute: 24000, MaxOutputTokens: 600, Period: per, Settle: "refund"},
	}
	cfg.Jobs.SummaryModel, cfg.Jobs.ChatModel, cfg.Jobs.ReviewModel = "claude-sonnet-4", "claude-sonnet-4", "claude-sonnet-4-5"
}

// inputPerLimit is the input tokens the admissions answered (Prompt:
// cache reads included) per period, from the first to the last, over the
// limit per period.
func inputPerLimit(adm []fakeopenai.Admission, limit int64, per time.Duration) float64 {
	if len(adm) < 2 || limit <= 0 || per <= 0 {
		return 0
	}
	var in int64
	for _, a := range adm {
		in += a.Prompt
	}
	span := adm[len(adm)-1].At.Sub(adm[0].At)
	return float64(in) / (float64(limit) * max(span.Seconds()/per.Seconds(), 1))
}
