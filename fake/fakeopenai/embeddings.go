package fakeopenai

// The embeddings mode: POST /v1/embeddings (and Azure's
// /openai/deployments/{deployment}/embeddings) as OpenAI's API reference
// documents it:
//   - request: model, input (a string, an array of strings, an array of
//     token ids, or an array of token-id arrays; at most 2,048 inputs,
//     none empty, each at most 8,192 tokens, 300,000 in all),
//     encoding_format float (the default) or base64 (little-endian
//     float32s, what openai's SDKs ask for), dimensions (text-embedding-3
//     models), user;
//   - reply: {"object":"list","data":[{"object":"embedding","index",
//     "embedding"}],"model","usage":{"prompt_tokens","total_tokens"}};
//   - tokens counted with cl100k_base for text-embedding-* models (as
//     OpenAI does), o200k_base otherwise; a request is charged its tokens
//     against the model's limits (no output), with the chat mode's 429s,
//     headers, faults and counters.
// Vectors are deterministic: each input's SHA-256 seeds them, unit length.

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tiktoken-go/tokenizer"
)

// Embeddings limits, OpenAI's.
const (
	maxEmbeddingInputs      = 2048
	maxEmbeddingInputTokens = 8192
	maxEmbeddingTokens      = 300000
)

type embeddingRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat string          `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`
	User           string          `json:"user"`
}

// embeddingInputs reads input: texts, or token-id arrays.
func embeddingInputs(raw json.RawMessage) (texts []string, ids [][]int64, msg string) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []string{s}, nil, ""
	}
	var many []string
	if json.Unmarshal(raw, &many) == nil && len(many) > 0 {
		return many, nil, ""
	}
	var one []int64
	if json.Unmarshal(raw, &one) == nil && len(one) > 0 {
		return nil, [][]int64{one}, ""
	}
	var arrays [][]int64
	if json.Unmarshal(raw, &arrays) == nil && len(arrays) > 0 {
		return nil, arrays, ""
	}
	return nil, nil, "'$.input' is invalid. Please check the API reference: https://platform.openai.com/docs/api-reference."
}

func (s *Server) embeddingCodec(model string) tokenizer.Codec {
	if strings.HasPrefix(model, "text-embedding-") {
		if c, err := tokenizer.Get(tokenizer.Cl100kBase); err == nil {
			return c
		}
	}
	return s.codec
}

// dimensionsOf is a model's vector size.
func dimensionsOf(model string) int {
	if strings.Contains(model, "3-large") {
		return 3072
	}
	return 1536
}

