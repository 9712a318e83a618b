package llmcall

import (
	"time"

	"github.com/prq-dev/prq/llm"
	"github.com/prq-dev/prq/ratelimit"
)

// Model is one configured model as both sides call it: every per-model
// setting, built once from the configuration (FromConfig) and used by
// the workers' and the gateway's wiring alike. A per-model setting is
// added here and in FromConfig; each side applies its own defaults to
// what is left zero.
type Model struct {
	Name string
	// Keys is how many API keys the model's provider has (admission
	// charges a ticket to one of them); 1 skips asking which. 0: not
	// known here, ask and trust the answer.
	Keys int
	// Prices price the model's calls (zero: not priced).
	Prices llm.Prices
	// CachedInputFree: the provider does not count input read from its
	// prompt cache toward the model's limits (Anthropic's ITPM); the
	// bucket is settled without it (Usage).
	CachedInputFree bool
	// MaxOutput is the output cap asked for (a gateway request's that
	// sets none). 0: the side's default.
	MaxOutput int64
	// ContextTokens is the model's context window. 0: the side's
	// default (128000).
	ContextTokens int64
	// Reasoning models take max_completion_tokens instead of max_tokens.
	Reasoning bool
	// Fallbacks are the models, in order, a job or a request of this
	// model moves to when this one cannot serve it.
	Fallbacks []string
	// Flex: the model serves OpenAI's flex processing.
	Flex bool
	// Batch: a provider's batch API serves the model (the batch lane).
	Batch bool
	// FirstByte, when positive, abandons a call (a transient failure)
	// whose reply sent no byte within it. 0: none.
	FirstByte time.Duration
	// Output is how structured replies are asked for: json_schema,
	// json_object or text. Empty: the model family's.
	Output llm.FormatType
	// SchemaIsInput: the provider counts a structured reply's schema as
	// input when it admits the call (Anthropic: the schema is a tool's
	// definition), so the estimate counts it too.
	SchemaIsInput bool
	// Limits, when set, are the model's rate limits: no call over a
	// limit's burst is ever admitted, so a prompt is cut to fit them.
	Limits *ratelimit.Limits
	// Deployment is the Azure deployment serving the model (an Azure
	// provider's; empty: the model's name).
	Deployment string
}
