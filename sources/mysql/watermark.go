package mysql

import (
	"errors"
	"fmt"
	"strings"

	"github.com/go-mysql-org/go-mysql/client"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/sluice-cdc/sluice/pipeline"
)

// DefaultWatermarkTable is where incremental snapshots write their
// watermarks unless configured otherwise.
const DefaultWatermarkTable = "sluice.watermarks"

// watermarks is the table the incremental snapshot writes its watermarks
// into: one row per pipeline, (pipeline, token). Each watermark updates
// the pipeline's row in a transaction of its own (ChunkReader.Mark); the
// stream turns the row's new token into an OpWatermark record, placed in
// the binlog's commit order like any change.
type watermarks struct {
	db, table string
	pipeline  string
}

func (s *Source) watermarks() *watermarks {
	if s.opts.WatermarkTable == "" || s.opts.ReadOnlySnapshot {
		return nil
	}
	db, table, _ := strings.Cut(s.opts.WatermarkTable, ".")
	return &watermarks{db: db, table: table, pipeline: s.opts.Pipeline}
}

func (w *watermarks) quoted() string { return quoteIdent(w.db) + "." + quoteIdent(w.table) }

// is reports whether tm maps the watermark table.
func (w *watermarks) is(tm *replication.TableMapEvent) bool {
	return w != nil && tm != nil && strings.EqualFold(string(tm.Schema), w.db) && string(tm.Table) == w.table
}

// watermark turns the rows event of the watermark table into OpWatermark
// records: the new token of this pipeline's row, versioned in its
// transaction like a change. Other pipelines' rows and deletes are not
// watermarks of this one.
func (d *decoder) watermark(e *replication.RowsEvent) {
	step, img := 1, 0
	switch e.Type() {
	case replication.EnumRowsEventTypeInsert:
	case replication.EnumRowsEventTypeUpdate:
		step, img = 2, 1
	default:
		return
	}
	for r := 0; r+step <= len(e.Rows); r += step {
		i := d.nrows
		d.nrows++
		row := e.Rows[r+img]
		if d.skipped(i) || len(row) < 2 || row[0] == nil || row[1] == nil || textOf(row[0]) != d.marks.pipeline {
			continue
		}
		rec := pipeline.Record{Op: pipeline.OpWatermark, After: []any{textOf(row[1])}, EventTime: d.txTime, TxID: d.txID,
			Version: streamVersion(d.epoch, d.txFile, d.txStart, i)}
		d.recs = append(d.recs, rec)
	}
}

// ensure creates the watermark table when it is missing, or says what to
// run when the user may not.
func (w *watermarks) ensure(c *client.Conn) error {
	r, err := c.Execute("SELECT ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?", w.db, w.table)
	if err != nil {
		return fmt.Errorf("mysql source: look for the watermark table %s: %w", w.quoted(), err)
	}
	engine, _ := getString(r, 0, 0)
	found := len(r.Values) > 0
	r.Close()
	if found {
		if !strings.EqualFold(engine, "InnoDB") {
			return pipeline.Fatal(fmt.Errorf("mysql source: the watermark table %s uses %s; watermarks must commit with the binlog: "+
				"ALTER TABLE %s ENGINE=InnoDB", w.quoted(), engine, w.quoted()))
		}
		return nil
	}
	create := []string{
		"CREATE DATABASE IF NOT EXISTS " + quoteIdent(w.db),
		"CREATE TABLE IF NOT EXISTS " + w.quoted() + " (pipeline VARCHAR(191) NOT NULL PRIMARY KEY, " +
			"token VARCHAR(191) NOT NULL) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
	}
	for _, q := range create {
		if _, err := c.Execute(q); err != nil {
			if isPermanent(err) {
				return pipeline.Fatal(fmt.Errorf("mysql source: create the incremental snapshot's watermark table: %w; "+
					"run as an administrator: %s; %s; GRANT SELECT, INSERT, UPDATE ON %s TO <the source's user> "+
					"(or set snapshot.watermark_table to a table in a database the user may write; on a read-only server, "+
					"such as a replica, set snapshot.read_only: true instead)",
					err, create[0], create[1], w.quoted()))
			}
			return fmt.Errorf("mysql source: create the watermark table: %w", err)
		}
	}
	return nil
}

// logged refuses a server whose binlog filters (binlog_do_db,
// binlog_ignore_db) leave the watermark table's database out: its
// watermarks would never reach the stream, and every chunk would wait
// for them for ever.
func (w *watermarks) logged(c *client.Conn, srv *Server) error {
	r, err := c.Execute(binlogStatusQuery(srv))
	if err != nil {
		return fmt.Errorf("mysql source: read the binlog filters: %w", err)
	}
	defer r.Close()
	if len(r.Values) == 0 {
		return nil
	}
	do, _ := getStringByName(r, 0, "Binlog_Do_DB")
	ignore, _ := getStringByName(r, 0, "Binlog_Ignore_DB")
	if filteredOut(w.db, do, ignore) {
		return pipeline.Fatal(fmt.Errorf("mysql source: the server's binlog leaves out database %s (binlog_do_db %q, binlog_ignore_db %q), "+
			"so the incremental snapshot's watermarks in %s would never reach the stream: add it to binlog_do_db (or take it out of "+
			"binlog_ignore_db), or set snapshot.watermark_table to a table in a logged database", w.db, do, ignore, w.quoted()))
	}
	return nil
}

// filteredOut reports whether binlog filters (comma-separated database
// lists, as the binlog status shows them) leave db out of the binlog.
func filteredOut(db, do, ignore string) bool {
	in := func(list string) (listed, empty bool) {
		empty = true
		for _, d := range strings.Split(list, ",") {
			if d = strings.TrimSpace(d); d != "" {
				empty = false
				listed = listed || strings.EqualFold(d, db)
			}
		}
		return listed, empty
	}
	inDo, noDo := in(do)
	inIgnore, _ := in(ignore)
	return !noDo && !inDo || inIgnore
}

// isPermanent reports a server error that retrying cannot fix: a missing
// table, column or privilege, or SQL the server cannot parse (a request's
// filter).
func isPermanent(err error) bool {
	var me *gomysql.MyError
	if !errors.As(err, &me) {
		return false
	}
	switch me.Code {
	case gomysql.ER_NO_SUCH_TABLE, gomysql.ER_BAD_FIELD_ERROR, gomysql.ER_PARSE_ERROR, gomysql.ER_BAD_DB_ERROR,
		gomysql.ER_TABLEACCESS_DENIED_ERROR, gomysql.ER_COLUMNACCESS_DENIED_ERROR, gomysql.ER_DBACCESS_DENIED_ERROR,
		gomysql.ER_SPECIFIC_ACCESS_DENIED_ERROR, gomysql.ER_ACCESS_DENIED_ERROR, gomysql.ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION,
		gomysql.ER_SP_DOES_NOT_EXIST, gomysql.ER_OPTION_PREVENTS_STATEMENT, gomysql.ER_WRONG_VALUE_COUNT_ON_ROW, gomysql.ER_OPERAND_COLUMNS:
		return true
	}
	return false
}
