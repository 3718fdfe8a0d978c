package redis

import (
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/sinktest"
)

// A crash between an added column's fill and its entry in the columns
// set: the restarted sink fills again (changing nothing), records the
// column, and every older row holds the missing value; the row written
// with the new shape keeps its own value, a NULL included.
func TestAddedColumnFillResumesAfterACrash(t *testing.T) {
	eachFormat(t, func(t *testing.T, s *Sink, c *goredis.Client) {
		mustWrite(t, s, row(pipeline.OpInsert, 1, 1, "a", nil), row(pipeline.OpInsert, 2, 2, "b", nil), row(pipeline.OpInsert, 3, 3, "c", nil))
		v2 := &pipeline.Table{ID: acct.ID, KeyIdx: acct.KeyIdx, Generation: 2, Columns: append(append([]pipeline.Column{}, acct.Columns...),
			pipeline.Column{Name: "tier", Type: pipeline.TypeString, Nullable: true, Missing: "basic"})}
		// The fill alone, as a crash before the SADD would leave it.
		s.mu.Lock()
		_, err := s.fill(ctx, s.info(v2), []any{"tier", "basic"})
		s.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		if c.SIsMember(ctx, columnsKey(s.info(v2).base), "tier").Val() {
			t.Fatal("the fill recorded the column")
		}
		s2 := openSink(t, s.opts.Addr, s.opts)
		mustWrite(t, s2, pipeline.Record{Op: pipeline.OpUpdate, Table: v2, Version: pipeline.Version{0, 100, 0, 4},
			After: []any{int64(1), "a'", nil, nil}})
		want := map[string][]any{}
		for _, r := range [][]any{{int64(1), "a'", nil, nil}, {int64(2), "b", nil, "basic"}, {int64(3), "c", nil, "basic"}} {
			want[sinktest.RowKey(v2, r)] = r
		}
		if diff := sinktest.Diff(v2, want, readMap(t, s2, v2)); diff != "" {
			t.Fatal(diff)
		}
		if !c.SIsMember(ctx, columnsKey(s.info(v2).base), "tier").Val() {
			t.Fatal("the column is not recorded after the write")
		}
	})
}
