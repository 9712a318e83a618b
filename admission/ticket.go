package admission

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/prq-dev/prq/jobs"
)

// ClassChat is the class of chat tickets; batch classes are tier names.
const ClassChat = "chat"

// Classes lists every class, highest first.
var Classes = []string{ClassChat, string(jobs.TierPaid), string(jobs.TierTrial), string(jobs.TierFree)}

// Ticket is a held job waiting for admission.
type Ticket struct {
	ID     string // the asynq task id
	Queue  string // the asynq queue holding the task
	Model  string
	Class  string // chat, paid, trial or free
	Tenant string // the installation
	// PRSeq orders a tenant's PRs: older first, so work in progress
	// finishes before new work of the same tenant starts.
	PRSeq int64
	// Index and Total place the job in its PR; progress (Index/Total)
	// bumps the flow's priority across tenants.
	Index, Total int
	// Tokens is the estimated cost (the provider's admission rule).
	Tokens int64
	// Output is the part of Tokens that is the call's output allowance
	// (max_tokens); the rest is its input. A model with input or output
	// token limits charges each its part; 0 (not split) charges all of
	// Tokens to each, never less than the call takes.
	Output int64
	// Enqueued is when the job first waited (zero: now, by Redis's clock).
	Enqueued time.Time
}

func (t Ticket) validate() error {
	switch {
	case t.ID == "" || t.Queue == "" || t.Model == "":
		return errors.New("admission: ticket needs id, queue and model")
	case t.Tokens < 0:
		return fmt.Errorf("admission: ticket %s: negative cost %d", t.ID, t.Tokens)
	case t.Output < 0 || t.Output > t.Tokens:
		return fmt.Errorf("admission: ticket %s: output part %d outside the cost %d", t.ID, t.Output, t.Tokens)
	case strings.ContainsAny(t.ID+t.Tenant+t.Queue, "|{}"):
		return fmt.Errorf("admission: ticket %s: id, tenant and queue must not contain | { }", t.ID)
	}
	for _, c := range Classes {
		if t.Class == c {
			return nil
		}
	}
	return fmt.Errorf("admission: ticket %s: unknown class %q", t.ID, t.Class)
}

func (t Ticket) prio() float64 {
	if t.Total <= 0 {
		return 1
	}
	p := float64(t.Index) / float64(t.Total)
	return 1 + 2*min(max(p, 0), 1)
}

// storedTicket is a ticket as the tickets hash keeps it (field by field
// what ticket.lua's decode returns). The id is the hash field and the
// model the key's, so neither is encoded.
type storedTicket struct {
	Class, Tenant string
	// Rank orders a tenant's flow: PRSeq in 12 digits, then Index in 6.
	Rank   string
	Tokens int64
	// EnqueuedUS is the first wait in unix µs; 0 asks Redis to stamp its
	// own clock at registration.
	EnqueuedUS int64
	Queue      string
	// Prio (>= 1) divides the cost in fair queuing; kept to 3 decimals.
	Prio float64
	// Output is the output part of Tokens; 0 (not split) is not written,
	// and a ticket stored before the field existed reads as 0.
	Output int64
}

// ticketFields is the number of fields every encoded ticket has (the
// output part, an eighth, is optional).
const ticketFields = 7

func (t Ticket) stored() storedTicket {
	var enq int64
	if !t.Enqueued.IsZero() {
		enq = t.Enqueued.UnixMicro()
	}
	return storedTicket{Class: t.Class, Tenant: t.Tenant, Rank: fmt.Sprintf("%012d%06d", t.PRSeq, t.Index),
		Tokens: t.Tokens, EnqueuedUS: enq, Queue: t.Queue, Prio: t.prio(), Output: t.Output}
}

// encodeTicket is the one writer of the stored form,
// "class|tenant|rank|tokens|enq_us|queue|prio[|output]"; ticket.lua
// decodes it.
func encodeTicket(s storedTicket) string {
	f := []string{s.Class, s.Tenant, s.Rank, strconv.FormatInt(s.Tokens, 10),
		strconv.FormatInt(s.EnqueuedUS, 10), s.Queue, strconv.FormatFloat(s.Prio, 'f', 3, 64)}
	if s.Output > 0 {
		f = append(f, strconv.FormatInt(s.Output, 10))
	}
	return strings.Join(f, "|")
}

// decodeTicket reads what encodeTicket wrote (and what ticket.lua's stamp
// rewrote: stamp leaves a trailing empty field). Fields past the eighth
// are ignored.
func decodeTicket(enc string) (storedTicket, error) {
	f := strings.Split(enc, "|")
	if len(f) < ticketFields {
		return storedTicket{}, fmt.Errorf("admission: stored ticket has %d fields, want %d", len(f), ticketFields)
	}
	s := storedTicket{Class: f[0], Tenant: f[1], Rank: f[2], Queue: f[5]}
	var err error
	if s.Tokens, err = strconv.ParseInt(f[3], 10, 64); err != nil {
		return storedTicket{}, fmt.Errorf("admission: stored ticket tokens: %w", err)
	}
	if s.EnqueuedUS, err = strconv.ParseInt(f[4], 10, 64); err != nil {
		return storedTicket{}, fmt.Errorf("admission: stored ticket enqueue time: %w", err)
	}
	if s.Prio, err = strconv.ParseFloat(f[6], 64); err != nil {
		return storedTicket{}, fmt.Errorf("admission: stored ticket prio: %w", err)
	}
	if len(f) > ticketFields && f[ticketFields] != "" {
		if s.Output, err = strconv.ParseInt(f[ticketFields], 10, 64); err != nil {
			return storedTicket{}, fmt.Errorf("admission: stored ticket output: %w", err)
		}
	}
	return s, nil
}

// decodeAdmitted reads one admission of admit's reply:
// "via|queue|class|tenant|tokens|enq_us|key", "|dim" instead of "|key"
// for a reject.
func decodeAdmitted(id, desc, model string, now time.Time) (Admitted, bool) {
	const (
		fVia = iota
		fQueue
		fClass
		fTenant
		fTokens
		fEnqueued
		fDim // a reject's; an admission's key
		fKey = fDim
	)
	f := strings.Split(desc, "|")
	if len(f) <= fEnqueued {
		return Admitted{}, false
	}
	tok, _ := strconv.ParseInt(f[fTokens], 10, 64)
	enq, _ := strconv.ParseInt(f[fEnqueued], 10, 64)
	a := Admitted{ID: id, Via: f[fVia], Queue: f[fQueue], Class: f[fClass], Tenant: f[fTenant], Model: model, Tokens: tok,
		Enqueued: time.UnixMicro(enq), Waited: now.Sub(time.UnixMicro(enq))}
	switch {
	case a.Via == "reject" && len(f) > fDim:
		a.Dim = f[fDim]
	case len(f) > fKey:
		a.Key, _ = strconv.Atoi(f[fKey])
	}
	return a, true
}
