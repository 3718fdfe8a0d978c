package mysql

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/go-mysql-org/go-mysql/client"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"
)

// PreflightError lists every problem that keeps the source from starting,
// each with the statement or setting that fixes it.
type PreflightError struct {
	Problems []string
}

func (e *PreflightError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "mysql source: preflight found %d problem(s):", len(e.Problems))
	for i, p := range e.Problems {
		fmt.Fprintf(&b, "\n  %d. %s", i+1, p)
	}
	return b.String()
}

// Server is what preflight learned about the server.
type Server struct {
	MariaDB  bool
	Version  string // VERSION()
	Major    int
	Minor    int
	Patch    int
	UUID     string // @@server_uuid (MySQL) or "" (MariaDB)
	ServerID uint32 // @@server_id
	// Warnings are advisories that do not stop the source (e.g. MariaDB
	// without gtid_strict_mode, a short binlog retention).
	Warnings []string
}

// atLeast reports whether the server version is at least maj.min.patch.
func (s *Server) atLeast(maj, min, patch int) bool {
	if s.Major != maj {
		return s.Major > maj
	}
	if s.Minor != min {
		return s.Minor > min
	}
	return s.Patch >= patch
}

// PreflightOptions is what preflight checks against.
type PreflightOptions struct {
	// Tables are "database.table" names; each must exist, be readable and
	// have a primary key.
	Tables []string
	// ServerID is the replica id the source will use; it must differ from
	// the server's own and from every connected replica's.
	ServerID uint32
	// ReportHost is the host name the source registers with. A connected
	// replica with the pipeline's server id and this host is the
	// pipeline's own earlier session (after a crash the server keeps it
	// until it notices, and replaces it when the source connects again),
	// not a clash.
	ReportHost string
	// MinRetentionSeconds warns when the binlog is kept for less (0: 24h).
	MinRetentionSeconds int64
	// CascadeTables are captured tables accepted as children of cascading
	// foreign keys (checkCascades).
	CascadeTables []string
}

