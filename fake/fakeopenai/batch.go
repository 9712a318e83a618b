package fakeopenai

// The batch APIs: OpenAI's Batch API with its Files API
// (batch_openai.go; Azure OpenAI's under /openai/files and
// /openai/batches) and Anthropic's Message Batches (batch_anthropic.go).
// What they share lives here:
//   - a batch belongs to the API key that created it (another key gets
//     404), as do files;
//   - a batch's requests are answered on the fake's clock (Config.Now):
//     spread evenly over the model's BatchLatency from its creation, each
//     by the same fake model as a synchronous call (reply styles, usage,
//     the prompt cache), once, when the batch is next looked at after its
//     time; they are not charged to the synchronous limits;
//   - a request not answered when the completion window (BatchWindow)
//     closes expires, and so does the batch;
//   - cancelling lets the request in flight (the next one due) finish,
//     and cancels the rest when it has;
//   - the queues: OpenAI's enqueued prompt tokens per key and model
//     (Model.BatchTokens), Anthropic's batch requests waiting per key and
//     model (Model.BatchRequests);
//   - faults (Faults.Batch*): a batch that expires after answering part
//     of its requests, a batch that fails, a request answered with a
//     server error.

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"
)

// customID is a custom_id as Anthropic's Message Batches take it.
var customID = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// DefaultBatchLatency is a batch's time to complete when its model sets
// none.
const DefaultBatchLatency = 10 * time.Minute

// The fake's own bound on the bytes of files it keeps (OpenAI's is an
// organisation's storage quota).
const fileStoreBytes = 1 << 30

// BatchStats counts a model's batch work. A batch counts under each
// model it holds requests of.
type BatchStats struct {
	Submitted int64 `json:"submitted"` // created, whatever became of them
	Completed int64 `json:"completed"` // ended with every request answered
	Expired   int64 `json:"expired"`
	Failed    int64 `json:"failed"` // OpenAI's failed validation
	Cancelled int64 `json:"cancelled"`
	// QueueFull counts batches refused for the queue: OpenAI's
	// token_limit_exceeded (also in Failed), Anthropic's 429.
	QueueFull int64 `json:"queue_full"`
	// Requests counts batch requests answered (succeeded or with an
	// error status), Errors those answered with an error.
	Requests int64 `json:"requests"`
	Errors   int64 `json:"errors"`
}

// batchStatsOf returns a model's batch counters. Caller holds s.mu.
func (s *Server) batchStatsOf(model string) *BatchStats {
	if s.batchStats == nil {
		s.batchStats = map[string]*BatchStats{}
	}
	st, ok := s.batchStats[model]
	if !ok {
		st = &BatchStats{}
		s.batchStats[model] = st
	}
	return st
}

// addBatchStats adds the batch counters to Stats' answer (a model with
// batches only is in it too). Caller holds s.mu.
func (s *Server) addBatchStats(out map[string]ModelStats) {
	for name, st := range s.batchStats {
		ms, ok := out[name]
		if !ok {
			m := s.models[name]
			ms = ModelStats{ResponseFormats: map[string]int64{}, TPM: m.TPM, RPM: m.RPM}
		}
		ms.Batch = *st
		out[name] = ms
	}
}

// batchStore holds the batch APIs' state. Its lock is taken before the
// server's (answering a request takes s.mu), never after.
type batchStore struct {
	mu      sync.Mutex
	seq     int64
	files   map[string]*storedFile
	bytes   int64
	batches map[string]*fakeBatch
}

type storedFile struct {
	id, key, name, purpose string
	created                time.Time
	data                   []byte
}

// Batch dialects.
const (
	dialectOpenAI    = "openai"
	dialectAzure     = "azure"
	dialectAnthropic = "anthropic"
)

// Batch states (OpenAI's words; Anthropic's ended is completed, expired
// or cancelled here).
const (
	stateInProgress = "in_progress"
	stateFailed     = "failed"
	stateCompleted  = "completed"
	stateExpired    = "expired"
	stateCancelled  = "cancelled"
)

