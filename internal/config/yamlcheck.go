package config

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// FileError is a mistake in the configuration file, said as a person
// fixes it: the file and line, the setting's path
// (models[1].tokens_per_minute) and what is wrong, never a Go type.
type FileError struct {
	File string
	Line int
	// Path is the setting's path; "" for a syntax error.
	Path    string
	Problem string
}

func (e *FileError) Error() string {
	if e.Path == "" {
		return fmt.Sprintf("config: %s:%d: %s", e.File, e.Line, e.Problem)
	}
	return fmt.Sprintf("config: %s:%d: %s: %s", e.File, e.Line, e.Path, e.Problem)
}

// decodeFile decodes the YAML file's text into c, reporting every
// unknown setting and every value of the wrong kind as a FileError,
// before anything is set.
func decodeFile(file string, b []byte, c *Config) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return syntaxError(file, b, err)
	}
	if len(doc.Content) == 0 {
		return nil // an empty file: the defaults
	}
	var errs []error
	checkNode(file, doc.Content[0], reflect.TypeFor[Config](), "", &errs)
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if err := doc.Decode(c); err != nil { // what checkNode let through: said without Go's types
		return &FileError{File: file, Line: 1, Problem: plainYAMLError(err)}
	}
	return nil
}

var (
	yamlLine    = regexp.MustCompile(`^yaml: line (\d+): `)
	goTypeName  = regexp.MustCompile(` (in|into) (type )?[\[\]*\w.]+`)
	leadingLine = regexp.MustCompile(`^line \d+: `)
)

// syntaxError names the line a syntax error is on. yaml reports the line
// of the block being parsed, which may be lines before the mistake: the
// first prefix of the file, from that line on, that no longer parses
// ends on the line to fix.
func syntaxError(file string, b []byte, err error) error {
	msg := err.Error()
	line := 1
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = msg[len(m[0]):]
	}
	msg = strings.TrimPrefix(msg, "yaml: ")
	lines := strings.SplitAfter(string(b), "\n")
	for k := max(line, 1); k <= len(lines); k++ {
		var n yaml.Node
		if yaml.Unmarshal([]byte(strings.Join(lines[:k], "")), &n) != nil {
			line = k
			break
		}
	}
	return &FileError{File: file, Line: line, Problem: "YAML syntax: " + msg + " (check this line's indentation, colons and brackets, and the line before)"}
}

// plainYAMLError is yaml's message without Go's type names.
func plainYAMLError(err error) string {
	s := strings.TrimPrefix(err.Error(), "yaml: unmarshal errors:\n  ")
	return goTypeName.ReplaceAllString(s, "")
}

var unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()

// checkNode checks n against the setting type t at path.
func checkNode(file string, n *yaml.Node, t reflect.Type, path string, errs *[]error) {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // unset: the default
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	bad := func(n *yaml.Node, path, format string, a ...any) {
		*errs = append(*errs, &FileError{File: file, Line: n.Line, Path: path, Problem: fmt.Sprintf(format, a...)})
	}
	switch {
	case t == durationType && n.Kind != yaml.ScalarNode:
		bad(n, path, "want a duration (like 30s or 5m), got %s", kindOf(n))
	case n.Tag == "!!float" && t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		bad(n, path, "%s", wantValue(t, n)) // yaml would cut 1.5 to 1
	case reflect.PointerTo(t).Implements(unmarshalerType):
		if err := n.Decode(reflect.New(t).Interface()); err != nil { // its own message (Duration's, EnvList's)
			bad(n, path, "%s", leadingLine.ReplaceAllString(plainYAMLError(err), ""))
		}
	case t.Kind() == reflect.Struct:
		if n.Kind != yaml.MappingNode {
			bad(n, orTop(path), "want a section of settings (name: value lines), got %s", kindOf(n))
			return
		}
		checkMapping(file, n, t, path, errs)
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct:
		if n.Kind != yaml.SequenceNode {
			bad(n, path, "want a list (lines starting with -), got %s", kindOf(n))
			return
		}
		for i, e := range n.Content {
			checkNode(file, e, t.Elem(), fmt.Sprintf("%s[%d]", path, i), errs)
		}
	case t.Kind() == reflect.Map && t.Elem().Kind() == reflect.Struct:
		if n.Kind != yaml.MappingNode {
			bad(n, path, "want a section of named entries (name: settings), got %s", kindOf(n))
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			checkNode(file, n.Content[i+1], t.Elem(), path+"."+n.Content[i].Value, errs)
		}
	default:
		if err := n.Decode(reflect.New(t).Interface()); err != nil {
			bad(n, path, "%s", wantValue(t, n))
		}
	}
}

// checkMapping checks a section's keys: each must be one of t's
// settings (a near one is suggested), each value of its kind.
func checkMapping(file string, n *yaml.Node, t reflect.Type, path string, errs *[]error) {
	fields := map[string]reflect.Type{}
	var names []string
	for i := range t.NumField() {
		if name := yamlName(t.Field(i)); name != "" {
			fields[name] = t.Field(i).Type
			names = append(names, name)
		}
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Value == "<<" { // a merge key: its mapping is checked where it is defined
			continue
		}
		p := k.Value
		if path != "" {
			p = path + "." + k.Value
		}
		ft, ok := fields[k.Value]
		if !ok {
			problem := "unknown setting"
			if s := Nearest(k.Value, names); s != "" {
				problem += "; did you mean " + s + "?"
			} else {
				problem += " (docs/configuration.md lists them)"
			}
			*errs = append(*errs, &FileError{File: file, Line: k.Line, Path: p, Problem: problem})
			continue
		}
		checkNode(file, v, ft, p, errs)
	}
}

func orTop(path string) string {
	if path == "" {
		return "the file"
	}
	return path
}

// kindOf says what a node is, for a person.
func kindOf(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a section"
	case yaml.SequenceNode:
		return "a list"
	}
	return fmt.Sprintf("%q", n.Value)
}

// wantValue says what a leaf setting of type t takes, and what it got.
func wantValue(t reflect.Type, n *yaml.Node) string {
	var want string
	switch t.Kind() {
	case reflect.Bool:
		want = "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		want = "a whole number"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		want = "a whole number, not negative"
	case reflect.Float32, reflect.Float64:
		want = "a number"
	case reflect.String:
		want = "a single value"
	case reflect.Slice:
		want = "a list of values"
	default:
		want = "a value of another kind"
	}
	return fmt.Sprintf("want %s, got %s", want, kindOf(n))
}
