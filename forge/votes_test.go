package forge_test

import (
	"reflect"
	"testing"

	"github.com/prq-dev/prq/forge"
)

func TestCountVotes(t *testing.T) {
	got := forge.CountVotes([]forge.Vote{
		{Who: "ana", Up: true}, {Who: "bo", Up: false}, {Who: "ana", Up: true}, // a repeat counts once
		{Who: "cy", Up: true}, {Who: "cy", Up: false}, // both: neither
		{Who: "dee", Up: true},
	})
	want := forge.Votes{Up: []string{"ana", "dee"}, Down: []string{"bo"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("CountVotes = %+v, want %+v", got, want)
	}
	if v := forge.CountVotes(nil); len(v.Up)+len(v.Down) != 0 {
		t.Errorf("no votes: %+v", v)
	}
}