type fakeBatch struct {
	id, key, dialect string
	created, expires time.Time
	state            string
	ended            time.Time // when it failed, completed, expired or was cancelled
	// cancelled is when cancelling was asked for, stop when the request
	// then in flight finishes (zero: not cancelled).
	cancelled, stop time.Time
	reqs            []*batchReq
	fail            bool // Faults.BatchFail
	// OpenAI's
	endpoint, inputFile string
	metadata            map[string]string
	errors              []lineError // why validation failed
	model               string
	tokens              int64 // enqueued prompt tokens
	output, errorFile   string
}

// batchReq is one request of a batch.
type batchReq struct {
	customID string
	model    string // "" when not known
	body     []byte // OpenAI's line body, Anthropic's params
	at       time.Time
	never    bool  // Faults.BatchExpire: not answered before the window closes
	tokens   int64 // prompt tokens (OpenAI's enqueued tokens)
	// answered: status the response's HTTP status (OpenAI) and result its
	// body; Anthropic's result is the whole result object, ok its type
	// is succeeded.
	answered bool
	status   int
	result   []byte
	// final is why a request never answered did not run: "expired" or
	// "cancelled".
	final string
}

func (b *fakeBatch) over() bool { return b.state != stateInProgress }

// isBatchPath reports the batch APIs' paths: .../files[/{id}[/content]],
// .../batches[/{id}[/cancel]], .../messages/batches[/{id}[/results|cancel]].
func isBatchPath(path string) bool {
	_, _, _, ok := batchRoute(path)
	return ok
}

// batchRoute splits a batch API path into its API ("files", "batches"
// or "messages/batches"), the object's id and the operation.
func batchRoute(path string) (api, id, op string, ok bool) {
	if strings.Contains(path, "/openai/deployments/") {
		return "", "", "", false
	}
	seg := strings.Split(strings.Trim(path, "/"), "/")
	for i := len(seg) - 1; i >= 0 && i >= len(seg)-3; i-- {
		if seg[i] != "files" && seg[i] != "batches" {
			continue
		}
		api = seg[i]
		if api == "batches" && i > 0 && seg[i-1] == "messages" {
			api = "messages/batches"
		}
		rest := seg[i+1:]
		if len(rest) > 0 {
			id = rest[0]
		}
		if len(rest) > 1 {
			op = rest[1]
		}
		return api, id, op, true
	}
	return "", "", "", false
}

// serveBatches routes the batch APIs.
func (s *Server) serveBatches(w http.ResponseWriter, r *http.Request) {
	api, id, op, _ := batchRoute(r.URL.Path)
	switch {
	case api == "messages/batches":
		s.messageBatches(w, r, id, op) // batch_anthropic.go
	case strings.HasPrefix(r.URL.Path, "/openai/"):
		s.openaiBatches(w, r, dialectAzure, api, id, op) // batch_openai.go
	default:
		s.openaiBatches(w, r, dialectOpenAI, api, id, op)
	}
}

// nextID numbers the store's objects. Caller holds the store's lock.
func (st *batchStore) nextID(prefix string) string {
	st.seq++
	return fmt.Sprintf("%s%012d", prefix, st.seq)
}

// batchLatency is how long a batch of the models takes: the slowest's
// BatchLatency, scaled.
func (s *Server) batchLatency(models []string) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := time.Duration(0)
	for _, name := range models {
		if m, ok := s.models[name]; ok {
			d = max(d, m.BatchLatency)
		}
	}
	if d == 0 {
		d = DefaultBatchLatency
	}
	return time.Duration(float64(d) * s.cfg.LatencyScale)
}

// batchWindow is the completion window.
func (s *Server) batchWindow() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cfg.BatchWindow > 0 {
		return s.cfg.BatchWindow
	}
	return 24 * time.Hour
}

// schedule sets when each request of a new batch is answered and rolls
// the batch's faults.
func (s *Server) schedule(b *fakeBatch, models []string) {
	lat := s.batchLatency(models)
	n := len(b.reqs)
	for i, r := range b.reqs {
		r.at = b.created.Add(lat * time.Duration(i+1) / time.Duration(n))
	}
	s.mu.Lock()
	f := s.faults
	expire := f.BatchExpire > 0 && s.rng.Float64() < f.BatchExpire
	b.fail = f.BatchFail > 0 && s.rng.Float64() < f.BatchFail
	s.mu.Unlock()
	if expire {
		for _, r := range b.reqs[int(min(max(f.BatchExpireDone, 0), 1)*float64(n)):] {
			r.never = true
		}
	}
}

