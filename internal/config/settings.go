package config

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// The settings are Config's fields as YAML names them: walking the
// struct by its yaml tags lists every one, so the reference, the
// environment and the flags cannot name a setting that does not exist or
// miss one that does.

// settingKind is how a setting holds its value.
type settingKind int

const (
	kindLeaf    settingKind = iota // one value (a list of strings counts as one)
	kindSection                    // a struct: its fields follow as path.field
	kindList                       // a list of structs: their fields follow as path[].field
	kindMap                        // a map of structs: their fields follow as path.<name>.field
)

// setting is one node of the configuration's YAML tree.
type setting struct {
	// Path is the YAML path: "scheduler.chat_cap", "models[].name",
	// "tiers.<name>.weight".
	Path string
	Kind settingKind
	// Type is the field's type with any pointer removed.
	Type reflect.Type
	// Value is the setting in the configuration walked; inside a list's
	// or a map's entries it is the zero value (an entry's default).
	Value reflect.Value
	// Set: the configuration walked holds a value (a pointer that is not
	// nil, anything else that is not its zero value).
	Set bool
	// InEntry: the setting belongs to an entry of a list or a map.
	InEntry bool
}

// Top is the top-level key the setting belongs to ("" for a top-level
// scalar).
func (s setting) Top() string {
	top, _, nested := strings.Cut(s.Path, ".")
	top = strings.TrimSuffix(top, "[]")
	if !nested && s.Kind == kindLeaf {
		return ""
	}
	return top
}

var (
	durationType = reflect.TypeFor[Duration]()
	secretType   = reflect.TypeFor[Secret]()
	envListType  = reflect.TypeFor[EnvList]()
)

// settingsOf lists every setting of c, parents before their fields, in
// the order of the struct's fields.
func settingsOf(c *Config) []setting {
	var out []setting
	walkSettings(reflect.ValueOf(c).Elem(), "", false, &out)
	return out
}

func walkSettings(v reflect.Value, prefix string, inEntry bool, out *[]setting) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name := yamlName(f)
		if name == "" {
			continue
		}
		path := prefix + name
		fv, ft := v.Field(i), f.Type
		set := !fv.IsZero()
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
			if fv.IsNil() {
				fv = reflect.Zero(ft)
			} else {
				fv = fv.Elem()
			}
		}
		s := setting{Path: path, Kind: kindLeaf, Type: ft, Value: fv, Set: set, InEntry: inEntry}
		switch {
		case ft == durationType || ft == secretType || ft == envListType:
			*out = append(*out, s)
		case ft.Kind() == reflect.Struct:
			s.Kind = kindSection
			*out = append(*out, s)
			walkSettings(fv, path+".", inEntry, out)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			s.Kind = kindList
			*out = append(*out, s)
			walkSettings(reflect.New(ft.Elem()).Elem(), path+"[].", true, out)
		case ft.Kind() == reflect.Map && ft.Elem().Kind() == reflect.Struct:
			s.Kind = kindMap
			*out = append(*out, s)
			walkSettings(reflect.New(ft.Elem()).Elem(), path+".<name>.", true, out)
		default:
			*out = append(*out, s)
		}
	}
}

// yamlName is the key a field has in YAML ("" for a field YAML skips).
func yamlName(f reflect.StructField) string {
	if !f.IsExported() {
		return ""
	}
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if name == "-" || name == "" {
		return ""
	}
	return name
}

// field returns the settable field at a path of plain sections (no list
// or map entries), allocating pointers on the way.
func field(c *Config, path string) (reflect.Value, error) {
	v := reflect.ValueOf(c).Elem()
	for part := range strings.SplitSeq(path, ".") {
		if v.Kind() != reflect.Struct {
			return reflect.Value{}, fmt.Errorf("config: setting %q: %s is not a section", path, part)
		}
		found := false
		for i := range v.NumField() {
			if yamlName(v.Type().Field(i)) == part {
				v, found = v.Field(i), true
				break
			}
		}
		if !found {
			return reflect.Value{}, fmt.Errorf("config: no setting %q", path)
		}
		if v.Kind() == reflect.Pointer {
			if v.IsNil() {
				v.Set(reflect.New(v.Type().Elem()))
			}
			v = v.Elem()
		}
	}
	return v, nil
}

// setText sets the setting at path from text, as the environment and
// the flags give it. The problem it reports never quotes a secret.
func (c *Config) setText(path, text string) (problem string) {
	v, err := field(c, path)
	if err != nil {
		return err.Error()
	}
	switch {
	case v.Type() == durationType:
		d, err := time.ParseDuration(text)
		if err != nil {
			return fmt.Sprintf("%q is not a duration (like 30s or 5m)", text)
		}
		v.SetInt(int64(d))
	case v.Kind() == reflect.String: // a Secret too
		v.SetString(text)
	case v.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(text)
		if err != nil {
			return fmt.Sprintf("%q is not true or false", text)
		}
		v.SetBool(b)
	case v.CanInt():
		n, err := strconv.ParseInt(text, 10, 64)
		if err != nil || n <= 0 || v.OverflowInt(n) {
			return fmt.Sprintf("%q is not a positive integer", text)
		}
		v.SetInt(n)
	default:
		return fmt.Sprintf("cannot be set from text (a %s)", v.Type())
	}
	return ""
}

// settingName is the name errors give the setting at path: its
// environment variable when it has one (what an operator sets), else the
// path. Validate names settings the same way.
func settingName(path string) string {
	for _, e := range envSettings {
		if e.Path == path {
			return e.Name
		}
	}
	return path
}
