package route

import (
	"context"
	"reflect"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/transform/scope"
)

var customers = &pipeline.Table{
	ID:      pipeline.TableID{Schema: "public", Table: "customers"},
	Columns: []pipeline.Column{{Name: "id", Type: pipeline.TypeInt64, Key: true}, {Name: "vip", Type: pipeline.TypeBool}},
	KeyIdx:  []int{0},
}

func TestRouteSendsRowsAwayFromOtherSinks(t *testing.T) {
	r, err := New("r", scope.Tables{}, scope.DLQ, Options{
		Rules:     []Rule{{When: `after.vip`, Sinks: []string{"vip", "duck"}}},
		Otherwise: []string{"main", "duck"},
		Sinks:     []string{"main", "vip", "duck"},
	})
	if err != nil {
		t.Fatal(err)
	}
	vip := []any{int64(1), true}
	plain := []any{int64(1), false}
	out, err := r.Process(context.Background(), []pipeline.Record{
		{Op: pipeline.OpInsert, Table: customers, After: vip},
		{Op: pipeline.OpUpdate, Table: customers, After: plain},
		{Op: pipeline.OpRead, Table: customers, After: vip, Snapshot: true},
		{Op: pipeline.OpDelete, Table: customers, Before: plain},
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []*pipeline.Dest{
		{To: []string{"vip", "duck"}},
		{To: []string{"main", "duck"}, Away: []string{"vip"}},
		{To: []string{"vip", "duck"}, Away: []string{"main"}},
		nil,
	} {
		if !reflect.DeepEqual(out[i].Dest, want) {
			t.Errorf("record %d: dest %v, want %v", i, out[i].Dest, want)
		}
	}
	// What each sink receives.
	for sink, ops := range map[string][]pipeline.Op{
		"main": {pipeline.OpUpdate, pipeline.OpDelete, pipeline.OpDelete},
		"vip":  {pipeline.OpInsert, pipeline.OpDelete, pipeline.OpRead, pipeline.OpDelete},
		"duck": {pipeline.OpInsert, pipeline.OpUpdate, pipeline.OpRead, pipeline.OpDelete},
	} {
		var got []pipeline.Op
		for _, rec := range pipeline.ForSink(sink, out) {
			got = append(got, rec.Op)
		}
		if !reflect.DeepEqual(got, ops) {
			t.Errorf("%s receives %v, want %v", sink, got, ops)
		}
	}
	// The delete a snapshot read becomes is a snapshot record (its
	// version need not follow the stream's order); an update's is not.
	var snap []bool
	for _, rec := range pipeline.ForSink("main", out) {
		snap = append(snap, rec.Snapshot)
	}
	if want := []bool{false, true, false}; !reflect.DeepEqual(snap, want) {
		t.Errorf("main's records are snapshot records %v, want %v", snap, want)
	}
	if _, err := New("r", scope.Tables{}, scope.DLQ, Options{Rules: []Rule{{When: "true", Sinks: []string{"nope"}}}, Sinks: []string{"main"}}); err == nil {
		t.Error("an unknown sink was taken")
	}
}

// Rules that name topics: a record goes to its rule's topic, an update or
// read is a delete in the route's other topics (the sink's own among
// them), and a delete goes to every topic.
func TestRouteTopics(t *testing.T) {
	r, err := New("r", scope.Tables{}, scope.DLQ, Options{
		Rules: []Rule{{When: `after.vip`, Topic: "{prefix}.vip.{table}"}},
		Sinks: []string{"kafka", "duck"},
	})
	if err != nil {
		t.Fatal(err)
	}
	out, err := r.Process(context.Background(), []pipeline.Record{
		{Op: pipeline.OpInsert, Table: customers, After: []any{int64(1), true}},
		{Op: pipeline.OpUpdate, Table: customers, After: []any{int64(1), false}},
		{Op: pipeline.OpRead, Table: customers, After: []any{int64(1), true}},
		{Op: pipeline.OpDelete, Table: customers, Before: []any{int64(1), true}},
	})
	if err != nil {
		t.Fatal(err)
	}
	all := []string{"kafka", "duck"}
	for i, want := range []*pipeline.Dest{
		{To: all, Topic: "{prefix}.vip.{table}"},
		{To: all, AwayTopics: []string{"{prefix}.vip.{table}"}},
		{To: all, Topic: "{prefix}.vip.{table}", AwayTopics: []string{""}},
		{To: all, AwayTopics: []string{"{prefix}.vip.{table}"}},
	} {
		if !reflect.DeepEqual(out[i].Dest, want) {
			t.Errorf("record %d: dest %v, want %v", i, out[i].Dest, want)
		}
	}
}