// embeddings serves an embeddings request for key; deployment is the
// model of an Azure deployment ("" in the OpenAI mode).
func (s *Server) embeddings(w http.ResponseWriter, r *http.Request, key, deployment string) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 32<<20))
	var req embeddingRequest
	if err != nil || json.Unmarshal(body, &req) != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", "We could not parse the JSON body of your request.")
		return
	}
	if deployment != "" {
		req.Model = deployment
	}
	m, ok := s.models[req.Model]
	if !ok {
		writeError(w, http.StatusNotFound, "invalid_request_error", "model_not_found", fmt.Sprintf("The model `%s` does not exist or you do not have access to it.", req.Model))
		return
	}
	texts, ids, msg := embeddingInputs(req.Input)
	if msg == "" && len(texts)+len(ids) > maxEmbeddingInputs {
		msg = fmt.Sprintf("'$.input' is invalid: at most %d inputs.", maxEmbeddingInputs)
	}
	format := req.EncodingFormat
	switch format {
	case "":
		format = "float"
	case "float", "base64":
	default:
		msg = fmt.Sprintf("'%s' is not one of ['float', 'base64'] - 'encoding_format'", req.EncodingFormat)
	}
	dims := dimensionsOf(m.Name)
	if req.Dimensions != nil {
		if *req.Dimensions < 1 || *req.Dimensions > dims || !strings.Contains(m.Name, "embedding-3") {
			msg = fmt.Sprintf("This model does not support specifying dimensions, or %d is out of range (1 to %d).", *req.Dimensions, dims)
		}
		dims = *req.Dimensions
	}
	if msg != "" {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", msg)
		return
	}
	codec := s.embeddingCodec(m.Name)
	var seeds [][32]byte
	total := int64(0)
	for _, t := range texts {
		if t == "" {
			writeError(w, http.StatusBadRequest, "invalid_request_error", "", "'$.input' is invalid: an input must not be empty.")
			return
		}
		n, _ := codec.Count(t)
		if n > maxEmbeddingInputTokens {
			writeError(w, http.StatusBadRequest, "invalid_request_error", "", fmt.Sprintf("This model's maximum context length is %d tokens, however you requested %d tokens in the input.", maxEmbeddingInputTokens, n))
			return
		}
		total += int64(n)
		seeds = append(seeds, sha256.Sum256([]byte(t)))
	}
	for _, a := range ids {
		if len(a) > maxEmbeddingInputTokens {
			writeError(w, http.StatusBadRequest, "invalid_request_error", "", fmt.Sprintf("This model's maximum context length is %d tokens, however you requested %d tokens in the input.", maxEmbeddingInputTokens, len(a)))
			return
		}
		total += int64(len(a))
		b, _ := json.Marshal(a)
		seeds = append(seeds, sha256.Sum256(b))
	}
	if total > maxEmbeddingTokens {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", fmt.Sprintf("Requested %d tokens, max %d tokens per request", total, maxEmbeddingTokens))
		return
	}

	s.mu.Lock()
	st := s.statsOf(m.Name)
	st.Requests++
	now := s.cfg.Now()
	b := s.bucketOf(m, key, now)
	if !s.admits(m, b, total) {
		st.RateLimited++
		wait := s.waitFor(m, b, total, now)
		s.setLimitHeaders(w.Header(), m, b, now)
		s.mu.Unlock()
		w.Header().Set("retry-after", strconv.FormatInt(int64(math.Ceil(wait.Seconds())), 10))
		w.Header().Set("retry-after-ms", strconv.FormatInt(wait.Milliseconds()+1, 10))
		writeError(w, http.StatusTooManyRequests, "tokens", "rate_limit_exceeded",
			fmt.Sprintf("Rate limit reached for %s in organization org-fake on tokens per min (TPM): Limit %d, Requested %d. Please try again in %s.", m.Name, m.TPM, total, wait.Round(time.Millisecond)))
		return
	}
	s.charge(b, total, now)
	st.admit(now, total, s.cfg.Period)
	if s.cfg.Record {
		s.recorded[m.Name] = append(s.recorded[m.Name], Admission{At: now, Cost: total, Key: KeyLabel(key)})
	}
	s.setLimitHeaders(w.Header(), m, b, now)
	f := s.faults
	roll := s.rng.Float64()
	latency := time.Duration(float64(m.Latency) * s.cfg.LatencyScale / 4) // embeddings are quick
	s.mu.Unlock()
	if deployment != "" {
		azureLimitHeaders(w.Header())
	}
	if roll < f.ServerError {
		s.countFault(m.Name)
		writeError(w, http.StatusInternalServerError, "server_error", "", "The server had an error while processing your request. Sorry about that!")
		return
	}
	if latency > 0 {
		select {
		case <-r.Context().Done():
			return
		case <-time.After(latency):
		}
	}
	data := make([]map[string]any, len(seeds))
	for i, seed := range seeds {
		v := vectorOf(seed, dims)
		var e any = v
		if format == "base64" {
			buf := make([]byte, 4*len(v))
			for j, x := range v {
				binary.LittleEndian.PutUint32(buf[4*j:], math.Float32bits(x))
			}
			e = base64.StdEncoding.EncodeToString(buf)
		}
		data[i] = map[string]any{"object": "embedding", "index": i, "embedding": e}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data, "model": m.Name,
		"usage": map[string]any{"prompt_tokens": total, "total_tokens": total}})
}

// vectorOf is a deterministic unit vector of n dimensions from seed.
func vectorOf(seed [32]byte, n int) []float32 {
	x := binary.LittleEndian.Uint64(seed[:8])
	v := make([]float32, n)
	var norm float64
	for i := range v {
		x += 0x9e3779b97f4a7c15 // splitmix64
		z := x
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		z ^= z >> 31
		f := float64(z)/float64(math.MaxUint64)*2 - 1
		v[i] = float32(f)
		norm += f * f
	}
	norm = math.Sqrt(norm)
	for i := range v {
		v[i] = float32(float64(v[i]) / norm)
	}
	return v
}
