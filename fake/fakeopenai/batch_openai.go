package fakeopenai

// OpenAI's Batch API and the part of its Files API batches use, as
// OpenAI's "Batch API" guide and API reference describe them and as
// users report the real service behaving (github.com/openai/openai-python
// #2084, openai/openai-openapi#302, BerriAI/litellm#37527, #37146):
//   - POST /v1/files, multipart: purpose (required; batch among the
//     documented ones) and file; a batch file must be named .jsonl (400
//     "Invalid file format for Batch API. Must be .jsonl") and hold at
//     most 200 MB; its lines are not checked until a batch uses it. GET
//     /v1/files/{id} and /v1/files/{id}/content, DELETE /v1/files/{id};
//     an unknown id is 404;
//   - POST /v1/batches {input_file_id, endpoint, completion_window "24h",
//     metadata}: a missing parameter is 400 missing_required_parameter,
//     a bad value 400 invalid_value, an input file not found or not of
//     purpose batch 400. The batch is created "validating"; then its
//     lines are checked (each {custom_id, method POST, url = endpoint,
//     body}; custom_ids unique; one model; at most 50,000) and the model's
//     enqueued-token limit, and it fails (status failed, errors.data[]
//     {code, message, param, line}: invalid_json_line, duplicate_custom_id,
//     url_mismatch, model_mismatch, empty_file, too_many_tasks,
//     token_limit_exceeded with "Enqueued token limit reached for …") or
//     goes in_progress;
//   - a request whose body the chat completions API refuses is answered
//     as that API answers it: its status and error object, in the error
//     file (context_length_exceeded as openai-openapi#302 shows);
//   - output_file_id holds the 200s, error_file_id the rest and the
//     requests never run (error {code: batch_expired} when the batch
//     expired); request_counts {total, completed, failed} count answers;
//   - POST /v1/batches/{id}/cancel: cancelling, then cancelled.
// Not confirmed from OpenAI's documents, and chosen here: the code of a
// line missing custom_id, method, url or body (missing_required_parameter),
// of an unknown model (model_not_found, at validation), and the error
// lines of a cancelled batch's unrun requests (batch_cancelled, not
// counted as failed, as a cancelled batch's counts are reported);
// cancelling a batch that is over is 400. The fake serves chat
// completions batches only; a batch of another documented endpoint is
// refused (400).
// Azure OpenAI's dialect: /openai/files and /openai/batches with
// ?api-version= and the api-key header, endpoint and line url
// "/chat/completions", a line's model a deployment (Config.Deployments),
// errors {"error": {"code", "message"}}.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"time"
)

// OpenAI's limits of batch files.
const (
	batchFileBytes = 200 << 20
	batchLines     = 50000
)

// lineError is an entry of a failed batch's errors.data.
type lineError struct {
	Code    string  `json:"code"`
	Message string  `json:"message"`
	Param   *string `json:"param"`
	Line    *int    `json:"line"`
}

// filePurposes are the purposes OpenAI's Files API documents.
var filePurposes = map[string]bool{"assistants": true, "batch": true, "fine-tune": true, "vision": true, "user_data": true, "evals": true}

// batchEndpoints are the endpoints OpenAI's batches document.
var batchEndpoints = []string{"/v1/responses", "/v1/chat/completions", "/v1/embeddings", "/v1/completions", "/v1/moderations"}

// openaiError writes an error in the dialect's shape.
func openaiError(w http.ResponseWriter, dialect string, status int, typ, code, param, msg string) {
	if dialect == dialectAzure {
		if code == "" {
			code = strconv.Itoa(status)
		}
		writeAzureError(w, status, code, msg)
		return
	}
	writeParamError(w, status, typ, code, param, msg)
}

