package config

import (
	"flag"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestEnvSettings: each variable of the loader's list sets its setting
// and is named as its source; a bad value is refused naming the variable.
func TestEnvSettings(t *testing.T) {
	samples := map[reflect.Kind]string{reflect.String: "https://sample.example/x", reflect.Bool: "true", reflect.Int64: "42", reflect.Int: "42"}
	for _, e := range envSettings {
		t.Run(e.Name, func(t *testing.T) {
			c := Default()
			v, err := field(&c, e.Path)
			if err != nil {
				t.Fatal(err)
			}
			kind := v.Kind()
			sample, ok := samples[kind]
			if v.Type() == durationType {
				sample = "42s"
			}
			if !ok {
				t.Fatalf("no sample for a %s", kind)
			}
			got, err := Load(func(k string) string { return map[string]string{e.Name: sample}[k] }, nil)
			if err != nil {
				t.Fatal(err)
			}
			v, _ = field(got, e.Path)
			val := fmt.Sprint(v.Interface())
			if v.Type() == durationType {
				val = shortDuration(Duration(v.Int()))
			}
			if val != sample && !(v.Type() == secretType && string(v.Interface().(Secret)) == sample) {
				t.Fatalf("%s=%q left %s = %v", e.Name, sample, e.Path, v.Interface())
			}
			if got.SetBy(e.Name) != "environment" {
				t.Fatalf("SetBy(%s) = %q", e.Name, got.SetBy(e.Name))
			}
		})
	}
	for name, bad := range map[string]string{"GITHUB_APP_ID": "twelve", "PRQ_ALLOW_NO_PERSISTENCE": "perhaps"} {
		_, err := Load(func(k string) string { return map[string]string{name: bad}[k] }, nil)
		if err == nil || !strings.Contains(err.Error(), name+" (from environment)") {
			t.Errorf("%s=%q: %v", name, bad, err)
		}
	}
}

// TestFlagSettings: each flag sets its setting, wins over the
// environment and is named as the source; a flag not given changes
// nothing; the help text shows the variable and the default.
func TestFlagSettings(t *testing.T) {
	samples := map[string]string{"addr": "127.0.0.1:9999", "redis-url": "redis://flag:6379", "log-format": "json", "log-level": "debug",
		"concurrency": "7", "shutdown-timeout": "45s", "allow-eviction": "true", "allow-no-persistence": "true"}
	for _, s := range flagSettings {
		t.Run(s.Name, func(t *testing.T) {
			fs := flag.NewFlagSet("x", flag.ContinueOnError)
			var fl Flags
			fl.Register(fs)
			if err := fs.Parse([]string{"--" + s.Name + "=" + samples[s.Name]}); err != nil {
				t.Fatal(err)
			}
			env := map[string]string{"PRQ_ADDR": "0.0.0.0:1", "REDIS_URL": "redis://env:6379", "PRQ_ALLOW_NO_PERSISTENCE": "false"}
			c, err := Load(func(k string) string { return env[k] }, &fl)
			if err != nil {
				t.Fatal(err)
			}
			v, _ := field(c, s.Path)
			got := fmt.Sprint(v.Interface())
			if v.Type() == durationType {
				got = time.Duration(v.Int()).String()
			}
			if got != samples[s.Name] {
				t.Fatalf("--%s=%s left %s = %s", s.Name, samples[s.Name], s.Path, got)
			}
			if by := c.SetBy(settingName(s.Path)); by != "flag --"+s.Name {
				t.Fatalf("SetBy(%s) = %q", settingName(s.Path), by)
			}
			// no flag: the environment stays
			fs = flag.NewFlagSet("x", flag.ContinueOnError)
			fl = Flags{}
			fl.Register(fs)
			c, err = Load(func(k string) string { return env[k] }, &fl)
			if err != nil {
				t.Fatal(err)
			}
			if c.Addr != env["PRQ_ADDR"] || c.RedisURL != env["REDIS_URL"] {
				t.Fatalf("with no flags: addr %q, redis_url %q", c.Addr, c.RedisURL)
			}
		})
	}
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	(&Flags{}).Register(fs)
	if u := fs.Lookup("addr").Usage; u != "HTTP listen address (env PRQ_ADDR; default :8080)" {
		t.Errorf("--addr usage %q", u)
	}
	if u := fs.Lookup("shutdown-timeout").Usage; !strings.HasSuffix(u, "(env PRQ_SHUTDOWN_TIMEOUT; default 30s)") {
		t.Errorf("--shutdown-timeout usage %q", u)
	}
	var fl Flags
	fs = flag.NewFlagSet("x", flag.ContinueOnError)
	fl.Register(fs)
	_ = fs.Parse([]string{"--concurrency=-3"})
	if _, err := Load(func(string) string { return "" }, &fl); err == nil || !strings.Contains(err.Error(), "PRQ_CONCURRENCY (from flag --concurrency)") {
		t.Errorf("--concurrency=-3: %v", err)
	}
}
