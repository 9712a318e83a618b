// Command gen vendors the operations the fake GitHub serves from
// GitHub's published REST API description into operations.json: for
// api.github.com and the newest Enterprise Server the npm package
// @octokit/openapi carries, each operation's path and query parameters,
// request body schemas with every $ref resolved, and the media types it
// answers with; descriptions and examples are dropped, and a schema
// keyword the validator does not check is an error.
//
//	go generate ./fake/fakegithub/openapi
//	go run ./fake/fakegithub/openapi/gen -version 23.0.2 -out fake/fakegithub/openapi/operations.json
//
// It installs the pinned package with npm into a temporary directory
// (removed afterwards; nothing under node_modules is kept), or reads an
// installed copy given with -from.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/prq-dev/prq/fake/fakegithub"
	"github.com/prq-dev/prq/fake/fakegithub/openapi"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("gen", flag.ContinueOnError)
	version := fs.String("version", "", "the @octokit/openapi version to vendor (required)")
	from := fs.String("from", "", "an installed @octokit/openapi package directory (default: npm install into a temporary directory)")
	out := fs.String("out", "operations.json", "the file to write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *version == "" {
		return errors.New("-version is required (npm view @octokit/openapi versions)")
	}
	dir := *from
	if dir == "" {
		tmp, err := os.MkdirTemp("", "prq-openapi-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		cmd := exec.Command("npm", "install", "--prefix", tmp, "--no-save", "--no-audit", "--no-fund", "--ignore-scripts", "@octokit/openapi@"+*version)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("npm install @octokit/openapi@%s: %w", *version, err)
		}
		dir = filepath.Join(tmp, "node_modules", "@octokit", "openapi")
	}
	var pkg struct{ Version string }
	if err := readJSON(filepath.Join(dir, "package.json"), &pkg); err != nil {
		return err
	}
	if pkg.Version != *version {
		return fmt.Errorf("%s holds @octokit/openapi %s, not %s", dir, pkg.Version, *version)
	}
	ghes, err := newestEnterprise(filepath.Join(dir, "generated"))
	if err != nil {
		return err
	}
	var v openapi.Vendored
	v.Source.Package, v.Source.Version = "@octokit/openapi", *version
	routes := fakegithub.New(fakegithub.Config{}).Routes()
	for _, name := range []string{"api.github.com", ghes} {
		d, err := vendor(filepath.Join(dir, "generated", name+".json"), name, routes)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		v.Descriptions = append(v.Descriptions, d)
	}
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(*out, append(b, '\n'), 0o644)
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// newestEnterprise names the newest ghes-X.Y description in dir.
func newestEnterprise(dir string) (string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "ghes-*.json"))
	if err != nil {
		return "", err
	}
	best, bestMajor, bestMinor := "", -1, -1
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		ver, ok := strings.CutPrefix(name, "ghes-")
		maj, min, ok2 := strings.Cut(ver, ".")
		a, err1 := strconv.Atoi(maj)
		b, err2 := strconv.Atoi(min)
		if !ok || !ok2 || err1 != nil || err2 != nil { // ghes-3.19.deref and the like
			continue
		}
		if a > bestMajor || (a == bestMajor && b > bestMinor) {
			best, bestMajor, bestMinor = name, a, b
		}
	}
	if best == "" {
		return "", fmt.Errorf("no ghes-X.Y.json in %s", dir)
	}
	return best, nil
}

// vendor reads one description and keeps the operations of routes.
func vendor(path, name string, routes []fakegithub.Route) (*openapi.Description, error) {
	var doc map[string]any
	if err := readJSON(path, &doc); err != nil {
		return nil, err
	}
	r := resolver{doc: doc}
	info, _ := doc["info"].(map[string]any)
	d := &openapi.Description{Name: name, OpenAPI: str(doc["openapi"]), Version: str(info["version"])}
	paths, _ := doc["paths"].(map[string]any)
	for _, rt := range routes {
		tmpl, item := findPath(paths, rt.Path)
		if item == nil {
			return nil, fmt.Errorf("%s %s: no such path in the description", rt.Method, rt.Path)
		}
		raw, ok := item[strings.ToLower(rt.Method)].(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s %s: no such method on %s", rt.Method, rt.Path, tmpl)
		}
		op := &openapi.Operation{Method: rt.Method, Path: tmpl, OperationID: str(raw["operationId"])}
		params := append(list(item["parameters"]), list(raw["parameters"])...)
		for _, p := range params {
			pm, err := r.object(p, op.OperationID+" parameter")
			if err != nil {
				return nil, err
			}
			s, err := r.schema(pm["schema"], op.OperationID+" parameter "+str(pm["name"]))
			if err != nil {
				return nil, err
			}
			req, _ := pm["required"].(bool)
			op.Parameters = append(op.Parameters, &openapi.Parameter{Name: str(pm["name"]), In: str(pm["in"]), Required: req, Schema: s})
		}
		if raw["requestBody"] != nil {
			rb, err := r.object(raw["requestBody"], op.OperationID+" requestBody")
			if err != nil {
				return nil, err
			}
			req, _ := rb["required"].(bool)
			op.RequestBody = &openapi.RequestBody{Required: req, Content: map[string]*openapi.Schema{}}
			content, _ := rb["content"].(map[string]any)
			for mt, c := range content {
				cm, _ := c.(map[string]any)
				s, err := r.schema(cm["schema"], op.OperationID+" body "+mt)
				if err != nil {
					return nil, err
				}
				op.RequestBody.Content[mt] = s
			}
		}
		responds := map[string]bool{}
		resps, _ := raw["responses"].(map[string]any)
		for _, resp := range resps {
			rm, err := r.object(resp, op.OperationID+" response")
			if err != nil {
				return nil, err
			}
			content, _ := rm["content"].(map[string]any)
			for mt := range content {
				responds[mt] = true
			}
		}
		for mt := range responds {
			op.Responds = append(op.Responds, mt)
		}
		sort.Strings(op.Responds)
		d.Operations = append(d.Operations, op)
	}
	sort.Slice(d.Operations, func(i, j int) bool {
		if d.Operations[i].Path != d.Operations[j].Path {
			return d.Operations[i].Path < d.Operations[j].Path
		}
		return d.Operations[i].Method < d.Operations[j].Method
	})
	return d, nil
}