// countBatch adds to the batch counters of each model the batch holds.
func (s *Server) countBatch(b *fakeBatch, add func(*BatchStats)) {
	seen := map[string]bool{}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range b.reqs {
		if _, ok := s.models[r.model]; ok && !seen[r.model] {
			seen[r.model] = true
			add(s.batchStatsOf(r.model))
		}
	}
	if _, ok := s.models[b.model]; ok && len(seen) == 0 { // a batch that failed validation
		add(s.batchStatsOf(b.model))
	}
}

// advance answers what is due of a batch by now and ends it when its
// time has come. Caller holds the store's lock.
func (s *Server) advance(b *fakeBatch, now time.Time) {
	if b.over() {
		return
	}
	limit := now
	if !b.stop.IsZero() && b.stop.Before(limit) {
		limit = b.stop
	}
	last, pending := b.created, false
	for _, r := range b.reqs {
		switch {
		case r.answered:
		case r.never || !r.at.Before(b.expires):
			pending = true
		case r.at.After(limit):
			pending = true
		default:
			s.answerBatchRequest(b, r)
		}
		if r.answered {
			last = r.at
		}
	}
	switch {
	case !b.stop.IsZero() && !now.Before(b.stop):
		s.endBatch(b, stateCancelled, b.stop)
	case !pending:
		s.endBatch(b, stateCompleted, last)
	case !now.Before(b.expires):
		s.endBatch(b, stateExpired, b.expires)
	}
}

// answerBatchRequest answers one request as its dialect does.
func (s *Server) answerBatchRequest(b *fakeBatch, r *batchReq) {
	s.mu.Lock()
	fault := b.fail || (s.faults.BatchRequestError > 0 && s.rng.Float64() < s.faults.BatchRequestError)
	s.mu.Unlock()
	if b.dialect == dialectAnthropic {
		r.status, r.result = s.batchMessage(r, fault) // batch_anthropic.go
	} else {
		r.status, r.result = s.batchChat(r, fault) // batch_openai.go
	}
	r.answered = true
	s.mu.Lock()
	if _, ok := s.models[r.model]; ok {
		st := s.batchStatsOf(r.model)
		st.Requests++
		if r.status != http.StatusOK {
			st.Errors++
		}
	}
	s.mu.Unlock()
}

// endBatch ends a batch: the requests it never answered are expired or
// cancelled as it is; OpenAI's output and error files are written.
func (s *Server) endBatch(b *fakeBatch, state string, at time.Time) {
	b.state, b.ended = state, at
	for _, r := range b.reqs {
		if !r.answered {
			r.final = state
		}
	}
	if b.dialect != dialectAnthropic {
		s.writeOutputFiles(b) // batch_openai.go
	}
	s.countBatch(b, func(st *BatchStats) {
		switch state {
		case stateCompleted:
			st.Completed++
		case stateExpired:
			st.Expired++
		case stateCancelled:
			st.Cancelled++
		}
	})
}

// cancelBatch asks a batch to stop at now: the request in flight (the
// next one due before the window closes) may finish, the rest will not.
// Caller holds the store's lock and has advanced the batch to now.
func cancelBatch(b *fakeBatch, now time.Time) {
	if b.over() || !b.cancelled.IsZero() {
		return
	}
	b.cancelled, b.stop = now, now
	for _, r := range b.reqs {
		if !r.answered && !r.never && r.at.Before(b.expires) {
			b.stop = r.at
			break
		}
	}
}

// pendingBatches advances a key's batches not yet over and calls fn with
// each still in progress. Caller holds the store's lock.
func (s *Server) pendingBatches(key string, now time.Time, fn func(*fakeBatch)) {
	for _, b := range s.batches.batches {
		if b.key != key || b.over() {
			continue
		}
		s.advance(b, now)
		if !b.over() {
			fn(b)
		}
	}
}
