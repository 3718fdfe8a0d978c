package redis

import (
	"errors"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
)

// other is a second table shaped like acct, the one a refusal of acct must
// not hold back.
var other = &pipeline.Table{ID: pipeline.TableID{Database: "d", Schema: "public", Table: "other"},
	Columns: acct.Columns, KeyIdx: acct.KeyIdx, Generation: 1}

func otherRow(minor uint64, id int64) pipeline.Record {
	r := row(pipeline.OpInsert, minor, id, "o", nil)
	r.Table = other
	return r
}

// wantTableError fails unless err is a *pipeline.TableError of table whose
// message holds want.
func wantTableError(t *testing.T, err error, table pipeline.TableID, want string) {
	t.Helper()
	var te *pipeline.TableError
	if !errors.As(err, &te) || te.Table != table || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v (%T), want a *pipeline.TableError of %s saying %q", err, err, table, want)
	}
	t.Logf("refused: %v", err)
}

// wantTransient fails unless err is a whole-batch error the runtime
// retries (no record, table or fatal verdict) whose message holds want.
func wantTransient(t *testing.T, err error, want string) {
	t.Helper()
	var be *pipeline.BatchError
	var te *pipeline.TableError
	if err == nil || errors.As(err, &be) || errors.As(err, &te) || pipeline.IsFatal(err) || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v (%T), want a transient error saying %q", err, err, want)
	}
	t.Logf("transient: %v", err)
}

// A column named like the sink's own field refuses its table before
// anything of the batch is written; the other tables go on.
func TestReservedColumnRefusesTable(t *testing.T) {
	eachFormat(t, func(t *testing.T, s *Sink, c *goredis.Client) {
		bad := &pipeline.Table{ID: pipeline.TableID{Database: "d", Schema: "public", Table: "bad"}, KeyIdx: []int{0}, Generation: 1,
			Columns: []pipeline.Column{{Name: "id", Type: pipeline.TypeInt64, Key: true}, {Name: fieldVersion, Type: pipeline.TypeString}}}
		err := s.Write(ctx, []pipeline.Record{otherRow(1, 1),
			{Op: pipeline.OpInsert, Table: bad, After: []any{int64(1), "x"}, Version: pipeline.Version{0, 100, 0, 2}}})
		wantTableError(t, err, bad.ID, `"_v" is reserved`)
		if n := c.Exists(ctx, "public.other:1").Val(); n != 0 {
			t.Fatal("a record of the batch was written although the batch was refused")
		}
		mustWrite(t, s, otherRow(1, 1))
	})
}

// A key the sink keeps for a table (its truncate barrier) that another
// program made a list fails that table, for rows and truncates alike; a
// row key of another type fails only its record
// (TestPermanentErrorIsPerRecord).
func TestForeignBarrierKeyRefusesTable(t *testing.T) {
	eachFormat(t, func(t *testing.T, s *Sink, c *goredis.Client) {
		if err := c.LPush(ctx, "public.acct#barrier", "not a version").Err(); err != nil {
			t.Fatal(err)
		}
		err := s.Write(ctx, []pipeline.Record{otherRow(1, 1), row(pipeline.OpInsert, 1, 1, "a", nil)})
		wantTableError(t, err, acct.ID, "WRONGTYPE")
		err = s.Write(ctx, []pipeline.Record{{Op: pipeline.OpTruncate, Table: acct, Version: pipeline.Version{0, 100, 0, 2}}})
		wantTableError(t, err, acct.ID, "WRONGTYPE")
		mustWrite(t, s, otherRow(2, 2))
	})
}

// An ACL that denies the sink's user one table's keys fails that table —
// its rows, its truncates and its snapshot mark — and no other.
func TestACLDeniedKeysRefuseTable(t *testing.T) {
	r := harness.RedisT(t)
	admin := client(t, r.Addr())
	if err := admin.Do(ctx, "ACL", "SETUSER", "sluice", "on", ">secret", "~public.acct*", "~sluice#*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	s := openSink(t, r.Addr(), Options{Username: "sluice", Password: "secret"})
	err := s.Write(ctx, []pipeline.Record{row(pipeline.OpInsert, 1, 1, "a", nil), otherRow(1, 1)})
	wantTableError(t, err, other.ID, "NOPERM")
	snap := otherRow(2, 2)
	snap.Snapshot = true
	wantTableError(t, s.Write(ctx, []pipeline.Record{snap}), other.ID, "NOPERM")
	err = s.Write(ctx, []pipeline.Record{{Op: pipeline.OpTruncate, Table: other, Version: pipeline.Version{0, 100, 0, 3}}})
	wantTableError(t, err, other.ID, "NOPERM")
	mustWrite(t, s, row(pipeline.OpInsert, 1, 1, "a", nil), row(pipeline.OpInsert, 1, 2, "b", nil))
	expect(t, s, []any{int64(1), "a", nil}, []any{int64(2), "b", nil})
}

// A server out of memory (maxmemory reached, noeviction) or turned into a
// read-only replica fails whole batches, which succeed once it is back.
func TestServerStatesAreTransient(t *testing.T) {
	for _, tc := range []struct {
		name, want  string
		enter, exit []any
	}{
		{"OOM", "OOM", []any{"CONFIG", "SET", "maxmemory", "1"}, []any{"CONFIG", "SET", "maxmemory", "0"}},
		{"READONLY", "READONLY", []any{"REPLICAOF", "127.0.0.1", "1"}, []any{"REPLICAOF", "NO", "ONE"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eachFormat(t, func(t *testing.T, s *Sink, c *goredis.Client) {
				mustWrite(t, s, row(pipeline.OpInsert, 1, 1, "a", nil))
				if err := c.Do(ctx, tc.enter...).Err(); err != nil {
					t.Fatal(err)
				}
				err := s.Write(ctx, []pipeline.Record{row(pipeline.OpUpdate, 2, 1, "b", nil), row(pipeline.OpInsert, 2, 2, "c", nil)})
				if cerr := c.Do(ctx, tc.exit...).Err(); cerr != nil {
					t.Fatal(cerr)
				}
				wantTransient(t, err, tc.want)
				mustWrite(t, s, row(pipeline.OpUpdate, 2, 1, "b", nil), row(pipeline.OpInsert, 2, 2, "c", nil))
				expect(t, s, []any{int64(1), "b", nil}, []any{int64(2), "c", nil})
			})
		})
	}
}
