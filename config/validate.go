package config

import (
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-cdc/sluice/pipeline"
)

// Rules that span several fields, and values derived from other fields
// (publication and slot names, sink names, the DLQ directory). Each check
// skips fields that already failed to decode, so one mistake is reported
// once.

var (
	identPart = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_$]{0,62}$`)
	slotName  = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)
)

// validate checks cross-field rules and fills derived defaults.
func (d *decoder) validate(c *Config) {
	if g := c.Source.Generate; g != nil && !d.failed("source.generate.mix") {
		if sum := g.Mix.Insert + g.Mix.Update + g.Mix.Delete; sum != 100 {
			d.errAt("source.generate.mix", fmt.Sprintf("percentages sum to %d, not 100", sum),
				"entries left out default to insert 30, update 60, delete 10; make the three add up to 100")
		}
	}
	if m := c.Source.MySQL; m != nil {
		d.validateMySQL(m)
	}
	if p := c.Source.Postgres; p != nil {
		d.validatePostgres(c, p)
	}
	d.nameSinks(c)
	for i, s := range c.Sinks {
		if s.Kafka != nil && !d.failed(index("sinks", i)) {
			d.validateKafka(c, i, s.Kafka)
		}
		if cm := s.Common(); cm != nil {
			d.validateRoute(index("sinks", i)+"."+s.Kind(), cm)
		}
		for _, x := range []*IndexSink{s.OpenSearch, s.Elasticsearch} {
			if x != nil {
				d.validateIndex(index("sinks", i)+"."+s.Kind(), x)
			}
		}
		if p := s.Postgres; p != nil {
			base := index("sinks", i) + ".postgres"
			d.validateTableTemplate(base, p.TableTemplate)
			if p.TablePrefix != "" && p.TableTemplate != "{schema}_{table}" && !d.failed(base+".table_prefix") {
				d.errAt(base+".table_prefix", "table_prefix and table_template are alternatives",
					fmt.Sprintf("keep table_template only, e.g. %q", p.TablePrefix+"{table}"))
			}
		}
		if x := s.DuckDB; x != nil {
			d.validateTableTemplate(index("sinks", i)+".duckdb", x.TableTemplate)
			if f := index("sinks", i) + ".duckdb.row_group_size"; x.RowGroupSize%2048 != 0 && !d.failed(f) {
				d.errAt(f, fmt.Sprintf("%d is not a multiple of 2048 (DuckDB's vector size)", x.RowGroupSize),
					fmt.Sprintf("use %d or %d", x.RowGroupSize/2048*2048, (x.RowGroupSize/2048+1)*2048))
			}
		}
	}
	d.validateTransforms(c)
	d.validateKafkaDLQ("dlq.kafka", c.DLQ.Kafka)
	d.checkOrder("source.postgres.reconnect_backoff", c.Source.Postgres != nil, func() (a, b Duration) {
		return c.Source.Postgres.ReconnectBackoff.Initial, c.Source.Postgres.ReconnectBackoff.Max
	})
	d.checkOrder("source.mysql.reconnect_backoff", c.Source.MySQL != nil, func() (a, b Duration) {
		return c.Source.MySQL.ReconnectBackoff.Initial, c.Source.MySQL.ReconnectBackoff.Max
	})
	d.checkOrder("runtime.retry", true, func() (a, b Duration) { return c.Runtime.Retry.Initial, c.Runtime.Retry.Max })
	r := c.Runtime
	if !d.failed("runtime.batch_max_records", "runtime.max_in_flight_records") && r.BatchMaxRecords > r.MaxInFlightRecords {
		d.capErr("runtime.batch_max_records", "runtime.max_in_flight_records",
			strconv.Itoa(r.BatchMaxRecords), strconv.Itoa(r.MaxInFlightRecords))
	}
	if !d.failed("runtime.batch_max_bytes", "runtime.max_in_flight_bytes") && r.BatchMaxBytes > r.MaxInFlightBytes {
		d.capErr("runtime.batch_max_bytes", "runtime.max_in_flight_bytes",
			r.BatchMaxBytes.String(), r.MaxInFlightBytes.String())
	}
	if l := c.HTTP.Listen; l != "" && !d.failed("http.listen") {
		host, port, err := net.SplitHostPort(l)
		n, perr := strconv.Atoi(port)
		if err != nil || perr != nil || n < 0 || n > 65535 || strings.ContainsAny(host, " /") {
			d.errAt("http.listen", "expected host:port, got "+d.describe(d.node("http.listen"), nil),
				`e.g. 127.0.0.1:9090 or :9090; use "" to disable the server`)
		}
	}
	if c.Verify.Sample.Rate > 0 && c.Source.Generate != nil && !d.failed("verify.sample.rate") {
		d.errAt("verify.sample.rate", "continuous verification reads the source database, and the generate source has none",
			"use a postgres or mysql source, or set rate: 0")
	}
	if c.Offsets.Dir == "" && !d.failed("offsets.dir") {
		d.errAt("offsets.dir", "must not be empty", "leave the key out for the default ./.sluice")
	}
}

// capErr reports a batch limit above its in-flight cap, at whichever of
// the two the file sets (the batch limit when both are set).
func (d *decoder) capErr(batch, limit, batchVal, limitVal string) {
	const hint = "a batch larger than the in-flight cap could never be admitted; lower the batch limit or raise the cap"
	if n := d.at[batch]; n != nil && n.Kind == yaml.ScalarNode || d.at[limit] == nil || d.at[limit].Kind != yaml.ScalarNode {
		d.errAt(batch, "must not exceed "+limit+" ("+limitVal+")", hint)
		return
	}
	d.errAt(limit, "must be at least "+batch+" ("+batchVal+")", hint)
}

// checkOrder reports initial > max for the backoff at path.
func (d *decoder) checkOrder(path string, present bool, get func() (a, b Duration)) {
	if !present || d.failed(path) {
		return
	}
	if a, b := get(); a > b {
		d.errAt(path+".initial", fmt.Sprintf("initial delay %s is longer than max %s", a, b),
			"lower initial or raise max")
	}
}

func (d *decoder) validateMySQL(m *MySQLSource) {
	const base = "source.mysql"
	seen := map[string]int{}
	for i, t := range m.Tables {
		path := index(base+".tables", i)
		if d.failed(path) {
			continue
		}
		parts := strings.Split(t, ".")
		if len(parts) != 2 || parts[0] == "" || parts[1] == "" {
			d.errAt(path, "invalid table name "+d.named(d.node(path), nil), `write "database.table"`)
			continue
		}
		if j, dup := seen[t]; dup {
			d.errAt(path, fmt.Sprintf("table listed twice (also tables[%d])", j), "remove the duplicate")
			continue
		}
		seen[t] = i
	}
	for _, l := range []struct {
		field string
		list  []string
	}{{"ignore_ddl_tables", m.IgnoreDDLTables}, {"cascade_tables", m.CascadeTables}} {
		for i, t := range l.list {
			path := index(base+"."+l.field, i)
			if _, listed := seen[t]; !listed && !d.bad[base+".tables"] && !d.failed(path) {
				d.errAt(path, "table is not in source.mysql.tables", "add it to tables or remove it here")
			}
		}
	}
}

func (d *decoder) validatePostgres(c *Config, p *PostgresSource) {
	const base = "source.postgres"
	if !d.failed(base + ".dsn") {
		if msg, hint := checkDSN(p.DSN); msg != "" {
			d.errAt(base+".dsn", msg, hint)
		}
	}
	seen := map[string]int{}
	for i, t := range p.Tables {
		path := index(base+".tables", i)
		if d.failed(path) {
			continue
		}
		q, ok := qualify(t)
		if !ok {
			d.errAt(path, "invalid table name "+d.named(d.node(path), nil),
				`write "schema.table" or "table" (schema public), using letters, digits and _`)
			continue
		}
		if j, dup := seen[q]; dup {
			d.errAt(path, fmt.Sprintf("table listed twice (also tables[%d])", j), "remove the duplicate")
			continue
		}
		seen[q] = i
		p.Tables[i] = q
	}
	for i, t := range p.FullIdentityTables {
		path := index(base+".full_identity_tables", i)
		if d.failed(path) {
			continue
		}
		q, ok := qualify(t)
		if !ok {
			d.errAt(path, "invalid table name "+d.named(d.node(path), nil),
				`write "schema.table" or "table" (schema public), using letters, digits and _`)
			continue
		}
		if _, listed := seen[q]; !listed && !d.bad[base+".tables"] {
			d.errAt(path, "table is not in source.postgres.tables", "add it to tables or remove it here")
			continue
		}
		p.FullIdentityTables[i] = q
	}
	if d.failed("pipeline") {
		return
	}
	for _, x := range []struct {
		key string
		v   *string
	}{{"publication", &p.Publication}, {"slot", &p.Slot}} {
		if *x.v != "" {
			continue
		}
		def := "sluice_" + c.Pipeline
		if !slotName.MatchString(def) {
			d.errAt("pipeline", fmt.Sprintf("too long for the default %s name sluice_<pipeline> (at most 63 characters)", x.key),
				"shorten pipeline to at most 56 characters, or set source.postgres."+x.key)
			continue
		}
		*x.v = def
	}
}

// qualify returns t as "schema.table" (schema public when omitted).
func qualify(t string) (string, bool) {
	parts := strings.Split(t, ".")
	if len(parts) == 1 {
		parts = []string{"public", parts[0]}
	}
	if len(parts) != 2 || !identPart.MatchString(parts[0]) || !identPart.MatchString(parts[1]) {
		return "", false
	}
	return parts[0] + "." + parts[1], true
}

// checkDSN returns a problem with a postgres connection string, or "". Its
// messages never include the string, which may hold a password.
func checkDSN(s string) (msg, hint string) {
	s = strings.TrimSpace(s)
	const want = "use a postgres:// URL or key=value pairs such as host=127.0.0.1 dbname=db"
	if i := strings.Index(s, "://"); i >= 0 {
		scheme := strings.ToLower(s[:i])
		if scheme != "postgres" && scheme != "postgresql" {
			return "connection URL has an unsupported scheme", want
		}
		if _, err := url.Parse(s); err != nil {
			// Multi-host URLs (h1:5432,h2:5432) are valid for Postgres but
			// not for net/url: check them with the first host only.
			if _, err2 := url.Parse(firstHost(s)); err2 != nil {
				return "connection URL does not parse", "check its syntax; percent-encode special characters in the user and password"
			}
		}
		return "", ""
	}
	pairs := 0
	for i := 0; i < len(s); {
		if s[i] == ' ' || s[i] == '\t' || s[i] == '\n' {
			i++
			continue
		}
		j := i
		for j < len(s) && (s[j] >= 'a' && s[j] <= 'z' || s[j] == '_') {
			j++
		}
		k := j
		for k < len(s) && (s[k] == ' ' || s[k] == '\t') {
			k++
		}
		if j == i || k >= len(s) || s[k] != '=' {
			return "connection string is neither a URL nor key=value pairs", want
		}
		k++
		for k < len(s) && (s[k] == ' ' || s[k] == '\t') {
			k++
		}
		if k < len(s) && s[k] == '\'' {
			k++
			for k < len(s) && s[k] != '\'' {
				if s[k] == '\\' {
					k++
				}
				k++
			}
			if k >= len(s) {
				return "connection string has an unterminated quoted value", "close the quote with '"
			}
			k++
		} else {
			for k < len(s) && s[k] != ' ' && s[k] != '\t' && s[k] != '\n' {
				if s[k] == '\\' {
					k++
				}
				k++
			}
		}
		pairs++
		i = k
	}
	if pairs == 0 {
		return "connection string is empty", want
	}
	return "", ""
}

// firstHost rewrites scheme://user@h1,h2/db to scheme://user@h1/db.
func firstHost(s string) string {
	i := strings.Index(s, "://") + 3
	rest := s[i:]
	end := strings.IndexAny(rest, "/?")
	if end < 0 {
		end = len(rest)
	}
	auth := rest[:end]
	at := strings.LastIndexByte(auth, '@')
	hosts := auth[at+1:]
	if c := strings.IndexByte(hosts, ','); c >= 0 {
		hosts = hosts[:c]
	}
	return s[:i] + auth[:at+1] + hosts + rest[end:]
}

// nameSinks fills default sink names and rejects duplicates.
func (d *decoder) nameSinks(c *Config) {
	perKind := map[string]int{}
	for _, s := range c.Sinks {
		perKind[s.Kind()]++
	}
	used := map[string]int{}
	for i, s := range c.Sinks {
		c := s.Common()
		if c == nil {
			continue
		}
		name := &c.Name
		kind := s.Kind()
		path := index("sinks", i) + "." + kind + ".name"
		if d.failed(path) {
			continue
		}
		shown := d.named(d.node(path), nil)
		if *name == "" {
			*name = kind
			if perKind[kind] > 1 {
				*name += "_" + strconv.Itoa(i)
			}
			shown = strconv.Quote(*name) + " (the default)"
		}
		if j, dup := used[*name]; dup {
			d.errAt(path, fmt.Sprintf("duplicate sink name %s (also used by sinks[%d])", shown, j),
				"give every sink a distinct name:")
			continue
		}
		used[*name] = i
	}
}

// validateKafka checks a kafka sink's cross-field rules and fills the
// server name default.
func (d *decoder) validateKafka(c *Config, i int, k *KafkaSink) {
	base := index("sinks", i) + ".kafka"
	if k.ServerName == "" && !d.failed(base+".server_name") {
		k.ServerName = c.Pipeline
	}
	if p := base + ".topic_template"; !d.failed(p) && !strings.Contains(k.TopicTemplate, "{table}") {
		d.errAt(p, "must contain {table}", "every table needs its own topic, e.g. {prefix}.{schema}.{table}")
	}
	d.validateSASL(base+".sasl", k.SASL)
	if k.ExactlyOnce && k.OffsetsTopic == "" && !d.failed(base+".server_name", base+".offsets_topic") {
		k.OffsetsTopic = k.ServerName + ".sluice.offsets"
	}
	d.validateTLS(base+".tls", k.TLS)
	d.validateTLS(base+".registry.tls", k.Registry.TLS)
	if p := base + ".registry"; !d.failed(p) && (k.Registry.Username == "") != (k.Registry.Password == "") {
		d.errAt(p+".username", "username and password go together", "set both for basic authentication, or neither")
	}
}

// validateTableTemplate checks the table_template of a table-holding sink.
func (d *decoder) validateTableTemplate(base, template string) {
	p := base + ".table_template"
	if d.failed(base, p) || template == "" {
		return // the sink's own errors are reported
	}
	if err := pipeline.CheckNameTemplate(template); err != nil {
		d.errAt(p, err.Error(), "use {database}, {schema} and {table}, e.g. {schema}_{table}")
	} else if !strings.Contains(template, "{table}") {
		d.errAt(p, "must contain {table}", "every table needs its own target table, e.g. {table} or {schema}_{table}")
	}
}

// validateIndex checks a search-index sink's cross-field rules.
func (d *decoder) validateIndex(base string, x *IndexSink) {
	if p := base + ".index_template"; !d.failed(p) && !strings.Contains(x.IndexTemplate, "{table}") {
		d.errAt(p, "must contain {table}", "every table needs its own index, e.g. {schema}.{table}")
	}
	if p := base + ".username"; !d.failed(p) && (x.Username == "") != (x.Password == "") {
		d.errAt(p, "username and password go together", "set both for basic authentication, or neither")
	}
	if p := base + ".api_key"; !d.failed(p) && x.APIKey != "" && x.Username != "" {
		d.errAt(p, "api_key and username are alternatives", "keep one of them")
	}
	for i, m := range x.Mappings {
		p := index(base+".mappings", i)
		if d.failed(p) {
			continue
		}
		if err := pipeline.CheckPattern(m.Table, 2); err != nil || strings.ContainsAny(m.Table, "*?[") {
			d.errAt(p+".table", fmt.Sprintf("%q is not a schema.table name", m.Table), "write e.g. public.orders")
		}
		if !json.Valid([]byte(m.JSON)) {
			d.errAt(p+".json", "is not valid JSON", `write the mappings object, e.g. '{"properties": {"sku": {"type": "keyword"}}}'`)
		}
	}
	d.validateTLS(base+".tls", TLS{Enabled: x.TLS.Enabled, CAFile: x.TLS.CAFile, InsecureSkipVerify: x.TLS.InsecureSkipVerify})
}

// validateSASL checks that a mechanism and its credentials come together.
func (d *decoder) validateSASL(p string, s SASL) {
	if d.failed(p) {
		return
	}
	switch {
	case s.Mechanism != "" && (s.Username == "" || s.Password == ""):
		d.errAt(p+".mechanism", "needs username and password", "set sasl.username and sasl.password")
	case s.Mechanism == "" && (s.Username != "" || s.Password != ""):
		d.errAt(p+".mechanism", "missing: username and password are set", "set mechanism to PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
	}
}

// validateKafkaDLQ checks a Kafka dead-letter topic block.
func (d *decoder) validateKafkaDLQ(p string, k *KafkaDLQ) {
	if k == nil || d.failed(p) {
		return
	}
	d.validateSASL(p+".sasl", k.SASL)
	d.validateTLS(p+".tls", k.TLS)
}

// validateRoute checks a sink's table and column patterns.
func (d *decoder) validateRoute(base string, c *SinkCommon) {
	check := func(p string, pats []string, parts int, example string) {
		if d.failed(p) {
			return
		}
		for i, pat := range pats {
			if err := pipeline.CheckPattern(pat, parts); err != nil {
				d.errAt(index(p, i), err.Error(), "write "+example+"; * and ? match within one part")
			}
		}
	}
	check(base+".tables", c.Tables, 2, `"schema.table", e.g. public.orders or "public.*"`)
	check(base+".columns.include", c.Columns.Include, 3, `"schema.table.column", e.g. public.users.email`)
	check(base+".columns.exclude", c.Columns.Exclude, 3, `"schema.table.column", e.g. "public.*.password"`)
	d.validateKafkaDLQ(base+".dlq.kafka", c.DLQ.Kafka)
}

// validateTLS checks that client certificate files come in pairs and that
// TLS settings are not set on a disabled block.
func (d *decoder) validateTLS(path string, t TLS) {
	if d.failed(path) {
		return
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		d.errAt(path+".cert_file", "cert_file and key_file go together", "set both for a client certificate, or neither")
	}
	if !t.Enabled && (t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" || t.InsecureSkipVerify) {
		d.errAt(path+".enabled", "TLS settings are given but TLS is not enabled", "set enabled: true, or remove the settings")
	}
}

// resolvePaths makes relative paths absolute against dir (or relative to
// it, when dir itself is relative) and fills the DLQ directory default.
func resolvePaths(c *Config, dir string) {
	abs := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
	c.Offsets.Dir = abs(c.Offsets.Dir)
	if c.DLQ.Dir == "" {
		c.DLQ.Dir = filepath.Join(c.Offsets.Dir, "dlq")
	} else {
		c.DLQ.Dir = abs(c.DLQ.Dir)
	}
	kafkaDLQ := func(k *KafkaDLQ) {
		if k != nil {
			k.TLS.CAFile, k.TLS.CertFile, k.TLS.KeyFile = abs(k.TLS.CAFile), abs(k.TLS.CertFile), abs(k.TLS.KeyFile)
		}
	}
	kafkaDLQ(c.DLQ.Kafka)
	resolveTransformPaths(c, abs)
	for _, s := range c.Sinks {
		if cm := s.Common(); cm != nil {
			kafkaDLQ(cm.DLQ.Kafka)
		}
		if s.Bleve != nil {
			s.Bleve.Path = abs(s.Bleve.Path)
		}
		for _, x := range []*IndexSink{s.OpenSearch, s.Elasticsearch} {
			if x != nil {
				x.TLS.CAFile = abs(x.TLS.CAFile)
			}
		}
		if s.DuckDB != nil && s.DuckDB.Path != ":memory:" {
			s.DuckDB.Path = abs(s.DuckDB.Path)
		}
		if k := s.Kafka; k != nil {
			for _, t := range []*TLS{&k.TLS, &k.Registry.TLS} {
				t.CAFile, t.CertFile, t.KeyFile = abs(t.CAFile), abs(t.CertFile), abs(t.KeyFile)
			}
		}
	}
}
