package gateway

import (
	"encoding/json"
	"net/http"
)

// api is the client API a request speaks: its errors take that API's
// shape.
type api int

const (
	apiChat api = iota
	apiEmbeddings
	apiResponses
	apiMessages // Anthropic's Messages API (and count_tokens)
)

// fail answers an error in the request's API's shape: OpenAI's
// {"error":{"message","type","param","code"}}, or Anthropic's
// {"type":"error","error":{"type","message"}} with the type its status
// has there (the OpenAI type and code are then kept as prq_code).
func (q *request) fail(w http.ResponseWriter, status int, typ, code, msg string) {
	q.failParam(w, status, typ, code, "", msg)
}

// bad answers 400 for a request the gateway cannot take, naming the
// parameter at fault when it is known.
func (q *request) bad(w http.ResponseWriter, err error) {
	param := ""
	if re, ok := err.(*requestError); ok {
		param = re.param
	}
	q.failParam(w, http.StatusBadRequest, "invalid_request_error", "", param, err.Error())
}

func (q *request) failParam(w http.ResponseWriter, status int, typ, code, param, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if q.api == apiMessages {
		e := map[string]any{"type": anthropicErrorType(status), "message": msg}
		if code != "" {
			e["prq_code"] = code
		}
		json.NewEncoder(w).Encode(map[string]any{"type": "error", "error": e})
		return
	}
	var c, p any
	if code != "" {
		c = code
	}
	if param != "" {
		p = param
	}
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": p, "code": c}})
}

// anthropicErrorType is the error type Anthropic gives a status.
func anthropicErrorType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case 529, http.StatusServiceUnavailable:
		return "overloaded_error"
	}
	return "api_error"
}