// Preflight checks the server settings, privileges and tables the binlog
// source needs, and returns every problem at once, each naming the exact
// statement or setting that fixes it (a *PreflightError).
func Preflight(ctx context.Context, c *client.Conn, o PreflightOptions) (*Server, error) {
	srv := &Server{}
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	vars, err := variables(c, "version", "server_id", "server_uuid", "log_bin", "binlog_format", "binlog_row_image",
		"binlog_row_metadata", "binlog_row_value_options", "gtid_mode", "enforce_gtid_consistency", "gtid_strict_mode",
		"binlog_expire_logs_seconds", "expire_logs_days")
	if err != nil {
		return nil, fmt.Errorf("mysql source: read server variables: %w", err)
	}
	srv.Version = vars["version"]
	srv.MariaDB = strings.Contains(strings.ToLower(srv.Version), "mariadb")
	srv.Major, srv.Minor, srv.Patch = parseVersion(srv.Version)
	srv.UUID = vars["server_uuid"]
	if id, err := strconv.ParseUint(vars["server_id"], 10, 32); err == nil {
		srv.ServerID = uint32(id)
	}
	restart := "in the [mysqld] section of the server's option file, then restart the server"

	if !on(vars["log_bin"]) {
		add("the binary log is off: set log_bin=mysql-bin (and server_id=1 or another id) %s", restart)
	}
	if v := strings.ToUpper(vars["binlog_format"]); v != "ROW" {
		add("binlog_format is %s, must be ROW: run SET GLOBAL binlog_format = 'ROW' and set binlog_format=ROW %s", v, restart)
	}
	if v := strings.ToUpper(vars["binlog_row_image"]); v != "FULL" {
		add("binlog_row_image is %s, must be FULL (unchanged columns would be missing): run SET GLOBAL binlog_row_image = 'FULL' "+
			"and set binlog_row_image=FULL %s", v, restart)
	}
	metadataSince := "MySQL 8.0.1"
	metadataOK := srv.atLeast(8, 0, 1)
	if srv.MariaDB {
		metadataSince, metadataOK = "MariaDB 10.5", srv.atLeast(10, 5, 0)
	}
	switch v, ok := vars["binlog_row_metadata"]; {
	case !ok || !metadataOK:
		add("server %s cannot log column names and key metadata (binlog_row_metadata needs %s or newer): upgrade the server",
			srv.Version, metadataSince)
	case strings.ToUpper(v) != "FULL":
		add("binlog_row_metadata is %s, must be FULL (rows are decoded with the column names and keys logged with them): "+
			"run SET GLOBAL binlog_row_metadata = 'FULL' and set binlog_row_metadata=FULL %s", v, restart)
	}
	if v := vars["binlog_row_value_options"]; !srv.MariaDB && strings.Contains(strings.ToUpper(v), "PARTIAL_JSON") {
		add("binlog_row_value_options is %s: partial JSON updates cannot be applied to a copy: run "+
			"SET GLOBAL binlog_row_value_options = '' and remove the setting %s", v, restart)
	}
	if srv.MariaDB {
		if !on(vars["gtid_strict_mode"]) {
			srv.Warnings = append(srv.Warnings, "gtid_strict_mode is OFF; ON is recommended so GTID positions stay ordered: "+
				"run SET GLOBAL gtid_strict_mode = ON and set gtid_strict_mode=ON "+restart)
		}
	} else {
		if !on(vars["enforce_gtid_consistency"]) {
			add("enforce_gtid_consistency is %s, must be ON: run SET GLOBAL enforce_gtid_consistency = ON "+
				"and set enforce_gtid_consistency=ON %s", orNone(vars["enforce_gtid_consistency"]), restart)
		}
		if !on(vars["gtid_mode"]) {
			add("gtid_mode is %s, must be ON: step it up with SET GLOBAL gtid_mode = OFF_PERMISSIVE; SET GLOBAL gtid_mode = ON_PERMISSIVE; "+
				"SET GLOBAL gtid_mode = ON, and set gtid_mode=ON %s", orNone(vars["gtid_mode"]), restart)
		}
	}
	minKeep := o.MinRetentionSeconds
	if minKeep <= 0 {
		minKeep = 24 * 3600
	}
	if keep, ok := retentionSeconds(vars); ok && keep > 0 && keep < minKeep {
		name := "binlog_expire_logs_seconds"
		if _, has := vars[name]; !has {
			name = "expire_logs_days"
		}
		srv.Warnings = append(srv.Warnings, fmt.Sprintf("binary logs are purged after %ds; a longer outage than that needs a new "+
			"snapshot: raise %s (e.g. SET GLOBAL binlog_expire_logs_seconds = 604800)", keep, name))
	}

	problems = append(problems, checkGrants(c, srv)...)
	problems = append(problems, checkTables(c, o.Tables)...)
	problems = append(problems, checkFilters(c, srv, o.Tables, restart)...)
	problems = append(problems, checkCascades(c, o.Tables, o.CascadeTables)...)
	if o.ServerID != 0 {
		if o.ServerID == srv.ServerID {
			add("server_id %d of this pipeline is the server's own @@server_id: set another server_id in the source config", o.ServerID)
		}
		if reps, err := replicas(c, srv); err == nil {
			for _, r := range reps {
				if r.id == o.ServerID && (o.ReportHost == "" || r.host != o.ReportHost) {
					add("server_id %d of this pipeline is already used by a connected replica: set another server_id in the source config", o.ServerID)
				}
			}
		}
	}
	if len(problems) > 0 {
		return srv, &PreflightError{Problems: problems}
	}
	return srv, ctx.Err()
}

