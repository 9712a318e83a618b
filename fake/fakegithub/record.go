package fakegithub

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"time"
)

// Request is one request the fake received, as it arrived: what a test
// checks against GitHub's REST description.
type Request struct {
	At     time.Time
	Method string
	// Path is the path as sent, the Enterprise prefix /api/v3 included
	// (Enterprise says which description applies).
	Path, RawQuery string
	Accept         string
	ContentType    string
	Body           []byte
	// Status is the fake's answer.
	Status int
}

// Enterprise reports whether the request was made under the Enterprise
// Server base path /api/v3.
func (r Request) Enterprise() bool {
	return strings.HasPrefix(r.Path, "/api/v3/") || r.Path == "/api/v3"
}

// APIPath is the path without the Enterprise prefix.
func (r Request) APIPath() string {
	if p, ok := strings.CutPrefix(r.Path, "/api/v3"); ok && r.Enterprise() {
		return p
	}
	return r.Path
}

// RecordRequests makes the fake keep every request from now on (bodies
// up to 1 MB, as the fake reads them), for Requests.
func (s *Server) RecordRequests() { s.recording.Store(true) }

// Requests returns every request recorded so far, in the order they
// arrived.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// recorder keeps one request and the status it was answered with.
type recorder struct {
	http.ResponseWriter
	s      *Server
	req    Request
	status int
}

func (s *Server) record(w http.ResponseWriter, r *http.Request) *recorder {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	r.Body = io.NopCloser(bytes.NewReader(body))
	return &recorder{ResponseWriter: w, s: s, req: Request{At: s.cfg.NowFunc(), Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery,
		Accept: r.Header.Get("Accept"), ContentType: r.Header.Get("Content-Type"), Body: body}}
}

func (rec *recorder) WriteHeader(code int) {
	if rec.status == 0 {
		rec.status = code
	}
	rec.ResponseWriter.WriteHeader(code)
}

func (rec *recorder) Write(b []byte) (int, error) {
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	return rec.ResponseWriter.Write(b)
}

func (rec *recorder) done() {
	rec.req.Status = rec.status
	rec.s.mu.Lock()
	rec.s.requests = append(rec.s.requests, rec.req)
	rec.s.mu.Unlock()
}
