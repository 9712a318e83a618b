package fakeopenai_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prq-dev/prq/fake/fakeopenai"
)

// batchClock is a stepped clock for the fake.
type batchClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *batchClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *batchClock) Step(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newBatchFake(t testing.TB) (*fakeopenai.Server, *httptest.Server, *batchClock) {
	clk := &batchClock{t: time.Date(2026, 6, 1, 9, 0, 0, 0, time.UTC)}
	fake := fakeopenai.New(fakeopenai.Config{Models: []fakeopenai.Model{{Name: "gpt-4o-mini", RPM: 10, TPM: 10000, BatchLatency: time.Minute},
		{Name: "gpt-4o", RPM: 10, TPM: 10000}, {Name: "claude", RPM: 10, TPM: 10000, BatchLatency: time.Minute}},
		Period: time.Minute, Keys: []string{"sk-a", "sk-b"}, Now: clk.Now})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	return fake, srv, clk
}

// upload posts a file to /v1/files as go-openai does (multipart).
func upload(t testing.TB, url, key, name, purpose string, data []byte) (int, map[string]any) {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	if purpose != "" {
		mw.WriteField("purpose", purpose)
	}
	if name != "" {
		fw, _ := mw.CreateFormFile("file", name)
		fw.Write(data)
	}
	mw.Close()
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/files", &body)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("Authorization", "Bearer "+key)
	return do(t, req)
}

func do(t testing.TB, req *http.Request) (int, map[string]any) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%d: body is not JSON: %s", resp.StatusCode, b)
	}
	return resp.StatusCode, out
}

