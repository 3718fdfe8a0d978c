package postgres

import (
	"context"
	"fmt"
	"strings"

	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
)

// PreflightError lists every problem that keeps the source from starting,
// each with the statement or setting that fixes it.
type PreflightError struct {
	Problems []string
}

func (e *PreflightError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "postgres source: preflight found %d problem(s):", len(e.Problems))
	for i, p := range e.Problems {
		fmt.Fprintf(&b, "\n  %d. %s", i+1, p)
	}
	return b.String()
}

// tableCheck is what preflight learns about one configured table.
type tableCheck struct {
	ref         TableRef
	exists      bool
	kind        string
	replident   string
	schemaUsage bool
	canSelect   bool
	hasPK       bool
	// pkDeferrable: the primary key is DEFERRABLE, so it cannot be the
	// replica identity (DEFAULT then identifies nothing).
	pkDeferrable bool
	hasRIIndex   bool
	// riIndexNotPK names the replica identity index when the table has a
	// primary key on other columns ("" otherwise).
	riIndexNotPK string
	owned        bool
	toastable    []string
}

// preflight checks the server settings, the role and every table, and
// returns all problems at once (pipeline.Fatal: retrying cannot fix them).
// Tables listed in FullIdentityTables are switched to REPLICA IDENTITY FULL
// when the role owns them.
func (s *Source) preflight(ctx context.Context) error {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	var (
		walLevel, keepSize       string
		maxSlots, maxSenders     int
		usedSlots, usedSenders   int
		slotExists               bool
		role                     string
		super, repl, rdsRepl     bool
		versionOK                = s.version >= 100000
		walSenderCount, slotsSQL = "(SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'walsender')", "(SELECT count(*) FROM pg_replication_slots)"
	)
	err := s.pool.QueryRow(ctx, `SELECT current_setting('wal_level'),
		coalesce(current_setting('max_slot_wal_keep_size', true), ''),
		current_setting('max_replication_slots')::int, current_setting('max_wal_senders')::int,
		`+slotsSQL+`, `+walSenderCount+`,
		EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1),
		r.rolname, r.rolsuper, r.rolreplication,
		EXISTS (SELECT 1 FROM pg_roles g WHERE g.rolname = 'rds_replication' AND pg_has_role(r.oid, g.oid, 'MEMBER'))
		FROM pg_roles r WHERE r.rolname = current_user`, s.opts.Slot).Scan(
		&walLevel, &keepSize, &maxSlots, &maxSenders, &usedSlots, &usedSenders, &slotExists,
		&role, &super, &repl, &rdsRepl)
	if err != nil {
		return fmt.Errorf("postgres source: preflight: read server settings: %w", err)
	}
	if !versionOK {
		add("PostgreSQL %d is too old: logical replication with pgoutput needs PostgreSQL 10 or newer", s.version)
	}
	if s.standby {
		var feedback string
		if err := s.pool.QueryRow(ctx, "SELECT current_setting('hot_standby_feedback')").Scan(&feedback); err != nil {
			return fmt.Errorf("postgres source: preflight: read server settings: %w", err)
		}
		switch {
		case s.version < 160000:
			add("the server is a hot standby running PostgreSQL %d: logical decoding on a standby needs PostgreSQL 16 or newer; "+
				"point the source at the primary", s.version)
		case feedback != "on":
			// Without it the primary removes rows the slot still needs and
			// the standby invalidates the slot.
			add("the server is a hot standby with hot_standby_feedback off, which lets the primary remove rows the slot still " +
				"needs (the standby then invalidates the slot): set hot_standby_feedback = on on the standby " +
				"(ALTER SYSTEM SET hot_standby_feedback = on; SELECT pg_reload_conf();)")
		}
	}
	if walLevel != "logical" {
		add("wal_level is %q, logical decoding needs 'logical': run `ALTER SYSTEM SET wal_level = logical;` then restart PostgreSQL", walLevel)
	}
	if !super && !repl && !rdsRepl {
		add("role %s may not use replication: run `ALTER ROLE %s WITH REPLICATION;` (on RDS/Aurora: `GRANT rds_replication TO %s;`)",
			role, quoteIdent(role), quoteIdent(role))
	}
	if !slotExists && usedSlots >= maxSlots {
		add("all %d replication slots are in use (max_replication_slots): drop an unused slot with `SELECT pg_drop_replication_slot('name');` "+
			"or raise max_replication_slots and restart PostgreSQL", maxSlots)
	}
	if usedSenders >= maxSenders {
		add("all %d WAL sender processes are in use (max_wal_senders): raise max_wal_senders and restart PostgreSQL", maxSenders)
	}
	if keepSize == "-1" {
		s.log.Warn("max_slot_wal_keep_size is -1: the slot retains WAL without bound while sluice is stopped or behind; " +
			"consider a limit (ALTER SYSTEM SET max_slot_wal_keep_size = '50GB') and watch the slot retained-WAL metric")
	}

	checks, err := s.checkTables(ctx)
	if err != nil {
		return err
	}
	var noIdentity []string
	for _, c := range checks {
		name := c.ref.quoted()
		switch {
		case !c.exists:
			add("table %s does not exist (check the name, its schema, and the database in the DSN: %s)", tableName(c.ref), s.database)
			continue
		case c.kind == "p":
			add("table %s is partitioned: list its partitions instead (partitioned parents are not captured yet)", tableName(c.ref))
			continue
		case c.kind != "r":
			add("%s is not a table (relkind %q): only ordinary tables can be captured", tableName(c.ref), c.kind)
			continue
		}
		if !c.schemaUsage {
			add("role %s may not use schema %s: run `GRANT USAGE ON SCHEMA %s TO %s;`", role, c.ref.Schema, quoteIdent(c.ref.Schema), quoteIdent(role))
		}
		if !c.canSelect {
			add("role %s may not read table %s: run `GRANT SELECT ON %s TO %s;`", role, tableName(c.ref), name, quoteIdent(role))
		}
		identified := c.replident == "f" || (c.replident == "i" && c.hasRIIndex) || (c.replident == "d" && c.hasPK && !c.pkDeferrable)
		if s.full[c.ref] {
			if c.replident != "f" {
				if c.owned {
					if err := s.execWrite(ctx, "ALTER TABLE "+name+" REPLICA IDENTITY FULL"); err != nil {
						add("table %s is listed in full_identity_tables but setting REPLICA IDENTITY FULL failed (%v): run `ALTER TABLE %s REPLICA IDENTITY FULL;` as its owner", tableName(c.ref), err, name)
					} else {
						s.log.Info("set REPLICA IDENTITY FULL (listed in full_identity_tables)", zap.String("table", tableName(c.ref)))
					}
				} else {
					add("table %s is listed in full_identity_tables but has REPLICA IDENTITY %s: run `ALTER TABLE %s REPLICA IDENTITY FULL;` as its owner",
						tableName(c.ref), replidentName(c.replident), name)
				}
			}
			continue
		}
		if c.riIndexNotPK != "" {
			add("table %s has REPLICA IDENTITY USING INDEX %s, which is not on its primary key's columns: its deletes and "+
				"primary-key updates carry that index's columns, not the primary key the sinks find rows by, so they would leave "+
				"rows behind. Run `ALTER TABLE %s REPLICA IDENTITY DEFAULT;` as its owner, or list it in full_identity_tables",
				tableName(c.ref), c.riIndexNotPK, name)
			continue
		}
		if !identified && c.replident == "d" && c.hasPK {
			// Published under DEFAULT, its UPDATEs and DELETEs would fail
			// in the application ("does not have a replica identity").
			add("table %s has a DEFERRABLE primary key, which PostgreSQL cannot use as its replica identity: once published, "+
				"its updates and deletes would fail. List it in full_identity_tables, or run `ALTER TABLE %s REPLICA IDENTITY FULL;` "+
				"as its owner", tableName(c.ref), name)
			continue
		}
		if !identified {
			noIdentity = append(noIdentity, tableName(c.ref))
			continue
		}
		if c.replident != "f" && len(c.toastable) > 0 {
			// Invariant 9: a condition that changes what sinks receive is logged.
			s.log.Warn("table has REPLICA IDENTITY "+replidentName(c.replident)+" and columns that can be TOAST-ed: "+
				"an update that leaves such a large value unchanged sends it as \"unchanged\", and sinks keep the value they "+
				"already hold; the value cannot be re-derived from that event alone. To carry every value with every update, "+
				"list the table in full_identity_tables (REPLICA IDENTITY FULL; it writes more WAL)",
				zap.String("table", tableName(c.ref)), zap.Strings("columns", c.toastable))
		}
	}
	if len(noIdentity) > 0 {
		add("table(s) without a primary key or replica identity index: %s; updates and deletes of these cannot be keyed. "+
			"Add a primary key, or run `ALTER TABLE <table> REPLICA IDENTITY USING INDEX <unique index on NOT NULL columns>;`, "+
			"or list them in full_identity_tables to capture them with REPLICA IDENTITY FULL (the whole old row identifies it)",
			strings.Join(noIdentity, ", "))
	}
	if len(problems) > 0 {
		return pipeline.Fatal(&PreflightError{Problems: problems})
	}
	return nil
}

