package server

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestTokenAuth(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	tests := []struct {
		name  string
		token string
		open  bool
		set   func(*http.Request)
		want  int
	}{
		{"bearer", "tok", false, func(r *http.Request) { r.Header.Set("Authorization", "Bearer tok") }, 204},
		{"basic password", "tok", false, func(r *http.Request) { r.SetBasicAuth("any", "tok") }, 204},
		{"wrong bearer", "tok", false, func(r *http.Request) { r.Header.Set("Authorization", "Bearer nope") }, 401},
		{"wrong basic", "tok", false, func(r *http.Request) { r.SetBasicAuth("tok", "nope") }, 401},
		{"none", "tok", false, func(*http.Request) {}, 401},
		{"no token configured refuses all", "", false, func(r *http.Request) { r.Header.Set("Authorization", "Bearer ") }, 401},
		{"demo is open", "", true, func(r *http.Request) { r.Host = "127.0.0.1:8080" }, 204},
		{"demo by localhost", "", true, func(r *http.Request) { r.Host = "localhost:8080" }, 204},
		{"demo by ::1", "", true, func(r *http.Request) { r.Host = "[::1]:8080" }, 204},
		{"demo by a rebound name", "", true, func(r *http.Request) { r.Host = "evil.example:8080" }, 403},
		{"demo by a loopback-looking name", "", true, func(r *http.Request) { r.Host = "127.0.0.1.evil.example" }, 403},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/api/plans", nil)
			tt.set(r)
			w := httptest.NewRecorder()
			tokenAuth(tt.token, tt.open)(ok).ServeHTTP(w, r)
			if w.Code != tt.want {
				t.Fatalf("status %d, want %d", w.Code, tt.want)
			}
			if w.Code == 401 && w.Header().Get("WWW-Authenticate") == "" {
				t.Fatal("401 without WWW-Authenticate")
			}
		})
	}
}