// variables reads global variables; absent ones are missing from the map.
func variables(c *client.Conn, names ...string) (map[string]string, error) {
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = "'" + n + "'"
	}
	r, err := c.Execute("SHOW GLOBAL VARIABLES WHERE Variable_name IN (" + strings.Join(quoted, ",") + ")")
	if err != nil {
		return nil, err
	}
	defer r.Close()
	out := map[string]string{}
	for i := range r.Values {
		name, _ := getString(r, i, 0)
		val, _ := getString(r, i, 1)
		out[strings.ToLower(name)] = val
	}
	return out, nil
}

func on(v string) bool {
	v = strings.ToUpper(v)
	return v == "ON" || v == "1"
}

func orNone(v string) string {
	if v == "" {
		return "not set"
	}
	return v
}

// parseVersion reads "10.11.6-MariaDB-0+deb12u1" or "8.0.36".
func parseVersion(v string) (maj, min, patch int) {
	head, _, _ := strings.Cut(v, "-")
	parts := strings.SplitN(head, ".", 3)
	nums := make([]int, 3)
	for i := 0; i < len(parts) && i < 3; i++ {
		nums[i], _ = strconv.Atoi(strings.TrimFunc(parts[i], func(r rune) bool { return r < '0' || r > '9' }))
	}
	return nums[0], nums[1], nums[2]
}

// retentionSeconds is how long binary logs are kept (0: forever).
func retentionSeconds(vars map[string]string) (int64, bool) {
	if v, ok := vars["binlog_expire_logs_seconds"]; ok {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n > 0 {
			return n, true
		}
	}
	if v, ok := vars["expire_logs_days"]; ok {
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			return int64(f * 86400), true
		}
	}
	return 0, false
}

// checkGrants verifies the replication privileges by what the session can
// do: reading the binlog status needs REPLICATION CLIENT (MariaDB 10.5+:
// BINLOG MONITOR), and SHOW GRANTS must list REPLICATION SLAVE (MariaDB
// 10.5+: REPLICATION SLAVE too) or ALL PRIVILEGES.
func checkGrants(c *client.Conn, srv *Server) []string {
	var problems []string
	user, err := currentUser(c)
	if err != nil {
		return []string{fmt.Sprintf("cannot read the session's user: %v", err)}
	}
	statusPriv := "REPLICATION CLIENT"
	if srv.MariaDB && srv.atLeast(10, 5, 2) {
		statusPriv = "BINLOG MONITOR"
	}
	if _, err := c.Execute(binlogStatusQuery(srv)); err != nil {
		if isAccessDenied(err) {
			problems = append(problems, fmt.Sprintf("%s lacks %s (needed to read binlog positions): run GRANT %s ON *.* TO %s",
				user, statusPriv, statusPriv, user))
		} else {
			problems = append(problems, fmt.Sprintf("cannot read the binlog status: %v", err))
		}
	}
	r, err := c.Execute("SHOW GRANTS")
	if err != nil {
		return append(problems, fmt.Sprintf("cannot read the grants of %s: %v", user, err))
	}
	defer r.Close()
	slave := false
	for i := range r.Values {
		g, _ := getString(r, i, 0)
		g = strings.ToUpper(g)
		if strings.Contains(g, "ON *.*") && (strings.Contains(g, "ALL PRIVILEGES") || strings.Contains(g, "REPLICATION SLAVE")) {
			slave = true
		}
	}
	if !slave {
		problems = append(problems, fmt.Sprintf("%s lacks REPLICATION SLAVE (needed to read the binlog): run GRANT REPLICATION SLAVE ON *.* TO %s",
			user, user))
	}
	return problems
}

// binlogStatusQuery is the statement that shows the current binlog file
// and position on this server version.
func binlogStatusQuery(srv *Server) string {
	switch {
	case srv.MariaDB && srv.atLeast(10, 5, 2):
		return "SHOW BINLOG STATUS"
	case !srv.MariaDB && srv.atLeast(8, 4, 0):
		return "SHOW BINARY LOG STATUS"
	}
	return "SHOW MASTER STATUS"
}