func (s *Source) checkTables(ctx context.Context) ([]tableCheck, error) {
	schemas := make([]string, len(s.tables))
	names := make([]string, len(s.tables))
	for i, t := range s.tables {
		schemas[i], names[i] = t.Schema, t.Name
	}
	rows, err := s.pool.Query(ctx, `SELECT t.ord, c.oid IS NOT NULL, coalesce(c.relkind::text, ''), coalesce(c.relreplident::text, ''),
		coalesce(has_schema_privilege(n.oid, 'USAGE'), false),
		coalesce(has_table_privilege(c.oid, 'SELECT'), false),
		coalesce(EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary), false),
		coalesce(EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conrelid = c.oid AND k.contype = 'p' AND k.condeferrable), false),
		coalesce(EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisreplident), false),
		coalesce((SELECT ri.indexrelid::regclass::text FROM pg_index ri JOIN pg_index pk ON pk.indrelid = ri.indrelid AND pk.indisprimary
			WHERE ri.indrelid = c.oid AND ri.indisreplident AND c.relreplident = 'i'
			AND (SELECT array_agg(k ORDER BY k) FROM unnest(ri.indkey::int2[]) k) <> (SELECT array_agg(k ORDER BY k) FROM unnest(pk.indkey::int2[]) k)), ''),
		coalesce(pg_has_role(c.relowner, 'USAGE'), false),
		coalesce(ARRAY(SELECT a.attname::text FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0
			AND NOT a.attisdropped AND a.attstorage IN ('x', 'e', 'm') ORDER BY a.attnum), '{}')
		FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS t(schema, name, ord)
		LEFT JOIN pg_namespace n ON n.nspname = t.schema
		LEFT JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = t.name
		ORDER BY t.ord`, schemas, names)
	if err != nil {
		return nil, fmt.Errorf("postgres source: preflight: inspect tables: %w", err)
	}
	defer rows.Close()
	var out []tableCheck
	for rows.Next() {
		var ord int64
		var c tableCheck
		if err := rows.Scan(&ord, &c.exists, &c.kind, &c.replident, &c.schemaUsage, &c.canSelect,
			&c.hasPK, &c.pkDeferrable, &c.hasRIIndex, &c.riIndexNotPK, &c.owned, &c.toastable); err != nil {
			return nil, fmt.Errorf("postgres source: preflight: inspect tables: %w", err)
		}
		c.ref = s.tables[ord-1]
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres source: preflight: inspect tables: %w", err)
	}
	return out, nil
}

func replidentName(r string) string {
	switch r {
	case "d":
		return "DEFAULT"
	case "f":
		return "FULL"
	case "i":
		return "USING INDEX"
	case "n":
		return "NOTHING"
	}
	return r
}