func (s *Server) openaiBatches(w http.ResponseWriter, r *http.Request, dialect, api, id, op string) {
	var key string
	if dialect == dialectAzure {
		key = r.Header.Get("api-key")
		if !s.keyOK(key) {
			writeAzureError(w, http.StatusUnauthorized, "401", "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource.")
			return
		}
		if r.URL.Query().Get("api-version") == "" {
			writeAzureError(w, http.StatusBadRequest, "BadRequest", "Missing API version parameter: api-version")
			return
		}
	} else {
		k, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || !s.keyOK(k) {
			writeError(w, http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", "Incorrect API key provided.")
			return
		}
		key = k
	}
	route := r.Method + " " + api
	if id != "" {
		route += "/{id}"
	}
	if op != "" {
		route += "/" + op
	}
	switch route {
	case "POST files":
		s.uploadFile(w, r, dialect, key)
	case "GET files/{id}", "GET files/{id}/content":
		s.getFile(w, dialect, key, id, op == "content")
	case "DELETE files/{id}":
		s.deleteFile(w, dialect, key, id)
	case "POST batches":
		s.createBatch(w, r, dialect, key)
	case "GET batches/{id}", "POST batches/{id}/cancel":
		s.getBatch(w, dialect, key, id, op == "cancel")
	default:
		openaiError(w, dialect, http.StatusNotFound, "invalid_request_error", "unknown_url", "", fmt.Sprintf("Unknown request URL: %s %s.", r.Method, r.URL.Path))
	}
}

func fileObject(f *storedFile) map[string]any {
	return map[string]any{"id": f.id, "object": "file", "bytes": len(f.data), "created_at": f.created.Unix(), "filename": f.name,
		"purpose": f.purpose, "status": "processed", "status_details": nil, "expires_at": nil}
}

// uploadFile serves POST /v1/files.
func (s *Server) uploadFile(w http.ResponseWriter, r *http.Request, dialect, key string) {
	r.Body = http.MaxBytesReader(w, r.Body, batchFileBytes+1<<20)
	if err := r.ParseMultipartForm(32 << 20); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			openaiError(w, dialect, http.StatusRequestEntityTooLarge, "invalid_request_error", "", "", "The file is too large: files may be at most 200 MB.")
			return
		}
		openaiError(w, dialect, http.StatusBadRequest, "invalid_request_error", "", "", "Could not parse multipart form: "+err.Error())
		return
	}
	defer r.MultipartForm.RemoveAll()
	purpose := r.FormValue("purpose")
	switch {
	case purpose == "":
		openaiError(w, dialect, http.StatusBadRequest, "invalid_request_error", "missing_required_parameter", "purpose", "Missing required parameter: 'purpose'.")
		return
	case !filePurposes[purpose]:
		openaiError(w, dialect, http.StatusBadRequest, "invalid_request_error", "invalid_value", "purpose",
			fmt.Sprintf("Invalid value: '%s'. Supported values are: 'assistants', 'batch', 'fine-tune', 'vision', 'user_data' and 'evals'.", purpose))
		return
	}
	file, hdr, err := r.FormFile("file")
	if err != nil {
		openaiError(w, dialect, http.StatusBadRequest, "invalid_request_error", "missing_required_parameter", "file", "Missing required parameter: 'file'.")
		return
	}
	defer file.Close()
	data, err := io.ReadAll(io.LimitReader(file, batchFileBytes+1))
	if err != nil {
		openaiError(w, dialect, http.StatusBadRequest, "invalid_request_error", "", "", "Could not read the file.")
		return
	}
	if purpose == "batch" && !strings.HasSuffix(hdr.Filename, ".jsonl") {
		openaiError(w, dialect, http.StatusBadRequest, "invalid_request_error", "", "", "Invalid file format for Batch API. Must be .jsonl")
		return
	}
	if purpose == "batch" && len(data) > batchFileBytes {
		openaiError(w, dialect, http.StatusBadRequest, "invalid_request_error", "", "", "The file is too large for the Batch API: at most 200 MB.")
		return
	}
	st := &s.batches
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.bytes+int64(len(data)) > fileStoreBytes {
		openaiError(w, dialect, http.StatusBadRequest, "invalid_request_error", "", "", "The fake's file storage is full (1 GiB): files are kept in memory.")
		return
	}
	f := st.addFile(key, hdr.Filename, purpose, data, s.cfg.Now())
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(fileObject(f))
}

// addFile stores a file. Caller holds the store's lock.
func (st *batchStore) addFile(key, name, purpose string, data []byte, now time.Time) *storedFile {
	if st.files == nil {
		st.files = map[string]*storedFile{}
	}
	f := &storedFile{id: st.nextID("file-fake"), key: key, name: name, purpose: purpose, created: now, data: data}
	st.files[f.id] = f
	st.bytes += int64(len(data))
	return f
}

