package server

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"regexp"
	"strings"
)

// CSRFHeader must be present (any value) on every state-changing request
// to the admin API and the asynq web UI, unless the request carries a
// bearer token: a cross-site form cannot set either.
const CSRFHeader = "X-PRQ-CSRF"

const (
	monitoringRoot = "/monitoring"
	csrfScriptPath = "/ui/csrf.js"
)

// contentSecurityPolicy allows only prq's own scripts and connections;
// styles may be inline (the pages and the asynq web UI style elements),
// nothing may frame a page. scripts lists extra allowed script sources.
func contentSecurityPolicy(scripts ...string) string {
	return "default-src 'self'; script-src 'self'" + strings.Join(append([]string{""}, scripts...), " ") +
		"; style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self' data:; connect-src 'self'; " +
		"object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
}

// securityHeaders sets the headers every response carries; a handler may
// replace the Content-Security-Policy (the asynq web UI does).
func securityHeaders(h http.Handler) http.Handler {
	csp := contentSecurityPolicy()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", csp)
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("X-Frame-Options", "DENY")
		// same-origin, not no-referrer: with no-referrer browsers send
		// "Origin: null" on the UI's own POSTs, which sameOrigin refuses
		hd.Set("Referrer-Policy", "same-origin")
		hd.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.ServeHTTP(w, r)
	})
}

// safeMethod: requests that change nothing.
func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// sameOrigin refuses a state-changing request unless it comes from this
// server's own pages: its Origin (or, without one, its Referer) names the
// request's own host, and it carries CSRFHeader or a bearer token.
func sameOrigin(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !safeMethod(r.Method) {
			if err := checkSameOrigin(r); err != nil {
				http.Error(w, "cross-site request refused: "+err.Error(), http.StatusForbidden)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

func checkSameOrigin(r *http.Request) error {
	src, name := r.Header.Get("Origin"), "Origin"
	if src == "" {
		src, name = r.Header.Get("Referer"), "Referer"
	}
	if src != "" {
		u, err := url.Parse(src)
		if err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host) {
			return fmt.Errorf("its %s is not this server", name)
		}
	}
	if r.Header.Get(CSRFHeader) == "" && !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
		return errors.New("state-changing requests need the " + CSRFHeader + " header (any value) or a bearer token")
	}
	return nil
}

//go:embed csrf.js
var csrfScript []byte

// monitoringUI is the asynq web UI (asynqmon) as prq serves it: its page
// loads prq's CSRF script first and runs under a policy that allows its
// two inline scripts by hash, and every write is refused unless writes.
type monitoringUI struct {
	mon    http.Handler
	writes bool
	index  []byte // the page, with prq's script
	csp    string
}

var inlineScript = regexp.MustCompile(`(?s)<script>(.*?)</script>`)

func newMonitoringUI(mon http.Handler, writes bool) (*monitoringUI, error) {
	rec := httptest.NewRecorder()
	mon.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, monitoringRoot+"/", nil))
	page := rec.Body.Bytes()
	if rec.Code != http.StatusOK || !bytes.Contains(page, []byte("<head>")) {
		return nil, fmt.Errorf("asynq web UI: its page did not render (status %d)", rec.Code)
	}
	var hashes []string
	for _, m := range inlineScript.FindAllSubmatch(page, -1) {
		sum := sha256.Sum256(m[1])
		hashes = append(hashes, "'sha256-"+base64.StdEncoding.EncodeToString(sum[:])+"'")
	}
	index := bytes.Replace(page, []byte("<head>"), []byte(`<head><script src="`+csrfScriptPath+`"></script>`), 1)
	return &monitoringUI{mon: mon, writes: writes, index: index, csp: contentSecurityPolicy(hashes...)}, nil
}

func (m *monitoringUI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !safeMethod(r.Method) && !m.writes {
		http.Error(w, "the asynq web UI is read-only; set admin.ui_writes: true to allow changes from it", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Content-Security-Policy", m.csp)
	rest := strings.TrimPrefix(r.URL.Path, monitoringRoot)
	if r.Method == http.MethodGet && !strings.HasPrefix(rest, "/api/") && path.Ext(rest) == "" {
		// asynqmon answers every page path with the same page (the
		// routes live in its script)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write(m.index)
		return
	}
	m.mon.ServeHTTP(w, r)
}

// script serves prq's CSRF script for the UI's page.
func (m *monitoringUI) script() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache")
		w.Write(csrfScript)
	})
}
