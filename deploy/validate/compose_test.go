package validate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestCompose checks docker-compose.yml's wiring of the observability
// profile and the healthchecks: every file it mounts exists, serve and
// worker are checked by prq doctor and stamped with the version build
// args, Prometheus loads the alert rules.
func TestCompose(t *testing.T) {
	b, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Services map[string]struct {
			Profiles []string `json:"profiles"`
			Build    struct {
				Args map[string]string `json:"args"`
			} `json:"build"`
			Volumes     []string `json:"volumes"`
			Healthcheck struct {
				Test []string `json:"test"`
			} `json:"healthcheck"`
		} `json:"services"`
	}
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	for name, s := range c.Services {
		for _, v := range s.Volumes {
			src, _, _ := strings.Cut(v, ":")
			if strings.HasPrefix(src, "./") && src != "./secrets" {
				if _, err := os.Stat(filepath.Join("../..", src)); err != nil {
					t.Errorf("%s mounts %s: %v", name, src, err)
				}
			}
		}
	}
	for _, name := range []string{"serve", "worker"} {
		if test := strings.Join(c.Services[name].Healthcheck.Test, " "); !strings.Contains(test, "/prq doctor --only ready") {
			t.Errorf("%s healthcheck %q does not run prq doctor --only ready", name, test)
		}
	}
	for _, name := range []string{"serve", "worker"} { // prq --version says what was built
		for arg, env := range map[string]string{"VERSION": "PRQ_VERSION", "COMMIT": "PRQ_COMMIT", "DATE": "PRQ_DATE"} {
			if got := c.Services[name].Build.Args[arg]; got != "${"+env+":-}" {
				t.Errorf("%s: build arg %s is %q, want ${%s:-}", name, arg, got, env)
			}
		}
	}
	for _, name := range []string{"prometheus", "grafana"} {
		if p := c.Services[name].Profiles; len(p) != 1 || p[0] != "observability" {
			t.Errorf("%s: profiles %v, want [observability]", name, p)
		}
	}
	prom, err := os.ReadFile("../prometheus/prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(prom), "/etc/prometheus/alerts.yml") || !strings.Contains(strings.Join(c.Services["prometheus"].Volumes, " "), "alerts.yml:/etc/prometheus/alerts.yml") {
		t.Errorf("Prometheus does not load the alert rules it mounts")
	}
}