// findPath finds the description's template for a route's path: the
// same segments, parameters in the same places (their names differ).
func findPath(paths map[string]any, route string) (string, map[string]any) {
	shape := func(p string) string {
		segs := strings.Split(p, "/")
		for i, s := range segs {
			if strings.HasPrefix(s, "{") && strings.Index(s, "}") == len(s)-1 { // one whole parameter
				segs[i] = "{}"
			}
		}
		return strings.Join(segs, "/")
	}
	want := shape(route)
	found := ""
	for tmpl := range paths {
		if shape(tmpl) == want && (found == "" || tmpl < found) { // unique in GitHub's; if not, the same every run
			found = tmpl
		}
	}
	m, _ := paths[found].(map[string]any)
	return found, m
}

func str(v any) string { s, _ := v.(string); return s }

func list(v any) []any { l, _ := v.([]any); return l }

// resolver resolves local $refs ("#/components/…").
type resolver struct {
	doc map[string]any
}

func (r resolver) deref(v any, seen map[string]bool) (map[string]any, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("not an object: %v", v)
	}
	for {
		ref, ok := m["$ref"].(string)
		if !ok {
			return m, nil
		}
		if seen[ref] {
			return nil, fmt.Errorf("$ref cycle through %s", ref)
		}
		seen[ref] = true
		node := any(r.doc)
		for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
			nm, _ := node.(map[string]any)
			node = nm[strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")]
		}
		if m, ok = node.(map[string]any); !ok {
			return nil, fmt.Errorf("$ref %s: not found", ref)
		}
	}
}

func (r resolver) object(v any, what string) (map[string]any, error) {
	m, err := r.deref(v, map[string]bool{})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return m, nil
}

// annotations are the schema keywords that do not validate.
var annotations = map[string]bool{"description": true, "title": true, "example": true, "examples": true, "default": true,
	"deprecated": true, "readOnly": true, "writeOnly": true, "externalDocs": true}

// schema resolves a schema's $refs, keeps its validation keywords, and
// refuses one the validator does not check.
func (r resolver) schema(v any, what string) (*openapi.Schema, error) {
	if v == nil {
		return nil, nil
	}
	clean, err := r.clean(v, what, map[string]bool{})
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(clean)
	if err != nil {
		return nil, err
	}
	var s openapi.Schema
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return &s, nil
}

func (r resolver) clean(v any, what string, seen map[string]bool) (any, error) {
	if b, ok := v.(bool); ok {
		return b, nil
	}
	path := map[string]bool{}
	for k := range seen {
		path[k] = true
	}
	m, err := r.deref(v, path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	known := map[string]bool{}
	for _, k := range openapi.Keywords {
		known[k] = true
	}
	out := map[string]any{}
	for k, val := range m {
		switch {
		case annotations[k] || strings.HasPrefix(k, "x-"):
		case !known[k]:
			return nil, fmt.Errorf("%s: schema keyword %q is not one the validator checks (add it to openapi.Schema)", what, k)
		case k == "properties":
			props := map[string]any{}
			pm, _ := val.(map[string]any)
			for name, p := range pm {
				c, err := r.clean(p, what+"."+name, path)
				if err != nil {
					return nil, err
				}
				props[name] = c
			}
			out[k] = props
		case k == "items" || k == "additionalProperties":
			c, err := r.clean(val, what+"."+k, path)
			if err != nil {
				return nil, err
			}
			out[k] = c
		case k == "oneOf" || k == "anyOf" || k == "allOf":
			var alts []any
			for i, a := range list(val) {
				c, err := r.clean(a, fmt.Sprintf("%s.%s[%d]", what, k, i), path)
				if err != nil {
					return nil, err
				}
				alts = append(alts, c)
			}
			out[k] = alts
		default:
			out[k] = val
		}
	}
	return out, nil
}