func currentUser(c *client.Conn) (string, error) {
	r, err := c.Execute("SELECT CURRENT_USER()")
	if err != nil {
		return "", err
	}
	defer r.Close()
	u, err := getString(r, 0, 0)
	if err != nil {
		return "", err
	}
	name, host, _ := strings.Cut(u, "@")
	return "'" + name + "'@'" + host + "'", nil
}

func isAccessDenied(err error) bool {
	var me *gomysql.MyError
	if !errors.As(err, &me) {
		return false
	}
	switch me.Code {
	case gomysql.ER_SPECIFIC_ACCESS_DENIED_ERROR, gomysql.ER_ACCESS_DENIED_ERROR, gomysql.ER_DBACCESS_DENIED_ERROR,
		gomysql.ER_TABLEACCESS_DENIED_ERROR, gomysql.ER_COLUMNACCESS_DENIED_ERROR:
		return true
	}
	return false
}

// checkFilters refuses captured tables whose database the server's binlog
// filters (binlog_do_db, binlog_ignore_db) leave out: no change of them
// would reach the binlog, and the stream would carry none without a word.
func checkFilters(c *client.Conn, srv *Server, tables []string, restart string) []string {
	r, err := c.Execute(binlogStatusQuery(srv))
	if err != nil {
		return nil // checkGrants reports it
	}
	defer r.Close()
	if len(r.Values) == 0 {
		return nil
	}
	do, _ := getStringByName(r, 0, "Binlog_Do_DB")
	ignore, _ := getStringByName(r, 0, "Binlog_Ignore_DB")
	var problems []string
	seen := map[string]bool{}
	for _, t := range tables {
		db, _, _ := strings.Cut(t, ".")
		if seen[db] || !filteredOut(db, do, ignore) {
			continue
		}
		seen[db] = true
		problems = append(problems, fmt.Sprintf("the server's binlog leaves out database %s (binlog_do_db %q, binlog_ignore_db %q), "+
			"so no change of its captured tables would reach the stream: add it to binlog_do_db (or take it out of binlog_ignore_db) %s",
			db, do, ignore, restart))
	}
	return problems
}

// checkCascades refuses captured tables that are the children of foreign
// keys with a cascading action (ON DELETE or ON UPDATE CASCADE, SET NULL,
// SET DEFAULT): InnoDB applies the cascade inside the storage engine and
// the binlog carries no row of it, so the sinks would keep every row a
// cascade deleted or changed. A trigger that does the same is logged
// (TestCascadeDoneByATriggerIsStreamed); accepted lists the tables a user
// takes as they are.
func checkCascades(c *client.Conn, tables, accepted []string) []string {
	r, err := c.Execute(`SELECT CONSTRAINT_SCHEMA, TABLE_NAME, CONSTRAINT_NAME, UNIQUE_CONSTRAINT_SCHEMA, REFERENCED_TABLE_NAME,
		DELETE_RULE, UPDATE_RULE FROM information_schema.REFERENTIAL_CONSTRAINTS
		WHERE DELETE_RULE <> 'RESTRICT' AND DELETE_RULE <> 'NO ACTION' OR UPDATE_RULE <> 'RESTRICT' AND UPDATE_RULE <> 'NO ACTION'
		ORDER BY CONSTRAINT_SCHEMA, TABLE_NAME, CONSTRAINT_NAME`)
	if err != nil {
		return []string{fmt.Sprintf("cannot read the foreign keys: %v", err)}
	}
	defer r.Close()
	var problems []string
	for i := range r.Values {
		db, _ := getString(r, i, 0)
		child, _ := getString(r, i, 1)
		name, _ := getString(r, i, 2)
		pdb, _ := getString(r, i, 3)
		parent, _ := getString(r, i, 4)
		onDelete, _ := getString(r, i, 5)
		onUpdate, _ := getString(r, i, 6)
		t := db + "." + child
		if !slices.Contains(tables, t) || slices.Contains(accepted, t) {
			continue
		}
		var rules []string
		for _, rule := range [][2]string{{"DELETE", onDelete}, {"UPDATE", onUpdate}} {
			if rule[1] != "RESTRICT" && rule[1] != "NO ACTION" {
				rules = append(rules, "ON "+rule[0]+" "+rule[1])
			}
		}
		problems = append(problems, fmt.Sprintf("table %s is the child of foreign key %s on %s.%s (%s): the binlog carries no row "+
			"a cascade changes, so its sinks would keep the rows it deletes or changes. Do it in a trigger on %[3]s.%[4]s instead, "+
			"whose changes the binlog carries (for example CREATE TRIGGER … BEFORE DELETE ON %[3]s.%[4]s FOR EACH ROW DELETE FROM %[1]s "+
			"WHERE <its foreign key columns> = OLD.<the key>), or list %[1]s in cascade_tables to go on and repair it with "+
			"sluice verify --repair --table %[1]s after cascades", t, name, pdb, parent, strings.Join(rules, ", ")))
	}
	return problems
}

