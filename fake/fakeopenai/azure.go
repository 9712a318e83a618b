package fakeopenai

// The Azure mode: Azure OpenAI's data-plane chat completions as its REST
// reference documents them (learn.microsoft.com "Azure OpenAI REST API
// reference", "Quotas and limits"):
//   - POST {endpoint}/openai/deployments/{deployment}/chat/completions
//     ?api-version=YYYY-MM-DD[-preview]: 400 without api-version, 404
//     DeploymentNotFound for an unknown deployment;
//   - auth by the api-key header: 401 without a valid one;
//   - the body is OpenAI's; the deployment, not the body's model,
//     decides the model;
//   - errors {"error":{"code":"429","message":"... Please retry after N
//     seconds."}} with retry-after and retry-after-ms on 429, and
//     x-ratelimit-remaining-requests/-tokens on replies (Azure sends no
//     x-ratelimit-limit-* or reset-* on chat completions).
// Limits, faults and counters are the OpenAI mode's.

import (
	"encoding/json"
	"net/http"
	"strings"
)

func writeAzureError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"code": code, "message": msg}})
}

// azureLimitHeaders keeps only the rate-limit headers Azure sends.
func azureLimitHeaders(h http.Header) {
	for _, name := range []string{"x-ratelimit-limit-requests", "x-ratelimit-limit-tokens", "x-ratelimit-reset-requests", "x-ratelimit-reset-tokens"} {
		h.Del(name)
	}
}

func (s *Server) azure(w http.ResponseWriter, r *http.Request) {
	_, rest, _ := strings.Cut(r.URL.Path, "/openai/deployments/")
	deployment, op, _ := strings.Cut(rest, "/")
	if (op != "chat/completions" && op != "embeddings") || r.Method != http.MethodPost {
		writeAzureError(w, http.StatusNotFound, "404", "Resource not found")
		return
	}
	if !s.keyOK(r.Header.Get("api-key")) {
		writeAzureError(w, http.StatusUnauthorized, "401", "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource.")
		return
	}
	if r.URL.Query().Get("api-version") == "" {
		writeAzureError(w, http.StatusBadRequest, "BadRequest", "Missing API version parameter: api-version")
		return
	}
	model := deployment
	if d, ok := s.cfg.Deployments[deployment]; ok {
		model = d
	} else if len(s.cfg.Deployments) > 0 {
		model = ""
	}
	if _, ok := s.models[model]; !ok || deployment == "" {
		writeAzureError(w, http.StatusNotFound, "DeploymentNotFound", "The API deployment for this resource does not exist. If you created the deployment within the last 5 minutes, please wait a moment and try again.")
		return
	}
	if op == "embeddings" {
		s.embeddings(w, r, r.Header.Get("api-key"), model)
		return
	}
	s.completions(w, r, r.Header.Get("api-key"), model)
}
