package validate

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

const dashboardFile = "../grafana/prq-dashboard.json"

// The part of Grafana's dashboard model (schemaVersion 39) prq uses;
// unknown fields are refused so that a typo does not pass silently.
type dashboard struct {
	UID           string   `json:"uid"`
	Title         string   `json:"title"`
	Description   string   `json:"description"`
	Tags          []string `json:"tags"`
	Timezone      string   `json:"timezone"`
	SchemaVersion int      `json:"schemaVersion"`
	Version       int      `json:"version"`
	Editable      bool     `json:"editable"`
	GraphTooltip  int      `json:"graphTooltip"`
	Refresh       string   `json:"refresh"`
	Time          struct{ From, To string }
	Templating    struct{ List []variable }
	Annotations   struct{ List []json.RawMessage }
	Links         []json.RawMessage `json:"links"`
	Panels        []panel           `json:"panels"`
}

type variable struct {
	Name       string          `json:"name"`
	Label      string          `json:"label"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	Datasource *datasource     `json:"datasource"`
	Definition string          `json:"definition"`
	IncludeAll bool            `json:"includeAll"`
	Multi      bool            `json:"multi"`
	AllValue   string          `json:"allValue"`
	Current    json.RawMessage `json:"current"`
	Refresh    int             `json:"refresh"`
	Hide       int             `json:"hide"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID          int                      `json:"id"`
	Type        string                   `json:"type"`
	Title       string                   `json:"title"`
	Description string                   `json:"description"`
	Datasource  *datasource              `json:"datasource"`
	GridPos     struct{ X, Y, W, H int } `json:"gridPos"`
	FieldConfig json.RawMessage          `json:"fieldConfig"`
	Options     json.RawMessage          `json:"options"`
	Targets     []target                 `json:"targets"`
	Collapsed   bool                     `json:"collapsed"`
	Panels      []panel                  `json:"panels"`
}

type target struct {
	RefID        string      `json:"refId"`
	Datasource   *datasource `json:"datasource"`
	Expr         string      `json:"expr"`
	LegendFormat string      `json:"legendFormat"`
	Range        bool        `json:"range"`
}

func TestDashboard(t *testing.T) {
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.UID == "" || d.Title == "" || d.SchemaVersion < 36 {
		t.Errorf("uid %q, title %q, schemaVersion %d: want both set and a schema of Grafana 10 or later", d.UID, d.Title, d.SchemaVersion)
	}
	vars := map[string]variable{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v
	}
	if ds := vars["datasource"]; ds.Type != "datasource" || !strings.Contains(string(ds.Query), "prometheus") {
		t.Errorf("no Prometheus datasource variable: %+v", ds)
	}
	known := knownMetrics(t)
	ids := map[int]bool{}
	want := []string{"prq_admission_incoming_tokens_total", "prq_admission_admitted_tokens_total", "prq_bucket_limit_tokens_per_second",
		"prq_admission_backlog_jobs", "prq_admission_wait_seconds_bucket", "prq_llm_calls_all_total", "prq_github_requests_all_total",
		"prq_webhook_deliveries_total", "process_resident_memory_bytes"}
	used := map[string]bool{}
	graphs := 0
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: gridPos %+v outside Grafana's 24 columns", p.Title, g)
		}
		switch p.Type {
		case "row":
			continue
		case "timeseries", "stat", "gauge", "table", "bargauge":
		default:
			t.Errorf("panel %q: unexpected type %q", p.Title, p.Type)
		}
		graphs++
		if p.Title == "" || p.Datasource == nil || p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: wants a title and the ${datasource} Prometheus datasource, got %+v", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no queries", p.Title)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if tg.RefID == "" || refs[tg.RefID] {
				t.Errorf("panel %q: refId %q missing or repeated", p.Title, tg.RefID)
			}
			refs[tg.RefID] = true
			// Grafana's variables, as Grafana substitutes them.
			expr := strings.NewReplacer("$__rate_interval", "1m", "$model", ".*").Replace(tg.Expr)
			for _, name := range metricNames(t, expr) {
				used[name] = true
				if !known[name] {
					t.Errorf("panel %q: metric %q is not among prq's (testdata/metrics.txt)", p.Title, name)
				}
			}
		}
	}
	for _, name := range want {
		if !used[name] {
			t.Errorf("no panel shows %s", name)
		}
	}
	if graphs < 10 {
		t.Errorf("%d panels", graphs)
	}
}