// checkTables verifies that each table exists, can be read and has a
// primary key.
func checkTables(c *client.Conn, tables []string) []string {
	var problems []string
	for _, t := range tables {
		db, name, ok := strings.Cut(t, ".")
		if !ok || db == "" || name == "" {
			problems = append(problems, fmt.Sprintf("table %q is not database.table", t))
			continue
		}
		r, err := c.Execute(`SELECT COUNT(*) FROM information_schema.TABLES
			WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND TABLE_TYPE = 'BASE TABLE'`, db, name)
		if err != nil {
			problems = append(problems, fmt.Sprintf("cannot look up table %s: %v", t, err))
			continue
		}
		n, _ := r.GetInt(0, 0)
		r.Close()
		qualified := quoteIdent(db) + "." + quoteIdent(name)
		if n == 0 {
			problems = append(problems, fmt.Sprintf("table %s does not exist (or is not a base table, or is not visible to this user: "+
				"GRANT SELECT ON %s TO the user)", t, qualified))
			continue
		}
		// SHOW KEYS needs only a privilege on the table itself, unlike
		// information_schema's constraint views.
		if r, err := c.Execute("SHOW KEYS FROM " + qualified + " WHERE Key_name = 'PRIMARY'"); err == nil {
			if len(r.Values) == 0 {
				problems = append(problems, fmt.Sprintf("table %s has no primary key, which sinks need to upsert: run "+
					"ALTER TABLE %s ADD PRIMARY KEY (…)", t, qualified))
			}
			r.Close()
		}
		if r, err := c.Execute("SELECT 1 FROM " + qualified + " LIMIT 0"); err != nil {
			if isAccessDenied(err) {
				problems = append(problems, fmt.Sprintf("cannot read table %s: run GRANT SELECT ON %s TO the user", t, qualified))
			} else {
				problems = append(problems, fmt.Sprintf("cannot read table %s: %v", t, err))
			}
		} else {
			r.Close()
		}
	}
	return problems
}

type connectedReplica struct {
	id   uint32
	host string
}

// replicas lists the connected replicas: server id and reported host.
func replicas(c *client.Conn, srv *Server) ([]connectedReplica, error) {
	q := "SHOW SLAVE HOSTS"
	if !srv.MariaDB && srv.atLeast(8, 0, 22) {
		q = "SHOW REPLICAS"
	}
	r, err := c.Execute(q)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var out []connectedReplica
	for i := range r.Values {
		id, err := r.GetUint(i, 0)
		if err != nil {
			continue
		}
		host, _ := getString(r, i, 1)
		out = append(out, connectedReplica{id: uint32(id), host: host})
	}
	return out, nil
}

func quoteIdent(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }
