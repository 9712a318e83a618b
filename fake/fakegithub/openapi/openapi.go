// Package openapi holds the operations of GitHub's published REST API
// description (github/rest-api-description, from the npm package
// @octokit/openapi) that the fake GitHub serves, vendored in
// operations.json for api.github.com and the newest Enterprise Server,
// and checks a request against them: method and path, path and query
// parameters, media types, and the JSON body against its schema (a
// small validator of the keywords those schemas use), plus the rules
// GitHub states only in prose and the few documented places where the
// description and GitHub part (see rules.go). The fake refuses a body
// GitHub's description refuses; the end-to-end tests check every
// request prq makes. It does not fetch anything: `go generate` runs
// ./gen, which installs the pinned package into a temporary directory
// and rewrites operations.json.
package openapi

//go:generate go run ./gen -version 23.0.2 -out operations.json

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"mime"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Vendored is operations.json as the generator wrote it.
type Vendored struct {
	Source struct {
		Package string `json:"package"`
		Version string `json:"version"`
	} `json:"source"`
	Descriptions []*Description `json:"descriptions"`
}

// Description is one published description's operations (those the
// fake serves).
type Description struct {
	// Name is the description's file: api.github.com, ghes-3.19, …
	Name string `json:"name"`
	// OpenAPI and Version are the description's openapi and info.version.
	OpenAPI    string       `json:"openapi"`
	Version    string       `json:"version"`
	Operations []*Operation `json:"operations"`
}

// Operation is one method on one path, as the description gives it.
type Operation struct {
	Method      string       `json:"method"`
	Path        string       `json:"path"`
	OperationID string       `json:"operationId"`
	Parameters  []*Parameter `json:"parameters,omitempty"`
	RequestBody *RequestBody `json:"requestBody,omitempty"`
	// Responds are the media types its responses list.
	Responds []string `json:"responds,omitempty"`
}

// Parameter is a path, query or header parameter.
type Parameter struct {
	Name     string  `json:"name"`
	In       string  `json:"in"`
	Required bool    `json:"required,omitempty"`
	Schema   *Schema `json:"schema,omitempty"`
}

// RequestBody is an operation's body: a schema per media type.
type RequestBody struct {
	Required bool               `json:"required,omitempty"`
	Content  map[string]*Schema `json:"content"`
}

//go:embed operations.json
var operationsJSON []byte

var (
	loadOnce sync.Once
	loaded   *Vendored
	loadErr  error
)

// Load returns the vendored descriptions (read once).
func Load() (*Vendored, error) {
	loadOnce.Do(func() {
		var v Vendored
		if err := json.Unmarshal(operationsJSON, &v); err != nil {
			loadErr = fmt.Errorf("openapi: operations.json: %w", err)
			return
		}
		if len(v.Descriptions) == 0 {
			loadErr = fmt.Errorf("openapi: operations.json holds no description")
			return
		}
		loaded = &v
	})
	return loaded, loadErr
}

// Dotcom is the description of api.github.com; Enterprise is the newest
// Enterprise Server's.
func (v *Vendored) Dotcom() *Description {
	return v.find(func(d *Description) bool { return d.Name == "api.github.com" })
}

// Enterprise is the newest Enterprise Server's description.
func (v *Vendored) Enterprise() *Description {
	return v.find(func(d *Description) bool { return strings.HasPrefix(d.Name, "ghes-") })
}

func (v *Vendored) find(ok func(*Description) bool) *Description {
	for _, d := range v.Descriptions {
		if ok(d) {
			return d
		}
	}
	return nil
}

// Find returns the operation serving method on path (an API path
// without the Enterprise prefix) and the path parameters' values; the
// template with the most literal segments wins.
func (d *Description) Find(method, path string) (*Operation, map[string]string) {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	var best *Operation
	var bestParams map[string]string
	bestLiterals := -1
	for _, op := range d.Operations {
		if !strings.EqualFold(op.Method, method) {
			continue
		}
		tsegs := strings.Split(strings.Trim(op.Path, "/"), "/")
		psegs := segs
		if last := len(tsegs) - 1; tsegs[last] == "{path}" && len(segs) > len(tsegs) {
			// a file's path in a repository (the contents API) spans segments
			psegs = append(append([]string(nil), segs[:last]...), strings.Join(segs[last:], "/"))
		}
		if len(tsegs) != len(psegs) {
			continue
		}
		segs := psegs
		params, literals := map[string]string{}, 0
		for i, t := range tsegs {
			if strings.HasPrefix(t, "{") && strings.HasSuffix(t, "}") {
				if segs[i] == "" {
					params = nil
					break
				}
				params[t[1:len(t)-1]] = segs[i]
				continue
			}
			if t != segs[i] {
				params = nil
				break
			}
			literals++
		}
		if params != nil && literals > bestLiterals {
			best, bestParams, bestLiterals = op, params, literals
		}
	}
	return best, bestParams
}

// Request is a request as sent, for Check.
type Request struct {
	Method string
	// Path is the API path, without the Enterprise prefix /api/v3.
	Path        string
	RawQuery    string
	Accept      string
	ContentType string
	Body        []byte
}

// Check validates r against the description: its operation exists, its
// path and query parameters are declared and valid, what it accepts is
// a media type the operation answers with, and its body fits the
// operation's schema and GitHub's prose rules. mode Strict also refuses
// body members the schema does not name. It returns the operation (nil
// when none serves r) and every violation.
func (d *Description) Check(r Request, mode Mode) (*Operation, []string) {
	path, alias := r.Path, ""
	if p, ok := repositoryAlias(path); ok {
		path, alias = p, r.Path
	}
	op, params := d.Find(r.Method, path)
	if op == nil {
		return nil, []string{fmt.Sprintf("%s %s: no such operation in %s", r.Method, r.Path, d.Name)}
	}
	var out []string
	for _, p := range op.Parameters {
		switch p.In {
		case "path":
			v, ok := params[p.Name]
			if !ok {
				out = append(out, fmt.Sprintf("path parameter %s: missing", p.Name))
				continue
			}
			if alias != "" && (p.Name == "owner" || p.Name == "repo") {
				continue // named by the repository's id instead (see repositoryAlias)
			}
			out = append(out, p.check("path parameter", v)...)
		}
	}
	out = append(out, op.checkQuery(r.RawQuery)...)
	out = append(out, op.checkAccept(r.Accept)...)
	out = append(out, op.checkBody(r, mode)...)
	return op, out
}

// Refuses returns what GitHub refuses of r's body with 422: the body
// checked against the operation's schema (as GitHub reads it, members it
// does not know ignored) and its prose rules. A request no operation
// serves, or one without a body where none is needed, passes.
func (d *Description) Refuses(r Request) []string {
	path := r.Path
	if p, ok := repositoryAlias(path); ok {
		path = p
	}
	op, _ := d.Find(r.Method, path)
	if op == nil {
		return nil
	}
	return op.checkBody(r, AsGitHub)
}

// check validates one parameter value (text, as sent).
func (p *Parameter) check(where, raw string) []string {
	if p.Schema == nil {
		return nil
	}
	var v any = raw
	if p.Schema.Type.has("integer") || p.Schema.Type.has("number") {
		if _, err := strconv.ParseFloat(raw, 64); err == nil {
			v = json.Number(raw)
		}
	}
	if p.Schema.Type.has("boolean") && (raw == "true" || raw == "false") {
		v = raw == "true"
	}
	var out []string
	for _, msg := range p.Schema.Validate(v, AsGitHub) {
		out = append(out, fmt.Sprintf("%s %s: %s", where, p.Name, strings.TrimPrefix(msg, "the body: ")))
	}
	return out
}

func (op *Operation) checkQuery(raw string) []string {
	q, err := url.ParseQuery(raw)
	if err != nil {
		return []string{fmt.Sprintf("query %q: %v", raw, err)}
	}
	declared := map[string]*Parameter{}
	var out []string
	for _, p := range op.Parameters {
		if p.In != "query" {
			continue
		}
		declared[p.Name] = p
		if _, ok := q[p.Name]; p.Required && !ok {
			out = append(out, fmt.Sprintf("query parameter %s: is required", p.Name))
		}
	}
	names := make([]string, 0, len(q))
	for name := range q {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		p, ok := declared[name]
		if !ok {
			out = append(out, fmt.Sprintf("query parameter %s: not in the description of %s", name, op.OperationID))
			continue
		}
		for _, v := range q[name] {
			out = append(out, p.check("query parameter", v)...)
		}
	}
	return out
}

// checkAccept refuses a media type other than JSON that the operation
// does not answer with (a request for a diff where none is described).
func (op *Operation) checkAccept(accept string) []string {
	var out []string
	for _, part := range strings.Split(accept, ",") {
		mt, _, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil || jsonLike(mt) || preview(mt) || op.responds(mt) || acceptException(op, mt) {
			continue
		}
		out = append(out, fmt.Sprintf("Accept %s: %s answers only %s", mt, op.OperationID, strings.Join(op.Responds, ", ")))
	}
	return out
}

// jsonLike is any JSON media type, GitHub's versioned and preview ones
// included (GitHub answers JSON to them all), and */*.
func jsonLike(mt string) bool {
	return mt == "*/*" || mt == "application/*" || mt == "application/json" || strings.HasSuffix(mt, "+json") || mt == "application/vnd.github.v3"
}

func (op *Operation) responds(mt string) bool {
	for _, r := range op.Responds {
		if r == mt {
			return true
		}
	}
	return false
}

func (op *Operation) checkBody(r Request, mode Mode) []string {
	if len(strings.TrimSpace(string(r.Body))) == 0 {
		if op.RequestBody != nil && op.RequestBody.Required {
			return []string{fmt.Sprintf("%s takes a body and none was sent", op.OperationID)}
		}
		return nil
	}
	if op.RequestBody == nil {
		return []string{fmt.Sprintf("%s takes no body and one was sent", op.OperationID)}
	}
	ct := "application/json"
	if r.ContentType != "" {
		if mt, _, err := mime.ParseMediaType(r.ContentType); err == nil {
			ct = mt
		}
	}
	schema, ok := op.RequestBody.Content[ct]
	if !ok {
		return []string{fmt.Sprintf("Content-Type %s: %s takes only %s", ct, op.OperationID, strings.Join(mediaTypes(op.RequestBody.Content), ", "))}
	}
	v, err := Decode(r.Body)
	if err != nil {
		return []string{fmt.Sprintf("the body is not JSON: %v", err)}
	}
	out := relax(op, v, schema.Validate(v, mode))
	return append(out, prose(op, v)...)
}

func mediaTypes(m map[string]*Schema) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
