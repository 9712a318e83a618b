package render

import (
	"strings"
	"testing"
)

func TestMarkersAreKeyedAndDistinct(t *testing.T) {
	m := NewMarkers([]byte("webhook secret one"))
	other := NewMarkers([]byte("webhook secret two"))
	seen := map[string]string{}
	for name, got := range map[string]string{
		"summary 1":         m.Summary("7/acme/w#5", 1),
		"summary 2":         m.Summary("7/acme/w#5", 2),
		"other PR":          m.Summary("7/acme/w#6", 1),
		"other install":     m.Summary("8/acme/w#5", 1),
		"other secret":      other.Summary("7/acme/w#5", 1),
		"review":            m.Review("7/acme/w#5", "abc"),
		"review other head": m.Review("7/acme/w#5", "abd"),
		"reply":             m.Reply("7/acme/w#5", 11),
		"finding":           m.Finding("7/acme/w#5", "0123abcd"),
		"finding other PR":  m.Finding("7/acme/w#6", "0123abcd"),
		"check":             m.CheckRun("7/acme/w#5", "abc"),
	} {
		if prev, dup := seen[got]; dup {
			t.Errorf("%s and %s share %q", name, prev, got)
		}
		seen[got] = name
		if !strings.HasPrefix(got, "<!-- prq:") && !strings.HasPrefix(got, "prq:") {
			t.Errorf("%s: %q", name, got)
		}
	}
	if m.Summary("7/acme/w#5", 1) != NewMarkers([]byte("webhook secret one")).Summary("7/acme/w#5", 1) {
		t.Error("markers are not stable across processes")
	}
	if strings.Contains(m.Summary("p", 1), "webhook secret") {
		t.Error("the secret leaks into a marker")
	}
}