func get(t testing.TB, url string, h map[string]string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func errorField(body map[string]any, field string) string {
	e, _ := body["error"].(map[string]any)
	s, _ := e[field].(string)
	return s
}

// chatLine is a batch input line of a chat completion.
func chatLine(id, model string) string {
	return fmt.Sprintf(`{"custom_id":%q,"method":"POST","url":"/v1/chat/completions","body":{"model":%q,"messages":[{"role":"user","content":"File: a.go\n   1 +x := 1"}],"max_tokens":50}}`, id, model)
}

// TestBatchFilesAndCreate: the Files API and batch creation refuse as
// OpenAI does: purpose required and known, a batch file named .jsonl,
// create's required parameters, its endpoint and window, an input file
// not found (or another key's) or not of purpose batch.
func TestBatchFilesAndCreate(t *testing.T) {
	_, srv, _ := newBatchFake(t)
	line := []byte(chatLine("a", "gpt-4o-mini"))
	if code, body := upload(t, srv.URL, "sk-a", "in.jsonl", "", line); code != 400 || errorField(body, "code") != "missing_required_parameter" || errorField(body, "param") != "purpose" {
		t.Fatalf("no purpose: %d %v", code, body)
	}
	if code, body := upload(t, srv.URL, "sk-a", "in.jsonl", "batches", line); code != 400 || errorField(body, "code") != "invalid_value" {
		t.Fatalf("unknown purpose: %d %v", code, body)
	}
	if code, body := upload(t, srv.URL, "sk-a", "in.txt", "batch", line); code != 400 || errorField(body, "message") != "Invalid file format for Batch API. Must be .jsonl" {
		t.Fatalf("not .jsonl: %d %v", code, body)
	}
	if code, body := upload(t, srv.URL, "sk-a", "", "batch", nil); code != 400 || errorField(body, "param") != "file" {
		t.Fatalf("no file: %d %v", code, body)
	}
	if code, body := upload(t, srv.URL, "sk-bad", "in.jsonl", "batch", line); code != 401 || errorField(body, "code") != "invalid_api_key" {
		t.Fatalf("bad key: %d %v", code, body)
	}
	code, file := upload(t, srv.URL, "sk-a", "in.jsonl", "batch", line)
	if code != 200 || file["object"] != "file" || file["purpose"] != "batch" || file["bytes"].(float64) != float64(len(line)) {
		t.Fatalf("upload: %d %v", code, file)
	}
	id := file["id"].(string)
	if code, content := get(t, srv.URL+"/v1/files/"+id+"/content", map[string]string{"Authorization": "Bearer sk-a"}); code != 200 || !bytes.Equal(content, line) {
		t.Fatalf("content: %d %s", code, content)
	}
	if code, _ := get(t, srv.URL+"/v1/files/"+id, map[string]string{"Authorization": "Bearer sk-b"}); code != 404 {
		t.Fatalf("another key's file: %d", code)
	}
	_, tuning := upload(t, srv.URL, "sk-a", "tune.jsonl", "fine-tune", line)
	create := func(key, body string) (int, map[string]any) {
		h := map[string]string{"Authorization": "Bearer " + key}
		resp, out := post(t, srv.URL+"/v1/batches", h, body)
		return resp.StatusCode, out
	}
	for _, tc := range []struct {
		name, key, body string
		code, param     string
	}{
		{"no input file", "sk-a", `{"endpoint":"/v1/chat/completions","completion_window":"24h"}`, "missing_required_parameter", "input_file_id"},
		{"no endpoint", "sk-a", `{"input_file_id":"` + id + `","completion_window":"24h"}`, "missing_required_parameter", "endpoint"},
		{"no window", "sk-a", `{"input_file_id":"` + id + `","endpoint":"/v1/chat/completions"}`, "missing_required_parameter", "completion_window"},
		{"unknown endpoint", "sk-a", `{"input_file_id":"` + id + `","endpoint":"/v1/chat","completion_window":"24h"}`, "invalid_value", "endpoint"},
		{"window", "sk-a", `{"input_file_id":"` + id + `","endpoint":"/v1/chat/completions","completion_window":"1h"}`, "invalid_value", "completion_window"},
		{"file not found", "sk-a", `{"input_file_id":"file-nope","endpoint":"/v1/chat/completions","completion_window":"24h"}`, "", "file_id"},
		{"another key's file", "sk-b", `{"input_file_id":"` + id + `","endpoint":"/v1/chat/completions","completion_window":"24h"}`, "", "file_id"},
		{"purpose fine-tune", "sk-a", `{"input_file_id":"` + tuning["id"].(string) + `","endpoint":"/v1/chat/completions","completion_window":"24h"}`, "invalid_value", "input_file_id"},
		{"not JSON", "sk-a", `{"input_file_id":`, "", ""},
	} {
		code, body := create(tc.key, tc.body)
		if code != 400 || errorField(body, "type") != "invalid_request_error" || errorField(body, "code") != tc.code || errorField(body, "param") != tc.param {
			t.Errorf("%s: %d %v, want 400 code %q param %q", tc.name, code, body, tc.code, tc.param)
		}
	}
	code, b := create("sk-a", `{"input_file_id":"`+id+`","endpoint":"/v1/chat/completions","completion_window":"24h","metadata":{"pr":"7"}}`)
	if code != 200 || b["object"] != "batch" || b["status"] != "validating" || b["metadata"].(map[string]any)["pr"] != "7" {
		t.Fatalf("create: %d %v", code, b)
	}
	if code, _ := get(t, srv.URL+"/v1/batches/"+b["id"].(string), map[string]string{"Authorization": "Bearer sk-b"}); code != 404 {
		t.Fatalf("another key's batch: %d", code)
	}
	del := func(key string) (int, map[string]any) {
		req, _ := http.NewRequest(http.MethodDelete, srv.URL+"/v1/files/"+id, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		return do(t, req)
	}
	if code, body := del("sk-b"); code != 404 {
		t.Fatalf("delete another key's file: %d %v", code, body)
	}
	if code, body := del("sk-a"); code != 200 || body["deleted"] != true {
		t.Fatalf("delete: %d %v", code, body)
	}
	if code, _ := get(t, srv.URL+"/v1/files/"+id, map[string]string{"Authorization": "Bearer sk-a"}); code != 404 {
		t.Fatalf("a deleted file: %d", code)
	}
}

// TestBatchValidation: a batch whose input file OpenAI would not take
// is created, then fails validation with errors.data naming the code and
// line; it holds no requests and writes no files.
func TestBatchValidation(t *testing.T) {
	_, srv, _ := newBatchFake(t)
	ok := chatLine("a", "gpt-4o-mini")
	for _, tc := range []struct {
		name  string
		lines []string
		code  string
		line  int
	}{
		{"invalid JSON", []string{ok, `{"custom_id": "b",`}, "invalid_json_line", 2},
		{"no custom_id", []string{strings.Replace(ok, `"custom_id":"a",`, "", 1)}, "missing_required_parameter", 1},
		{"duplicate custom_id", []string{ok, chatLine("b", "gpt-4o-mini"), ok}, "duplicate_custom_id", 3},
		{"wrong url", []string{ok, strings.Replace(chatLine("b", "gpt-4o-mini"), "/v1/chat/completions", "/v1/embeddings", 1)}, "url_mismatch", 2},
		{"GET", []string{strings.Replace(ok, `"POST"`, `"GET"`, 1)}, "invalid_value", 1},
		{"two models", []string{ok, chatLine("b", "gpt-4o")}, "model_mismatch", 2},
		{"unknown model", []string{chatLine("a", "gpt-9")}, "model_not_found", 1},
		{"no body", []string{`{"custom_id":"a","method":"POST","url":"/v1/chat/completions"}`}, "missing_required_parameter", 1},
		{"empty", []string{"", "  "}, "empty_file", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, file := upload(t, srv.URL, "sk-a", "in.jsonl", "batch", []byte(strings.Join(tc.lines, "\n")))
			resp, b := post(t, srv.URL+"/v1/batches", map[string]string{"Authorization": "Bearer sk-a"},
				`{"input_file_id":"`+file["id"].(string)+`","endpoint":"/v1/chat/completions","completion_window":"24h"}`)
			if resp.StatusCode != 200 || b["status"] != "validating" {
				t.Fatalf("create: %d %v", resp.StatusCode, b)
			}
			code, raw := get(t, srv.URL+"/v1/batches/"+b["id"].(string), map[string]string{"Authorization": "Bearer sk-a"})
			var got struct {
				Status string `json:"status"`
				Errors struct {
					Data []struct {
						Code string `json:"code"`
						Line *int   `json:"line"`
					} `json:"data"`
				} `json:"errors"`
				Output *string `json:"output_file_id"`
				Counts struct {
					Total int `json:"total"`
				} `json:"request_counts"`
			}
			json.Unmarshal(raw, &got)
			if code != 200 || got.Status != "failed" || len(got.Errors.Data) == 0 || got.Errors.Data[0].Code != tc.code || got.Output != nil || got.Counts.Total != 0 {
				t.Fatalf("%d %s: want failed with %s", code, raw, tc.code)
			}
			if l := got.Errors.Data[0].Line; tc.line > 0 && (l == nil || *l != tc.line) {
				t.Fatalf("%s: want line %d", raw, tc.line)
			}
		})
	}
}

// TestMessageBatchRefusals: Anthropic's create refuses what its schema
// refuses (400 invalid_request_error), but a request whose params the
// Messages API would refuse ends as an errored result with that error;
// results before the batch ends are refused; another key sees no batch.
func TestMessageBatchRefusals(t *testing.T) {
	fake, srv, clk := newBatchFake(t)
	url := srv.URL + "/v1/messages/batches"
	h := map[string]string{"x-api-key": "sk-a", "anthropic-version": "2023-06-01"}
	params := `{"model":"claude","max_tokens":50,"messages":[{"role":"user","content":"File: a.go\n   1 +x := 1"}]}`
	for _, tc := range []struct{ name, body, want string }{
		{"not JSON", `{"requests":[`, "format or content"},
		{"no requests", `{}`, "requests: Field required"},
		{"none", `{"requests":[]}`, "at least 1 item"},
		{"no custom_id", `{"requests":[{"params":` + params + `}]}`, "requests.0.custom_id: Field required"},
		{"bad custom_id", `{"requests":[{"custom_id":"a.b","params":` + params + `}]}`, "should match pattern"},
		{"long custom_id", `{"requests":[{"custom_id":"` + strings.Repeat("a", 65) + `","params":` + params + `}]}`, "should match pattern"},
		{"duplicate custom_id", `{"requests":[{"custom_id":"a","params":` + params + `},{"custom_id":"a","params":` + params + `}]}`, "requests.1.custom_id"},
		{"no params", `{"requests":[{"custom_id":"a"}]}`, "requests.0.params: Field required"},
		{"params not an object", `{"requests":[{"custom_id":"a","params":[1]}]}`, "valid dictionary"},
	} {
		resp, body := post(t, url, h, tc.body)
		if resp.StatusCode != 400 || errorType(body) != "invalid_request_error" || !strings.Contains(errorField(body, "message"), tc.want) {
			t.Errorf("%s: %d %v, want 400 saying %q", tc.name, resp.StatusCode, body, tc.want)
		}
	}
	if resp, body := post(t, url, map[string]string{"x-api-key": "sk-a"}, `{}`); resp.StatusCode != 400 {
		t.Errorf("no anthropic-version: %d %v", resp.StatusCode, body)
	}
	if resp, body := post(t, url, map[string]string{"x-api-key": "nope", "anthropic-version": "2023-06-01"}, `{}`); resp.StatusCode != 401 || errorType(body) != "authentication_error" {
		t.Errorf("bad key: %d %v", resp.StatusCode, body)
	}
	bad := map[string]string{
		"no-max-tokens":   `{"model":"claude","messages":[{"role":"user","content":"hi"}]}`,
		"unknown-model":   `{"model":"claude-9","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`,
		"assistant-first": `{"model":"claude","max_tokens":10,"messages":[{"role":"assistant","content":"hi"}]}`,
		"stream":          `{"model":"claude","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"hi"}]}`,
		"bad-blocks":      `{"model":"claude","max_tokens":10,"messages":[{"role":"user","content":[{"type":"image"}]}]}`,
		"no-such-tool":    `{"model":"claude","max_tokens":10,"messages":[{"role":"user","content":"hi"}],"tool_choice":{"type":"tool","name":"x"}}`,
		"messages-number": `{"model":"claude","max_tokens":10,"messages":7}`,
	}
	var reqs []string
	for id, p := range bad {
		reqs = append(reqs, `{"custom_id":"`+id+`","params":`+p+`}`)
	}
	reqs = append(reqs, `{"custom_id":"good","params":`+params+`}`)
	resp, b := post(t, url, h, `{"requests":[`+strings.Join(reqs, ",")+`]}`)
	if resp.StatusCode != 200 || b["type"] != "message_batch" || b["processing_status"] != "in_progress" || b["results_url"] != nil {
		t.Fatalf("create: %d %v", resp.StatusCode, b)
	}
	id := b["id"].(string)
	if resp, body := post(t, url+"/"+id+"/results", h, ""); resp.StatusCode != 404 {
		t.Errorf("POST results: %d %v", resp.StatusCode, body)
	}
	if code, body := get(t, url+"/"+id+"/results", h); code != 400 {
		t.Errorf("results before the end: %d %s", code, body)
	}
	if code, _ := get(t, url+"/"+id, map[string]string{"x-api-key": "sk-b", "anthropic-version": "2023-06-01"}); code != 404 {
		t.Errorf("another key's batch: %d", code)
	}
	clk.Step(time.Minute)
	code, raw := get(t, url+"/"+id, h)
	var got struct {
		Status string         `json:"processing_status"`
		Counts map[string]int `json:"request_counts"`
		URL    string         `json:"results_url"`
	}
	json.Unmarshal(raw, &got)
	if code != 200 || got.Status != "ended" || got.Counts["succeeded"] != 1 || got.Counts["errored"] != len(bad) || got.URL == "" {
		t.Fatalf("ended: %d %s", code, raw)
	}
	code, results := get(t, url+"/"+id+"/results", h)
	if code != 200 {
		t.Fatalf("results: %d %s", code, results)
	}
	seen := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(results)), "\n") {
		var r struct {
			CustomID string `json:"custom_id"`
			Result   struct {
				Type  string `json:"type"`
				Error struct {
					Type  string `json:"type"`
					Error struct {
						Type string `json:"type"`
					} `json:"error"`
				} `json:"error"`
			} `json:"result"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		if _, dup := seen[r.CustomID]; dup {
			t.Fatalf("%s twice", r.CustomID)
		}
		seen[r.CustomID] = r.Result.Type + "/" + r.Result.Error.Error.Type
		if r.Result.Type == "errored" && r.Result.Error.Type != "error" {
			t.Fatalf("errored result %s: want an error response", line)
		}
	}
	want := "errored/invalid_request_error"
	for id := range bad {
		if w := map[string]string{"unknown-model": "errored/not_found_error"}[id]; w != "" && seen[id] != w || w == "" && seen[id] != want {
			t.Errorf("%s: %s", id, seen[id])
		}
	}
	if seen["good"] != "succeeded/" {
		t.Errorf("good: %s", seen["good"])
	}
	// every request of claude is answered, six with an error; the one
	// of an unknown model counts under none
	if st := fake.Stats()["claude"].Batch; st.Requests != 7 || st.Errors != 6 {
		t.Errorf("batch stats %+v", st)
	}
	if resp, body := post(t, url+"/"+id+"/cancel", h, ""); resp.StatusCode != 400 {
		t.Errorf("cancel an ended batch: %d %v", resp.StatusCode, body)
	}
}

// TestBatchFaultsOverAdmin: the batch faults are set over the admin
// endpoint like the others.
func TestBatchFaultsOverAdmin(t *testing.T) {
	_, srv, clk := newBatchFake(t)
	if resp, _ := http.Post(srv.URL+"/_fake/faults", "application/json", strings.NewReader(`{"batch_expire":1,"batch_expire_done":0}`)); resp.StatusCode != 204 {
		t.Fatalf("faults: %d", resp.StatusCode)
	}
	h := map[string]string{"x-api-key": "sk-a", "anthropic-version": "2023-06-01"}
	resp, b := post(t, srv.URL+"/v1/messages/batches", h, `{"requests":[{"custom_id":"a","params":{"model":"claude","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}}]}`)
	if resp.StatusCode != 200 {
		t.Fatalf("create: %d %v", resp.StatusCode, b)
	}
	clk.Step(25 * time.Hour)
	_, raw := get(t, srv.URL+"/v1/messages/batches/"+b["id"].(string)+"/results", h)
	if !strings.Contains(string(raw), `"result":{"type":"expired"}`) {
		t.Fatalf("results %s: want the request expired", raw)
	}
	code, stats := get(t, srv.URL+"/_fake/stats", nil)
	if code != 200 || !strings.Contains(string(stats), `"expired":1`) {
		t.Fatalf("stats %d %s", code, stats)
	}
}

// FuzzOpenAIBatchInput: no input file crashes the fake, a batch always
// reaches a state OpenAI reports, and its output and error files hold
// each custom_id at most once.
func FuzzOpenAIBatchInput(f *testing.F) {
	f.Add([]byte(chatLine("a", "gpt-4o-mini") + "\n" + chatLine("b", "gpt-4o-mini")))
	f.Add([]byte(`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[]}}`))
	f.Add([]byte(`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":[1]}],"n":3,"response_format":{"type":"json_schema"}}}`))
	f.Add([]byte(`{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"system","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"required"}}`))
	f.Add([]byte("\n\n{}\n[]\nnull\n\"x\""))
	_, srv, clk := newBatchFake(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		code, file := upload(t, srv.URL, "sk-a", "in.jsonl", "batch", data)
		if code != 200 {
			return
		}
		resp, b := post(t, srv.URL+"/v1/batches", map[string]string{"Authorization": "Bearer sk-a"},
			`{"input_file_id":"`+file["id"].(string)+`","endpoint":"/v1/chat/completions","completion_window":"24h"}`)
		if resp.StatusCode != 200 {
			t.Fatalf("create: %d %v", resp.StatusCode, b)
		}
		clk.Step(2 * time.Minute)
		code, raw := get(t, srv.URL+"/v1/batches/"+b["id"].(string), map[string]string{"Authorization": "Bearer sk-a"})
		var got struct {
			Status string  `json:"status"`
			Output *string `json:"output_file_id"`
			Errors *string `json:"error_file_id"`
		}
		if code != 200 || json.Unmarshal(raw, &got) != nil || (got.Status != "failed" && got.Status != "completed") {
			t.Fatalf("batch %d %s", code, raw)
		}
		seen := map[string]bool{}
		for _, id := range []*string{got.Output, got.Errors} {
			if id == nil {
				continue
			}
			_, content := get(t, srv.URL+"/v1/files/"+*id+"/content", map[string]string{"Authorization": "Bearer sk-a"})
			for _, line := range strings.Split(strings.TrimSpace(string(content)), "\n") {
				var r struct {
					CustomID string `json:"custom_id"`
				}
				if json.Unmarshal([]byte(line), &r) != nil || seen[r.CustomID] {
					t.Fatalf("output line %s", line)
				}
				seen[r.CustomID] = true
			}
		}
	})
}

// FuzzMessageBatchCreate: no create body crashes the fake; a batch it
// takes ends with one result per request.
func FuzzMessageBatchCreate(f *testing.F) {
	f.Add(`{"requests":[{"custom_id":"a","params":{"model":"claude","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}}]}`)
	f.Add(`{"requests":[{"custom_id":"a","params":{"model":"claude","max_tokens":10,"system":[{"type":"text","text":"\"comments\""}],"messages":[{"role":"user","content":[{"type":"tool_result","content":[{"type":"text","text":"x"}]}]}],"tools":[{"name":"r","input_schema":{"type":"object"}}],"tool_choice":{"type":"any"}}}]}`)
	f.Add(`{"requests":[{"custom_id":"a","params":{"model":"claude","max_tokens":-1,"messages":null}},{"custom_id":"b","params":{}}]}`)
	f.Add(`{"requests":[{"custom_id":"a","params":{"model":"claude","max_tokens":10,"messages":[{"role":"user","content":"x"}],"tool_choice":{"type":"any"}}}]}`)
	_, srv, clk := newBatchFake(f)
	h := map[string]string{"x-api-key": "sk-a", "anthropic-version": "2023-06-01"}
	f.Fuzz(func(t *testing.T, body string) {
		resp, b := post(t, srv.URL+"/v1/messages/batches", h, body)
		if resp.StatusCode != 200 {
			return
		}
		var req struct {
			Requests []json.RawMessage `json:"requests"`
		}
		json.Unmarshal([]byte(body), &req)
		clk.Step(11 * time.Minute) // a request of an unknown model takes DefaultBatchLatency
		code, results := get(t, srv.URL+"/v1/messages/batches/"+b["id"].(string)+"/results", h)
		if n := len(strings.Split(strings.TrimSpace(string(results)), "\n")); code != 200 || n != len(req.Requests) {
			t.Fatalf("results %d: %d lines for %d requests: %s", code, n, len(req.Requests), results)
		}
	})
}
