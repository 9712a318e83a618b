package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"

	openai "github.com/sashabaranov/go-openai"
)

// go-openai's chat request has no prompt_cache_key; cacheKeyDoer adds it
// to the request's JSON body, from the call's context, on its way out.

type cacheKeyCtx struct{}

// withCacheKey carries a request's CacheKey to the HTTP client.
func withCacheKey(ctx context.Context, key string) context.Context {
	if key == "" {
		return ctx
	}
	return context.WithValue(ctx, cacheKeyCtx{}, key)
}

// cacheKeyDoer sends prompt_cache_key with each chat completion whose
// context carries one, by inserting it as the body's first member (the
// body is go-openai's marshalled request, a JSON object without it).
type cacheKeyDoer struct{ next openai.HTTPDoer }

func (d cacheKeyDoer) Do(r *http.Request) (*http.Response, error) {
	key, _ := r.Context().Value(cacheKeyCtx{}).(string)
	if key == "" || r.Body == nil || r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		return d.next.Do(r)
	}
	body, err := io.ReadAll(r.Body)
	r.Body.Close()
	if err != nil {
		return nil, err
	}
	body = withMember(body, "prompt_cache_key", key)
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	r.ContentLength = int64(len(body))
	r.Header.Set("Content-Length", strconv.Itoa(len(body)))
	return d.next.Do(r)
}

// withMember returns the JSON object obj with the string member name:
// value first; obj unchanged when it is not an object.
func withMember(obj []byte, name, value string) []byte {
	trimmed := bytes.TrimLeft(obj, " \t\r\n")
	if len(trimmed) < 2 || trimmed[0] != '{' {
		return obj
	}
	k, _ := json.Marshal(name)
	v, _ := json.Marshal(value)
	out := make([]byte, 0, len(trimmed)+len(k)+len(v)+2)
	out = append(out, '{')
	out = append(out, k...)
	out = append(out, ':')
	out = append(out, v...)
	rest := bytes.TrimLeft(trimmed[1:], " \t\r\n")
	if len(rest) > 0 && rest[0] != '}' {
		out = append(out, ',')
	}
	return append(out, rest...)
}
