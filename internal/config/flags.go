package config

import (
	"flag"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
)

// flagSetting is a command-line flag that sets the setting at Path.
type flagSetting struct{ Name, Path, Usage string }

// flagSettings are the flags Register adds besides --config. A flag
// given on the command line wins over the file and the environment,
// whatever its value.
var flagSettings = []flagSetting{
	{"addr", "addr", "HTTP listen address"},
	{"redis-url", "redis_url", "Redis URL"},
	{"log-format", "log.format", "log format: text or json"},
	{"log-level", "log.level", "log level: debug, info, warn or error"},
	{"concurrency", "worker.concurrency", "jobs one worker process runs at once"},
	{"shutdown-timeout", "shutdown_timeout", "how long in-flight jobs may finish after SIGTERM"},
	{"allow-eviction", "allow_eviction", "start even if Redis may evict keys; unsafe: jobs can vanish"},
	{"allow-no-persistence", "allow_no_persistence", "start even if Redis has neither AOF nor RDB persistence; unsafe: a Redis restart loses jobs"},
}

// Flags are the command-line settings shared by the commands that run prq.
type Flags struct {
	config string
	fs     *flag.FlagSet // where the flags were registered: Visit tells which were given
}

// Register adds --config and the named flags to fs (every flag of
// flagSettings when none is named): a command lists only the flags it
// reads. Each usage names the setting's environment variable and
// default, taken from the definitions.
func (f *Flags) Register(fs *flag.FlagSet, names ...string) {
	f.fs = fs
	fs.StringVar(&f.config, "config", "", "YAML configuration file (env PRQ_CONFIG)")
	def := Default()
	for _, n := range names {
		if !slices.ContainsFunc(flagSettings, func(s flagSetting) bool { return s.Name == n }) {
			panic("config: no flag --" + n) // a command names a flag that does not exist: its help test fails first
		}
	}
	for _, s := range flagSettings {
		if len(names) > 0 && !slices.Contains(names, s.Name) {
			continue
		}
		v, err := field(&def, s.Path)
		if err != nil {
			panic(err) // a definition names no setting: TestFlagSettings fails first
		}
		var notes []string
		if env := settingName(s.Path); env != s.Path {
			notes = append(notes, "env "+env)
		}
		if v.Kind() != reflect.Bool && !v.IsZero() {
			notes = append(notes, "default "+plainValue(v))
		}
		usage := s.Usage
		if len(notes) > 0 {
			usage += " (" + strings.Join(notes, "; ") + ")"
		}
		// typed flags: --help shows the kind, and a bad value fails at parse
		switch {
		case v.Type() == durationType:
			fs.Duration(s.Name, 0, usage)
		case v.Kind() == reflect.Bool:
			fs.Bool(s.Name, false, usage)
		case v.CanInt():
			fs.Int(s.Name, 0, usage)
		default:
			fs.String(s.Name, "", usage)
		}
	}
}

// apply sets what the flags given on the command line set.
func (f *Flags) apply(c *Config) error {
	if f.fs == nil {
		return nil
	}
	var err error
	f.fs.Visit(func(fl *flag.Flag) {
		for _, s := range flagSettings {
			if s.Name != fl.Name || err != nil {
				continue
			}
			name := settingName(s.Path)
			if problem := c.setText(s.Path, fl.Value.String()); problem != "" {
				err = &SettingError{Name: name, Source: "flag --" + fl.Name, Problem: problem}
				return
			}
			c.sources[name] = "flag --" + fl.Name
		}
	})
	return err
}

// plainValue is a default as help text shows it: 30s, :8080, 20.
func plainValue(v reflect.Value) string {
	if v.Type() == durationType {
		return shortDuration(Duration(v.Int()))
	}
	return fmt.Sprint(v.Interface())
}

// shortDuration writes 336h, 1m, 250ms rather than 336h0m0s.
func shortDuration(d Duration) string {
	s := time.Duration(d).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
