package metrics

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prq-dev/prq/internal/redistest"
)

// GitLab API requests counted in one process (a worker's) are exported
// by another (serve's) as prq_gitlab_requests_all_total, by kind and
// outcome: GitLab's 429 is rate_limited, its 400 a refusal.
func TestGitLabRequestsExported(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	gl := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/gone"):
			w.WriteHeader(http.StatusNotFound)
		case r.Method == http.MethodGet:
			w.WriteHeader(http.StatusOK)
		case r.Method == http.MethodPut:
			w.WriteHeader(http.StatusBadRequest) // an invalid position
		default:
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	t.Cleanup(gl.Close)
	client := &http.Client{Transport: GitLabCounter{Counts: rdb, Next: http.DefaultTransport}}
	for _, r := range []struct{ method, path string }{{"GET", "/api/v4/user"}, {"GET", "/api/v4/user"}, {"GET", "/api/v4/gone"}, {"POST", "/api/v4/notes"}, {"PUT", "/api/v4/notes/1"}} {
		req, _ := http.NewRequest(r.method, gl.URL+r.path, nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	serve := New(emptyAdmission{}, noQueues{}, rdb, Config{CacheFor: -1})
	serve.Watch(rdb, time.Minute)
	w := httptest.NewRecorder()
	serve.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{`prq_gitlab_requests_all_total{kind="read",outcome="ok"} 2`, `prq_gitlab_requests_all_total{kind="read",outcome="not_found"} 1`,
		`prq_gitlab_requests_all_total{kind="write",outcome="rate_limited"} 1`, `prq_gitlab_requests_all_total{kind="write",outcome="refused"} 1`} {
		if !strings.Contains(w.Body.String(), want) {
			t.Errorf("the scrape lacks %s", want)
		}
	}
}
