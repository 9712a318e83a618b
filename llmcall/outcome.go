package llmcall

import (
	"encoding/json"
	"errors"

	"github.com/prq-dev/prq/llm"
)

// Outcome is how a provider call ended: the value a handler switches on.
type Outcome int

const (
	// OK: the provider answered.
	OK Outcome = iota
	// RateLimited: the provider said 429: back to admission (its key's
	// bucket is empty until the provider's retry time).
	RateLimited
	// AccountModel: the provider refused the account (a bad key, no
	// quota, no permission); the model's admissions are paused.
	AccountModel
	// AccountKey: as AccountModel, for one key of a model with several:
	// that key's admissions are paused, the others serve.
	AccountKey
	// ContextLength: the prompt does not fit the model.
	ContextLength
	// Permanent: the provider refused the request for good.
	Permanent
	// Transient: a 5xx, a timeout, a broken reply: the provider may have
	// run it.
	Transient
	// FlexRefused: flex processing refused the call; nothing was billed
	// or counted.
	FlexRefused
)

// String is the outcome's metric label (prq_llm_calls_total's outcome).
func (o Outcome) String() string {
	switch o {
	case OK:
		return "ok"
	case RateLimited:
		return "rate_limited"
	case AccountModel, AccountKey:
		return "account"
	case ContextLength:
		return "context_length"
	case Permanent:
		return "failed"
	case FlexRefused:
		return "flex_unavailable"
	}
	return "transient"
}

// Account reports whether o is an account problem (of the model or a
// key).
func (o Outcome) Account() bool { return o == AccountModel || o == AccountKey }

// OutcomeOf reads a provider client's result (package llm's classified
// errors). An account problem reads as AccountModel until Call.Resolve
// applies the pause policy.
func OutcomeOf(err error) Outcome {
	switch {
	case err == nil:
		return OK
	case errors.Is(err, llm.ErrFlexUnavailable):
		return FlexRefused
	case errors.Is(err, llm.ErrRateLimited):
		return RateLimited
	case errors.Is(err, llm.ErrAccount):
		return AccountModel
	case errors.Is(err, llm.ErrContextLength):
		return ContextLength
	case errors.Is(err, llm.ErrPermanent):
		return Permanent
	}
	return Transient
}

// ReplyOutcome reads a provider's raw reply (the gateway relays it
// unparsed) by the same rule as OutcomeOf: its status and, for a
// failure, its error body's code, type and message (OpenAI's and
// Anthropic's shapes). flex: the call asked for flex processing.
func ReplyOutcome(status int, body []byte, flex bool) Outcome {
	if status >= 200 && status < 300 {
		return OK
	}
	var e struct {
		Error struct {
			Code    any    `json:"code"`
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	_ = json.Unmarshal(body, &e) // a body that is not an error's reads by its status alone
	code, _ := e.Error.Code.(string)
	return OutcomeOf(llm.KindOf(status, code, e.Error.Type, e.Error.Message, flex))
}
