package mysql

import (
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/sluice-cdc/sluice/pipeline"
)

// noteAdded remembers the columns an ALTER TABLE of id adds, with their
// DEFAULT, until the table's next shape (missingValues), by lower-cased
// name: MySQL column names are case-insensitive. Until then no position
// passes the ALTER (decoder.holdsPositions).
//
// A latest shape seeded from the catalog at start that already has such a
// column is ahead of the stream: the stream is reading again, from a
// checkpoint before the ALTER, the change that added it. Before the ALTER
// the table lacked the column, so it leaves the seed; the next shape then
// adds it again, with its DEFAULT as the missing value, and a sink that
// never saw it fills the older rows.
func (s *shapes) noteAdded(id pipeline.TableID, cols map[string]defaultLit) {
	if len(cols) == 0 {
		return
	}
	if s.added == nil {
		s.added = map[pipeline.TableID]map[string]defaultLit{}
	}
	if s.added[id] == nil {
		s.added[id] = map[string]defaultLit{}
	}
	for name, lit := range cols {
		s.added[id][strings.ToLower(name)] = lit
	}
	if sh := s.latest[id]; sh != nil && sh.seeded {
		kept := make([]colDesc, 0, len(sh.descs))
		for _, d := range sh.descs {
			if _, ok := s.added[id][strings.ToLower(d.name)]; !ok {
				kept = append(kept, d)
			}
		}
		if len(kept) < len(sh.descs) {
			s.latest[id] = &shape{table: sh.table, descs: kept, captured: true, seeded: true}
		}
	}
}

// awaitingDefaults reports whether some ALTER's added columns wait for a
// shape to carry their DEFAULTs.
func (s *shapes) awaitingDefaults() bool { return len(s.added) > 0 }

// forget drops what an ALTER noted of id (the table was dropped or
// renamed: no shape of it follows).
func (s *shapes) forget(id pipeline.TableID) {
	delete(s.added, id)
	delete(s.pending, id)
}

// missingValues sets Missing on the columns of t (a new shape of id) that
// prev lacks, from the DEFAULT their ALTER gave them: the value every row
// that existed before the ALTER holds with no row event saying so. A
// DEFAULT the source cannot evaluate leaves Missing unset, with a warning;
// for an expression the ALTER also queued the table to be read again
// (rewritesRows), which fills those rows.
func (s *shapes) missingValues(id pipeline.TableID, prev []colDesc, descs []colDesc, t *pipeline.Table) {
	pending := s.added[id]
	if len(pending) == 0 {
		return
	}
	had := map[string]bool{}
	for _, d := range prev {
		had[strings.ToLower(d.name)] = true
	}
	for i := range descs {
		d := &descs[i]
		lit, ok := pending[strings.ToLower(d.name)]
		if !ok || had[strings.ToLower(d.name)] {
			continue
		}
		delete(pending, strings.ToLower(d.name))
		if lit.null {
			continue
		}
		v, err := s.conv.literal(d, lit)
		if err != nil {
			if s.log != nil {
				s.log.Warn(fmt.Sprintf("column %s added to %s with a DEFAULT the source does not evaluate (%v): rows older than the ALTER read NULL in the sinks until the table is read again (the ALTER queued it when the DEFAULT is an expression) or they change", d.name, id, err))
			}
			continue
		}
		t.Columns[i].Missing = v
	}
	if len(pending) == 0 {
		delete(s.added, id)
	}
}

var errNotConstant = errors.New("not a constant")

// literal converts a DEFAULT literal to a value of column d, the value the
// server stores for it.
func (cv *converter) literal(d *colDesc, lit defaultLit) (any, error) {
	if !lit.constant {
		return nil, errNotConstant
	}
	text := lit.text
	if lit.introducer != "" && lit.introducer != "binary" {
		// _latin1'…': the statement's bytes read in that charset.
		var err error
		if text, err = cv.charsets.decode(lit.introducer, []byte(text)); err != nil {
			return nil, err
		}
	}
	switch d.kind {
	case gomysql.MYSQL_TYPE_TINY, gomysql.MYSQL_TYPE_SHORT, gomysql.MYSQL_TYPE_INT24, gomysql.MYSQL_TYPE_LONG,
		gomysql.MYSQL_TYPE_LONGLONG:
		text = strings.TrimSpace(text)
		if d.unsigned {
			u, err := strconv.ParseUint(text, 10, 64)
			if err != nil {
				return nil, err
			}
			return u, nil
		}
		return strconv.ParseInt(text, 10, 64)
	case gomysql.MYSQL_TYPE_YEAR:
		y, err := strconv.ParseInt(strings.TrimSpace(text), 10, 64)
		if err != nil || (y != 0 && (y < 1901 || y > 2155)) {
			return nil, fmt.Errorf("year %q", text)
		}
		return y, nil
	case gomysql.MYSQL_TYPE_NEWDECIMAL:
		v, err := pipeline.ParseDecimal(strings.TrimSpace(text))
		if err != nil || !v.IsFinite() {
			return nil, fmt.Errorf("decimal %q", text)
		}
		if int(v.Scale) > d.scale {
			return nil, fmt.Errorf("decimal %q has more than %d fractional digits (the server rounds it)", text, d.scale)
		}
		// Stored with the column's scale, as the binlog gives it.
		v.Unscaled = new(big.Int).Mul(v.Unscaled, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(d.scale)-int64(v.Scale)), nil))
		v.Scale = int32(d.scale)
		return v, nil
	case gomysql.MYSQL_TYPE_FLOAT:
		f, err := strconv.ParseFloat(strings.TrimSpace(text), 32)
		if err != nil {
			return nil, err
		}
		return float64(float32(f)), nil
	case gomysql.MYSQL_TYPE_DOUBLE:
		return strconv.ParseFloat(strings.TrimSpace(text), 64)
	case gomysql.MYSQL_TYPE_DATE:
		return cv.date(text)
	case gomysql.MYSQL_TYPE_DATETIME:
		return cv.timestamp(text)
	case gomysql.MYSQL_TYPE_TIME:
		return parseTime(text)
	case gomysql.MYSQL_TYPE_ENUM:
		if !slices.Contains(d.labels, text) {
			return nil, fmt.Errorf("enum %q is not a label", text)
		}
		return text, nil
	case gomysql.MYSQL_TYPE_SET:
		var out []string
		if text != "" {
			parts := strings.Split(text, ",")
			for _, l := range d.labels { // in the column's order, as the server stores them
				if slices.Contains(parts, l) {
					out = append(out, l)
				}
			}
			if len(out) != len(slices.Compact(slices.Sorted(slices.Values(parts)))) {
				return nil, fmt.Errorf("set %q is not a list of labels", text)
			}
		}
		return strings.Join(out, ","), nil
	case gomysql.MYSQL_TYPE_JSON:
		return pipeline.JSON(text), nil
	case gomysql.MYSQL_TYPE_VARCHAR, gomysql.MYSQL_TYPE_STRING, gomysql.MYSQL_TYPE_BLOB:
		if !lit.quoted {
			return nil, errNotConstant
		}
		if d.binary {
			return cv.value(d, []byte(text), false)
		}
		if d.kind == gomysql.MYSQL_TYPE_STRING {
			text = strings.TrimRight(text, " ") // CHAR(n) reads without its padding
		}
		return text, nil
	}
	// TIMESTAMP (in the ALTER's session time zone), BIT, GEOMETRY.
	return nil, fmt.Errorf("a %s default", d.column().SourceType)
}
