package metrics

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/prq-dev/prq/admission"
	"github.com/prq-dev/prq/internal/redistest"
	"github.com/prq-dev/prq/ratelimit"
)

// A failed decoration write counted in one process (a worker's) is
// exported by another (serve's) as prq_github_decoration_errors_total,
// by kind and status.
func TestDecorationErrorsExported(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	worker := New(nil, nil, rdb, Config{})
	worker.CountDecorationError("check_run_queued", "404")
	worker.CountDecorationError("check_run_queued", "404")
	worker.CountDecorationError("check_run_complete", "timeout")
	serve := New(emptyAdmission{}, noQueues{}, rdb, Config{CacheFor: -1})
	serve.Watch(rdb, time.Minute)
	w := httptest.NewRecorder()
	serve.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{`prq_github_decoration_errors_total{kind="check_run_queued",status="404"} 2`,
		`prq_github_decoration_errors_total{kind="check_run_complete",status="timeout"} 1`} {
		if !strings.Contains(w.Body.String(), want) {
			t.Errorf("the scrape lacks %s", want)
		}
	}
}

// emptyAdmission has no models: the scrape reads only Redis's series.
type emptyAdmission struct{}

var _ Admission = emptyAdmission{}

func (emptyAdmission) Models() []string { return nil }
func (emptyAdmission) Stats(context.Context, string) (admission.Stats, error) {
	return admission.Stats{}, errors.New("no model")
}
func (emptyAdmission) Bucket(string) (*ratelimit.Bucket, bool)           { return nil, false }
func (emptyAdmission) Paused(context.Context) map[string]string          { return nil }
func (emptyAdmission) PausedKeys(context.Context, string) map[int]string { return nil }

// noQueues has no queues.
type noQueues struct{}

var _ Queues = noQueues{}

func (noQueues) GetQueueInfo(string) (*asynq.QueueInfo, error) { return nil, asynq.ErrQueueNotFound }