// getFile serves GET /v1/files/{id}[/content].
func (s *Server) getFile(w http.ResponseWriter, dialect, key, id string, content bool) {
	st := &s.batches
	st.mu.Lock()
	f, ok := st.files[id]
	st.mu.Unlock()
	if !ok || f.key != key {
		openaiError(w, dialect, http.StatusNotFound, "invalid_request_error", "", "id", "No such File object: "+id)
		return
	}
	if content {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(f.data)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(fileObject(f))
}

// deleteFile serves DELETE /v1/files/{id}.
func (s *Server) deleteFile(w http.ResponseWriter, dialect, key, id string) {
	st := &s.batches
	st.mu.Lock()
	f, ok := st.files[id]
	if ok && f.key == key {
		delete(st.files, id)
		st.bytes -= int64(len(f.data))
	}
	st.mu.Unlock()
	if !ok || f.key != key {
		openaiError(w, dialect, http.StatusNotFound, "invalid_request_error", "", "id", "No such File object: "+id)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"id": id, "object": "file", "deleted": true})
}

// createBatch serves POST /v1/batches.
func (s *Server) createBatch(w http.ResponseWriter, r *http.Request, dialect, key string) {
	var req struct {
		InputFileID      *string        `json:"input_file_id"`
		Endpoint         *string        `json:"endpoint"`
		CompletionWindow *string        `json:"completion_window"`
		Metadata         map[string]any `json:"metadata"`
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil || json.Unmarshal(body, &req) != nil {
		openaiError(w, dialect, http.StatusBadRequest, "invalid_request_error", "", "", "We could not parse the JSON body of your request.")
		return
	}
	for _, p := range []struct {
		name string
		v    *string
	}{{"input_file_id", req.InputFileID}, {"endpoint", req.Endpoint}, {"completion_window", req.CompletionWindow}} {
		if p.v == nil {
			openaiError(w, dialect, http.StatusBadRequest, "invalid_request_error", "missing_required_parameter", p.name, fmt.Sprintf("Missing required parameter: '%s'.", p.name))
			return
		}
	}
	endpoint, chat := *req.Endpoint, "/v1/chat/completions"
	if dialect == dialectAzure && endpoint == "/chat/completions" {
		chat = endpoint
	}
	switch {
	case !contains(batchEndpoints, endpoint) && endpoint != chat:
		openaiError(w, dialect, http.StatusBadRequest, "invalid_request_error", "invalid_value", "endpoint",
			fmt.Sprintf("Invalid value: '%s'. Supported values are: '%s'.", endpoint, strings.Join(batchEndpoints, "', '")))
		return
	case endpoint != chat:
		openaiError(w, dialect, http.StatusBadRequest, "invalid_request_error", "invalid_value", "endpoint",
			fmt.Sprintf("The fake serves %s batches only, not %s.", chat, endpoint))
		return
	case *req.CompletionWindow != "24h":
		openaiError(w, dialect, http.StatusBadRequest, "invalid_request_error", "invalid_value", "completion_window",
			fmt.Sprintf("Invalid value: '%s'. Supported values are: '24h'.", *req.CompletionWindow))
		return
	}
	meta := map[string]string{}
	for k, v := range req.Metadata {
		sv, ok := v.(string)
		if !ok || len(req.Metadata) > 16 || len(k) > 64 || len(sv) > 512 {
			openaiError(w, dialect, http.StatusBadRequest, "invalid_request_error", "invalid_value", "metadata",
				"Invalid 'metadata': at most 16 pairs of string keys of at most 64 characters and string values of at most 512.")
			return
		}
		meta[k] = sv
	}
	st := &s.batches
	st.mu.Lock()
	defer st.mu.Unlock()
	f, ok := st.files[*req.InputFileID]
	if !ok || f.key != key {
		openaiError(w, dialect, http.StatusBadRequest, "invalid_request_error", "", "file_id",
			fmt.Sprintf("Cannot find file %s, or project does not have access to it.", *req.InputFileID))
		return
	}
	if f.purpose != "batch" {
		openaiError(w, dialect, http.StatusBadRequest, "invalid_request_error", "invalid_value", "input_file_id",
			fmt.Sprintf("The input file %s has purpose '%s': a batch's input file must be uploaded with purpose 'batch'.", f.id, f.purpose))
		return
	}
	now := s.cfg.Now()
	b := &fakeBatch{id: st.nextID("batch_fake"), key: key, dialect: dialect, created: now, expires: now.Add(s.batchWindow()),
		state: stateInProgress, endpoint: endpoint, inputFile: f.id, metadata: meta}
	s.validateBatch(b, f.data, chat)
	if st.batches == nil {
		st.batches = map[string]*fakeBatch{}
	}
	st.batches[b.id] = b
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(s.openaiBatchObject(b, "validating"))
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// validateBatch checks a new batch's lines and queue, failing it or
// scheduling its requests; it is not yet in the store. Caller holds the
// store's lock.
func (s *Server) validateBatch(b *fakeBatch, data []byte, url string) {
	b.reqs, b.model, b.errors = s.batchLines(data, b.dialect, url)
	for _, r := range b.reqs {
		b.tokens += r.tokens
	}
	fail := func(e ...lineError) {
		b.state, b.ended, b.errors, b.reqs = stateFailed, b.created, e, nil
	}
	m := s.models[b.model]
	var used int64
	s.pendingBatches(b.key, b.created, func(o *fakeBatch) {
		if o.model == b.model && o.dialect != dialectAnthropic {
			used += o.tokens
		}
	})
	s.mu.Lock()
	serverFail := s.faults.BatchFail > 0 && s.rng.Float64() < s.faults.BatchFail
	s.mu.Unlock()
	switch {
	case len(b.errors) > 0:
		fail(b.errors...)
	case m.BatchTokens > 0 && used+b.tokens > m.BatchTokens:
		fail(lineError{Code: "token_limit_exceeded", Message: fmt.Sprintf("Enqueued token limit reached for %s in organization org-fake. Limit: %s enqueued tokens. Please try again once some in_progress batches have been completed.",
			b.model, thousands(m.BatchTokens))})
	case serverFail:
		fail(lineError{Code: "server_error", Message: "The batch could not be processed because of an error on our side. Please try again."})
	default:
		s.schedule(b, []string{b.model})
		b.fail = false // BatchFail is validation's here
	}
	s.countBatch(b, func(st *BatchStats) {
		st.Submitted++
		if b.state == stateFailed {
			st.Failed++
			if b.errors[0].Code == "token_limit_exceeded" {
				st.QueueFull++
			}
		}
	})
}

// thousands writes n with commas, as OpenAI's limit messages do.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// batchLines reads a batch input file's lines into requests, or the
// errors that fail it.
func (s *Server) batchLines(data []byte, dialect, url string) (reqs []*batchReq, model string, errs []lineError) {
	bad := func(line int, code, param, msg string) {
		if len(errs) < 100 {
			e := lineError{Code: code, Message: msg, Line: &line}
			if param != "" {
				e.Param = &param
			}
			errs = append(errs, e)
		}
	}
	seen := map[string]bool{}
	n := 0
	for i, raw := range bytes.Split(data, []byte("\n")) {
		line := i + 1
		if raw = bytes.TrimSpace(raw); len(raw) == 0 {
			continue
		}
		if n++; n > batchLines {
			errs = append(errs, lineError{Code: "too_many_tasks", Message: fmt.Sprintf("The batch input file holds more than the maximum of %d requests.", batchLines)})
			return nil, model, errs
		}
		var obj map[string]json.RawMessage
		if json.Unmarshal(raw, &obj) != nil {
			bad(line, "invalid_json_line", "", "This line is not parseable as valid JSON.")
			continue
		}
		str := func(name string) (string, bool) {
			var v string
			err := json.Unmarshal(obj[name], &v)
			return v, err == nil && v != ""
		}
		id, ok := str("custom_id")
		if !ok {
			bad(line, "missing_required_parameter", "custom_id", "Missing required parameter: 'custom_id'.")
			continue
		}
		if seen[id] {
			bad(line, "duplicate_custom_id", "custom_id", fmt.Sprintf("The custom_id '%s' appears more than once in the batch: each request needs a unique custom_id.", id))
			continue
		}
		seen[id] = true
		if method, ok := str("method"); !ok {
			bad(line, "missing_required_parameter", "method", "Missing required parameter: 'method'.")
			continue
		} else if method != http.MethodPost {
			bad(line, "invalid_value", "method", fmt.Sprintf("Invalid value: '%s'. Supported values are: 'POST'.", method))
			continue
		}
		if u, ok := str("url"); !ok {
			bad(line, "missing_required_parameter", "url", "Missing required parameter: 'url'.")
			continue
		} else if u != url {
			bad(line, "url_mismatch", "url", fmt.Sprintf("The url '%s' of this request does not match the batch's endpoint '%s'.", u, url))
			continue
		}
		var body struct {
			Model    *string         `json:"model"`
			Messages json.RawMessage `json:"messages"`
		}
		if len(bytes.TrimSpace(obj["body"])) == 0 || obj["body"][0] != '{' || json.Unmarshal(obj["body"], &body) != nil {
			bad(line, "missing_required_parameter", "body", "Missing required parameter: 'body' (an object).")
			continue
		}
		if body.Model == nil || *body.Model == "" {
			bad(line, "missing_required_parameter", "body.model", "Missing required parameter: 'body.model'.")
			continue
		}
		name := *body.Model
		if dialect == dialectAzure { // a line names a deployment
			if d, ok := s.cfg.Deployments[name]; ok {
				name = d
			} else if len(s.cfg.Deployments) > 0 {
				name = ""
			}
		}
		if model == "" {
			model = name
		}
		if _, ok := s.models[name]; !ok || name == "" {
			bad(line, "model_not_found", "body.model", fmt.Sprintf("The model `%s` does not exist or you do not have access to it.", *body.Model))
			continue
		}
		if name != model {
			bad(line, "model_mismatch", "body.model", fmt.Sprintf("The model '%s' differs from the batch's model '%s': a batch holds one model's requests.", *body.Model, model))
			continue
		}
		reqs = append(reqs, &batchReq{customID: id, model: name, body: obj["body"], tokens: s.promptTokens(body.Messages)})
	}
	if n == 0 {
		errs = append(errs, lineError{Code: "empty_file", Message: "The batch input file is empty."})
	}
	return reqs, model, errs
}

// promptTokens counts a chat completion's prompt as completions does
// (3, and each message's tokens and 4); 0 for messages it cannot read.
func (s *Server) promptTokens(messages json.RawMessage) int64 {
	var ms []struct {
		Content string `json:"content"`
	}
	if json.Unmarshal(messages, &ms) != nil {
		return 0
	}
	n := int64(3)
	for _, m := range ms {
		k, _ := s.codec.Count(m.Content)
		n += int64(k) + 4
	}
	return n
}

// errorBody is OpenAI's error object as a response body.
func errorBody(typ, code, param, msg string) []byte {
	var c, p any
	if code != "" {
		c = code
	}
	if param != "" {
		p = param
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": p, "code": c}})
	return b
}

// batchChat answers one chat completion of a batch as completions
// answers it (its checks, the fake model, usage and the prompt cache),
// without the synchronous limits, faults and latency: fault answers a
// server error instead.
func (s *Server) batchChat(r *batchReq, fault bool) (int, []byte) {
	if fault {
		return http.StatusInternalServerError, errorBody("server_error", "", "", "The server had an error while processing your request. Sorry about that!")
	}
	var req chatRequest
	if err := json.Unmarshal(r.body, &req); err != nil {
		return http.StatusBadRequest, errorBody("invalid_request_error", "", "", "We could not parse the JSON body of your request.")
	}
	req.Model = r.model // Azure: the deployment's
	if msg := unrecognizedArgument(r.body); msg != "" {
		return http.StatusBadRequest, errorBody("invalid_request_error", "", "", msg)
	}
	n, msg := choiceCount(r.body)
	if msg != "" {
		return http.StatusBadRequest, errorBody("invalid_request_error", "", "", msg)
	}
	m := s.models[r.model]
	switch {
	case len(req.Messages) == 0:
		msg = "'messages' must contain at least one message."
	case checkFormat(req) != "":
		msg = checkFormat(req)
	case req.Stream:
		msg = "The 'stream' parameter is not supported in the Batch API."
	case req.StreamOptions != nil:
		msg = "The 'stream_options' parameter is only allowed when 'stream' is enabled."
	case req.MaxTokens != nil && req.MaxCompletionTokens != nil:
		msg = "max_tokens and max_completion_tokens cannot both be set."
	}
	if msg != "" {
		return http.StatusBadRequest, errorBody("invalid_request_error", "", "", msg)
	}
	switch req.ServiceTier {
	case "", "auto", "default", "priority":
		req.ServiceTier = "default"
	case "flex":
		if !m.Flex {
			return http.StatusBadRequest, errorBody("invalid_request_error", "invalid_value", "service_tier",
				fmt.Sprintf("Invalid value for 'service_tier': flex processing is not available for model %s.", m.Name))
		}
	default:
		return http.StatusBadRequest, errorBody("invalid_request_error", "invalid_value", "service_tier",
			fmt.Sprintf("Invalid value for 'service_tier': %q. Supported values are: 'auto', 'default', 'flex' and 'priority'.", req.ServiceTier))
	}
	maxOut := int64(DefaultMaxOutput)
	if req.MaxTokens != nil {
		maxOut = *req.MaxTokens
	} else if req.MaxCompletionTokens != nil {
		maxOut = *req.MaxCompletionTokens
	}
	if maxOut < 1 {
		return http.StatusBadRequest, errorBody("invalid_request_error", "integer_below_min_value", "", "max_tokens must be at least 1.")
	}
	prompt := int64(3)
	for _, msg := range req.Messages {
		k, _ := s.codec.Count(msg.Content)
		prompt += int64(k) + 4
	}
	if prompt+maxOut > m.ContextTokens && prompt > m.ContextTokens-1 {
		return http.StatusBadRequest, errorBody("invalid_request_error", "context_length_exceeded", "messages",
			fmt.Sprintf("This model's maximum context length is %d tokens. However, your messages resulted in %d tokens. Please reduce the length of the messages.", m.ContextTokens, prompt))
	}
	// The prompt cache at the request's time on the fake's clock (a
	// later synchronous call of the same prefix may have been cached
	// since: this rewinds its last use to the request's time).
	prefixes := s.prefixHashes(m.Name, &req, prompt)
	s.mu.Lock()
	st := s.statsOf(m.Name)
	format := "none"
	if req.ResponseFormat != nil {
		format = req.ResponseFormat.Type
	}
	st.formats[format]++
	cached := s.promptCache(prefixes, r.at)
	st.CachedTokens += cached
	s.mu.Unlock()
	var out []byte
	var completion int64
	if call, ok := forcedTool(r.body); ok { // tools.go
		rec := httptest.NewRecorder()
		completion = s.replyToolCall(rec, nil, m.Name, r.at, call, usageOf(prompt, cached), false, false)
		out = bytes.TrimSpace(rec.Body.Bytes())
	} else {
		text, finish := s.answer(req)
		if s.cfg.Verbose && finish == "stop" {
			text = s.lengthen(text, maxOut)
		}
		toks, _, _ := s.codec.Encode(text)
		if int64(len(toks)) > maxOut {
			text, _ = s.codec.Decode(toks[:maxOut])
			toks = toks[:maxOut]
			finish = "length"
		}
		completion = n * int64(len(toks))
		out, _ = json.Marshal(map[string]any{
			"id": fmt.Sprintf("chatcmpl-fake%d", r.at.UnixNano()), "object": "chat.completion", "created": r.at.Unix(), "model": m.Name,
			"choices": choices(n, text, finish), "usage": usageOf(prompt, cached).with(completion), "service_tier": req.ServiceTier,
		})
	}
	s.countAnswer(r, req, m.Name, http.StatusOK, completion)
	s.mu.Lock()
	s.statsOf(m.Name).billed(LaneBatch, prompt, cached, 0, completion)
	s.mu.Unlock()
	return http.StatusOK, out
}

// countAnswer counts a batch request answered whole as a synchronous one is
// counted (Answered, Repeats, the completion tokens) and records it as a
// Call (Config.Record) marked Batch.
func (s *Server) countAnswer(r *batchReq, req chatRequest, model string, status int, completion int64) {
	h := promptHash(model, req)
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.statsOf(model)
	st.CompletionToks += completion
	st.Answered++
	if s.answered[h] {
		st.Repeats++
	}
	s.answered[h] = true
	if s.cfg.Record {
		c := callOf(req, model, r.at)
		c.Batch, c.Status, c.Complete = true, status, true
		s.calls = append(s.calls, c)
	}
}

// writeOutputFiles writes an ended batch's output file (its 200s) and
// error file (its other answers and the requests it never ran). Caller
// holds the store's lock.
func (s *Server) writeOutputFiles(b *fakeBatch) {
	var out, errs bytes.Buffer
	st := &s.batches
	for _, r := range b.reqs {
		line := map[string]any{"id": st.nextID("batch_req_fake"), "custom_id": r.customID, "response": nil, "error": nil}
		switch {
		case r.answered:
			line["response"] = map[string]any{"status_code": r.status, "request_id": fmt.Sprintf("req_fake%d", st.seq), "body": json.RawMessage(r.result)}
		case r.final == stateExpired:
			line["error"] = map[string]any{"code": "batch_expired", "message": "This request could not be executed before the completion window expired."}
		default:
			line["error"] = map[string]any{"code": "batch_cancelled", "message": "This request was not executed because the batch was cancelled."}
		}
		enc, _ := json.Marshal(line)
		if r.answered && r.status == http.StatusOK {
			out.Write(enc)
			out.WriteByte('\n')
		} else {
			errs.Write(enc)
			errs.WriteByte('\n')
		}
	}
	if out.Len() > 0 {
		b.output = st.addFile(b.key, "batch_"+b.id+"_output.jsonl", "batch_output", out.Bytes(), b.ended).id
	}
	if errs.Len() > 0 {
		b.errorFile = st.addFile(b.key, "batch_"+b.id+"_error.jsonl", "batch_output", errs.Bytes(), b.ended).id
	}
}

// getBatch serves GET /v1/batches/{id} and POST .../cancel.
func (s *Server) getBatch(w http.ResponseWriter, dialect, key, id string, cancel bool) {
	st := &s.batches
	st.mu.Lock()
	defer st.mu.Unlock()
	b, ok := st.batches[id]
	if !ok || b.key != key || b.dialect == dialectAnthropic {
		openaiError(w, dialect, http.StatusNotFound, "invalid_request_error", "", "batch_id", "No batch found with id '"+id+"'.")
		return
	}
	now := s.cfg.Now()
	s.advance(b, now)
	status := ""
	if cancel {
		if b.over() && b.state != stateCancelled {
			openaiError(w, dialect, http.StatusBadRequest, "invalid_request_error", "", "",
				fmt.Sprintf("Cannot cancel a batch with status '%s'.", b.state))
			return
		}
		if !b.over() {
			cancelBatch(b, now)
			status = "cancelling" // as OpenAI answers a cancel, however soon it is done
		}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(s.openaiBatchObject(b, status))
}

// openaiBatchObject is a batch as OpenAI reports it; status, if not "",
// is the status to report.
func (s *Server) openaiBatchObject(b *fakeBatch, status string) map[string]any {
	unix := func(t time.Time) any {
		if t.IsZero() {
			return nil
		}
		return t.Unix()
	}
	orNil := func(id string) any {
		if id == "" {
			return nil
		}
		return id
	}
	if status == "" {
		status = b.state
		if status == stateInProgress && !b.cancelled.IsZero() {
			status = "cancelling"
		}
	}
	var completed, failed int
	for _, r := range b.reqs {
		switch {
		case r.answered && r.status == http.StatusOK:
			completed++
		case r.answered:
			failed++
		}
	}
	obj := map[string]any{"id": b.id, "object": "batch", "endpoint": b.endpoint, "model": b.model, "errors": nil,
		"input_file_id": b.inputFile, "completion_window": "24h", "status": status,
		"output_file_id": orNil(b.output), "error_file_id": orNil(b.errorFile),
		"created_at": b.created.Unix(), "in_progress_at": nil, "expires_at": b.expires.Unix(), "finalizing_at": nil,
		"completed_at": nil, "failed_at": nil, "expired_at": nil, "cancelling_at": unix(b.cancelled), "cancelled_at": nil,
		"request_counts": map[string]any{"total": len(b.reqs), "completed": completed, "failed": failed}, "metadata": b.metadata}
	if status == "validating" { // nothing counted before validation
		obj["request_counts"] = map[string]any{"total": 0, "completed": 0, "failed": 0}
	}
	if len(b.metadata) == 0 {
		obj["metadata"] = nil
	}
	if status != "validating" && b.state != stateFailed {
		obj["in_progress_at"] = b.created.Unix()
	}
	switch b.state {
	case stateFailed:
		obj["failed_at"] = b.ended.Unix()
		obj["errors"] = map[string]any{"object": "list", "data": b.errors}
	case stateCompleted:
		obj["finalizing_at"], obj["completed_at"] = b.ended.Unix(), b.ended.Unix()
	case stateExpired:
		obj["expired_at"] = b.ended.Unix()
	case stateCancelled:
		obj["cancelled_at"] = b.ended.Unix()
	}
	return obj
}
