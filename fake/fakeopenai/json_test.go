package fakeopenai_test

import (
	"encoding/json"
	"net/http"
)

func jsonDecode(r *http.Response, v any) error { return json.NewDecoder(r.Body).Decode(v) }
