package snapshot

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluice-cdc/sluice/pipeline"
)

// missingSource is a fakeSource that says it missed changes of tables.
type missingSource struct {
	fakeSource
	missed []pipeline.TableID
}

func (s *missingSource) Missed() []pipeline.TableID { return s.missed }

// Tables a resumed source says it missed changes of are read again, once:
// a table new to the pipeline, which it also names (Postgres adds it to
// the publication at start), is snapshotted as added and not twice. A
// fresh start asks nothing.
func TestTablesMissedWhileStoppedAreReadAgain(t *testing.T) {
	db := newFakeDB(t)
	known, added := db.table.ID, pipeline.TableID{Database: "db", Schema: "s", Table: "u"}
	for _, c := range []struct {
		from pipeline.Position
		want string
	}{
		{wrap(pipeline.Position(`{"n":1}`), []byte(`{"known":["`+known.String()+`"]}`)), fmt.Sprint([]pipeline.TableID{added, known})},
		{nil, fmt.Sprint([]pipeline.TableID{known, added})},
	} {
		src := &missingSource{fakeSource: fakeSource{db: db}, missed: []pipeline.TableID{known, added}}
		e := New(src, db, Options{Tables: []pipeline.TableID{known, added}, Fresh: true})
		if err := e.Open(context.Background(), c.from); err != nil {
			t.Fatal(err)
		}
		e.mu.Lock()
		var runs []pipeline.TableID
		for _, tp := range e.prog.Tables {
			runs = append(runs, tp.id())
		}
		e.mu.Unlock()
		got := fmt.Sprint(runs)
		_ = e.Close(context.Background())
		if got != c.want {
			t.Errorf("from %s: snapshot runs of %s, want %s", c.from, got, c.want)
		}
	}
}
