package workers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"

	"github.com/prq-dev/prq/jobs"
	"github.com/prq-dev/prq/store"
)

// ReuseStore keeps results by what determined them (a *store.Store).
type ReuseStore interface {
	Reusable(ctx context.Context, key string) (store.Result, bool, error)
	ReusableOrClaim(ctx context.Context, key, id string) (r store.Result, found, mine bool, err error)
	SaveReusable(ctx context.Context, key string, r store.Result) error
}

var _ ReuseStore = (*store.Store)(nil)

// promptLayout is the version of how prompts are laid out and replies
// read: a change to either makes every kept result another prompt's.
const promptLayout = 3

// promptKey names what determined a file job's result: its kind, the
// model and what it is asked (system, context, user text, output format,
// output cap), in this prompt layout, within one repository of one
// installation (a tenant's work is never another's). The head's sha is
// not in it: the same file and context under another head is the same
// work.
func promptKey(f jobs.File, m Model, p prompt) string {
	h := sha256.New()
	format, _ := json.Marshal(p.format)
	for _, part := range []string{strconv.Itoa(promptLayout), strconv.FormatInt(f.PR.Installation, 10), f.PR.Owner, f.PR.Repo, string(f.Kind), m.Name, strconv.FormatBool(m.Reasoning), strconv.FormatInt(m.MaxOutput, 10), p.system, p.context, p.user, string(format)} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return m.Name + ":" + hex.EncodeToString(h.Sum(nil))
}
