package mysql

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/sluice-cdc/sluice/pipeline"
)

// Zero-date policies: MySQL accepts dates such as 0000-00-00 or 2024-00-15
// (without NO_ZERO_DATE / NO_ZERO_IN_DATE) that no calendar, Avro logical
// type or sink can hold.
const (
	// ZeroDatesNull delivers them as NULL; date columns are then nullable
	// in the record model whatever they declare.
	ZeroDatesNull = "as_null"
	// ZeroDatesDeadLetter sends the change holding one to the dead-letter
	// queue with its raw row, and the pipeline goes on.
	ZeroDatesDeadLetter = "dead_letter"
)

// errZeroDate is the reason a zero date dead-letters a change.
var errZeroDate = errors.New("zero date (e.g. 0000-00-00) cannot be represented; set zero_dates: as_null to deliver it as NULL")

// converter turns decoded values into record-model values (see column).
// Binlog values come from go-mysql's row decoder (ParseTime on: DATETIME
// and TIMESTAMP as time.Time, zero dates as text; decimals as text); snapshot values from the binary
// protocol of a session with time_zone '+00:00'. Both meet here, so a row
// read by the snapshot and the same row from the binlog are equal.
type converter struct {
	zeroNull bool
	charsets *charsets
}

// value converts v, a value of column d; fromBinlog says whether text is
// still in the column's charset (the binlog) or already UTF-8 (a query).
func (cv *converter) value(d *colDesc, v any, fromBinlog bool) (any, error) {
	if v == nil {
		return nil, nil
	}
	if isInteger(d.kind) {
		return integer(v, d.intUnsigned())
	}
	switch d.kind {
	case gomysql.MYSQL_TYPE_NEWDECIMAL:
		return pipeline.ParseDecimal(viewOf(v))
	case gomysql.MYSQL_TYPE_FLOAT, gomysql.MYSQL_TYPE_DOUBLE:
		switch x := v.(type) {
		case float32:
			return float64(x), nil
		case float64:
			return x, nil
		}
	case gomysql.MYSQL_TYPE_BIT:
		return bits(v, d.length)
	case gomysql.MYSQL_TYPE_DATE:
		return cv.date(viewOf(v))
	case gomysql.MYSQL_TYPE_DATETIME, gomysql.MYSQL_TYPE_TIMESTAMP:
		if t, ok := v.(time.Time); ok {
			// The binlog decoder's parsed form: DATETIME as a UTC wall
			// clock, TIMESTAMP as the instant.
			return pipeline.Timestamp{Micros: t.UnixMicro()}, nil
		}
		return cv.timestamp(viewOf(v))
	case gomysql.MYSQL_TYPE_TIME:
		return parseTime(viewOf(v))
	case gomysql.MYSQL_TYPE_ENUM:
		if i, ok := v.(int64); ok { // the binlog sends the 1-based index
			if i == 0 {
				return "", nil // the "invalid value" '' of non-strict mode
			}
			if int(i) > len(d.labels) {
				return nil, fmt.Errorf("enum index %d of column %s: the table has %d labels", i, d.name, len(d.labels))
			}
			return d.labels[i-1], nil
		}
		return cv.text(d, v, false)
	case gomysql.MYSQL_TYPE_SET:
		if m, ok := v.(int64); ok { // the binlog sends the bitmask
			var parts []string
			for i := 0; i < 64 && m != 0; i++ {
				if m&(1<<i) != 0 {
					if i >= len(d.labels) {
						return nil, fmt.Errorf("set bit %d of column %s: the table has %d labels", i, d.name, len(d.labels))
					}
					parts = append(parts, d.labels[i])
					m &^= 1 << i
				}
			}
			return strings.Join(parts, ","), nil
		}
		return cv.text(d, v, false)
	case gomysql.MYSQL_TYPE_JSON:
		return jsonValue(textOf(v)), nil
	case gomysql.MYSQL_TYPE_GEOMETRY:
		g, err := geometry(bytesOf(v))
		if err != nil {
			return nil, fmt.Errorf("geometry of column %s: %w", d.name, err)
		}
		return g, nil
	case gomysql.MYSQL_TYPE_VARCHAR, gomysql.MYSQL_TYPE_STRING, gomysql.MYSQL_TYPE_BLOB:
		if d.binary {
			b := append([]byte(nil), bytesOf(v)...)
			if d.kind == gomysql.MYSQL_TYPE_STRING && len(b) < d.length {
				// BINARY(n) is zero-padded; the binlog drops the padding.
				b = append(b, make([]byte, d.length-len(b))...)
			}
			return b, nil
		}
		return cv.text(d, v, fromBinlog)
	default:
		return append([]byte(nil), bytesOf(v)...), nil
	}
	return nil, fmt.Errorf("column %s (%s): unexpected value of Go type %T", d.name, d.column().SourceType, v)
}

// jsonValue is a JSON column's document.
func jsonValue(s string) any {
	if s == "" {
		s = "null" // MySQL logs an empty document for NULL put into NOT NULL with IGNORE
	}
	return pipeline.JSON(s)
}

// text converts a character value to UTF-8.
func (cv *converter) text(d *colDesc, v any, fromBinlog bool) (any, error) {
	if x, ok := v.(string); ok && (!fromBinlog || isUTF8Charset(d.charset)) {
		// go-mysql's strings alias its event buffer: one copy keeps the
		// value and lets the buffer go.
		if !utf8.ValidString(x) {
			return nil, fmt.Errorf("column %s: %s text is not valid UTF-8", d.name, d.charset)
		}
		return strings.Clone(x), nil
	}
	b := bytesOf(v)
	if fromBinlog {
		return cv.charsets.decode(d.charset, b)
	}
	return utf8Text(d, b)
}

// utf8Text is a read's text (the connection's character set is utf8mb4):
// a copy of b once it is valid UTF-8.
func utf8Text(d *colDesc, b []byte) (any, error) {
	if !utf8.Valid(b) {
		return nil, fmt.Errorf("column %s: value is not valid UTF-8", d.name)
	}
	return string(b), nil
}

func textOf(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []byte:
		return string(x)
	}
	return fmt.Sprint(v)
}

func bytesOf(v any) []byte {
	switch x := v.(type) {
	case []byte:
		return x
	case string:
		return []byte(x)
	}
	return []byte(fmt.Sprint(v))
}

// isInteger reports the kinds whose values are integers.
func isInteger(kind byte) bool {
	switch kind {
	case gomysql.MYSQL_TYPE_TINY, gomysql.MYSQL_TYPE_SHORT, gomysql.MYSQL_TYPE_INT24, gomysql.MYSQL_TYPE_LONG,
		gomysql.MYSQL_TYPE_LONGLONG, gomysql.MYSQL_TYPE_YEAR:
		return true
	}
	return false
}

// intUnsigned reports an integer column whose values are unsigned (not
// YEAR: its values stay signed integers).
func (d *colDesc) intUnsigned() bool { return d.unsigned && d.kind != gomysql.MYSQL_TYPE_YEAR }

func integer(v any, unsigned bool) (any, error) {
	var i int64
	var u uint64
	neg := false
	switch x := v.(type) {
	case int8:
		i = int64(x)
	case int16:
		i = int64(x)
	case int32:
		i = int64(x)
	case int64:
		i = x
	case int:
		i = int64(x)
	case uint8:
		u = uint64(x)
	case uint16:
		u = uint64(x)
	case uint32:
		u = uint64(x)
	case uint64:
		u = x
	default:
		return nil, fmt.Errorf("integer column: unexpected Go type %T", v)
	}
	switch v.(type) {
	case int8, int16, int32, int64, int:
		if i < 0 {
			neg = true
		}
		u = uint64(i)
	default:
		i = int64(u)
	}
	return intValue(i, u, neg, unsigned)
}

// intValue is an integer column's value from its signed (i) and unsigned
// (u) readings, neg when the source's value was negative.
func intValue(i int64, u uint64, neg, unsigned bool) (any, error) {
	if unsigned {
		if neg {
			return nil, fmt.Errorf("unsigned column holds %d", i)
		}
		return u, nil
	}
	if !neg && u > math.MaxInt64 {
		return nil, fmt.Errorf("signed column holds %d", u)
	}
	return i, nil
}

// bits returns a BIT(n) value as ⌈n/8⌉ big-endian bytes.
func bits(v any, n int) (any, error) {
	size := (n + 7) / 8
	if size == 0 {
		size = 1
	}
	out := make([]byte, size)
	switch x := v.(type) {
	case int64:
		var buf [8]byte
		binary.BigEndian.PutUint64(buf[:], uint64(x))
		copy(out, buf[8-size:])
	case []byte:
		if len(x) > size {
			return nil, fmt.Errorf("bit(%d): %d bytes", n, len(x))
		}
		copy(out[size-len(x):], x)
	default:
		return nil, fmt.Errorf("bit(%d): unexpected Go type %T", n, v)
	}
	return out, nil
}

// date parses "YYYY-MM-DD" under the zero-date policy.
func (cv *converter) date(s string) (any, error) {
	y, mo, d, ok := ymd(s)
	if !ok {
		return nil, fmt.Errorf("date %q: want YYYY-MM-DD", s)
	}
	if mo == 0 || d == 0 {
		return cv.zero()
	}
	return pipeline.DateOf(time.Date(y, time.Month(mo), d, 0, 0, 0, 0, time.UTC)), nil
}

// timestamp parses "YYYY-MM-DD HH:MM:SS[.ffffff]" under the zero-date policy.
func (cv *converter) timestamp(s string) (any, error) {
	y, mo, d, ok := ymd(s)
	if !ok || len(s) < 19 || s[10] != ' ' || s[13] != ':' || s[16] != ':' {
		return nil, fmt.Errorf("datetime %q: want YYYY-MM-DD HH:MM:SS", s)
	}
	if mo == 0 || d == 0 {
		return cv.zero()
	}
	h, ok1 := digits(s[11:13])
	mi, ok2 := digits(s[14:16])
	sec, ok3 := digits(s[17:19])
	us, ok4 := fraction(s[19:])
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return nil, fmt.Errorf("datetime %q: want YYYY-MM-DD HH:MM:SS[.ffffff]", s)
	}
	if mo > 12 {
		t := time.Date(y, time.Month(mo), d, h, mi, sec, 0, time.UTC)
		return pipeline.Timestamp{Micros: t.Unix()*1e6 + int64(us)}, nil
	}
	secs := pipeline.CivilDays(int64(y), int64(mo), int64(d))*86400 + int64(h*3600+mi*60+sec)
	return pipeline.Timestamp{Micros: secs*1e6 + int64(us)}, nil
}

func (cv *converter) zero() (any, error) {
	if cv.zeroNull {
		return nil, nil
	}
	return nil, errZeroDate
}

// parseTime parses "[-]H…H:MM:SS[.ffffff]" into an interval.
func parseTime(s string) (any, error) {
	neg := strings.HasPrefix(s, "-")
	body := strings.TrimPrefix(s, "-")
	hs, rest, ok := strings.Cut(body, ":")
	if !ok || len(rest) < 5 || rest[2] != ':' {
		return nil, fmt.Errorf("time %q: want [-]HH:MM:SS[.ffffff]", s)
	}
	h, ok1 := digits(hs)
	mi, ok2 := digits(rest[:2])
	sec, ok3 := digits(rest[3:5])
	us, ok4 := fraction(rest[5:])
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return nil, fmt.Errorf("time %q: want [-]HH:MM:SS[.ffffff]", s)
	}
	micros := ((int64(h)*60+int64(mi))*60+int64(sec))*1e6 + int64(us)
	if neg {
		micros = -micros
	}
	return pipeline.Interval{Micros: micros}, nil
}

func ymd(s string) (y, m, d int, ok bool) {
	if len(s) < 10 || s[4] != '-' || s[7] != '-' {
		return 0, 0, 0, false
	}
	y, ok1 := digits(s[:4])
	m, ok2 := digits(s[5:7])
	d, ok3 := digits(s[8:10])
	return y, m, d, ok1 && ok2 && ok3
}

func digits(s string) (int, bool) {
	if s == "" || len(s) > 9 {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// fraction reads "" or ".f…" (1–6 digits) as microseconds.
func fraction(s string) (int, bool) {
	if s == "" {
		return 0, true
	}
	if s[0] != '.' || len(s) < 2 || len(s) > 7 {
		return 0, false
	}
	n, ok := digits(s[1:])
	for i := len(s) - 1; i < 6; i++ {
		n *= 10
	}
	return n, ok
}

// getString reads a result cell as a string of its own: go-mysql's
// GetString aliases the connection's packet buffer, which the next query
// overwrites.
func getString(r *gomysql.Result, row, col int) (string, error) {
	s, err := r.GetString(row, col)
	return strings.Clone(s), err
}

func getStringByName(r *gomysql.Result, row int, name string) (string, error) {
	s, err := r.GetStringByName(row, name)
	return strings.Clone(s), err
}

// ewkbSRID is the flag EWKB (PostGIS's extended WKB) sets in the geometry
// type of a value that carries an SRID.
const ewkbSRID = 0x20000000

// geometry converts MySQL's stored geometry (a 4-byte little-endian SRID,
// then WKB) to WKB when the SRID is 0, and to EWKB, the SRID kept after the
// geometry type, when it is not: nothing of the value is dropped, and
// PostGIS and most spatial libraries read both forms.
func geometry(b []byte) ([]byte, error) {
	if len(b) < 9 {
		return nil, fmt.Errorf("%d bytes, want a 4-byte SRID and WKB", len(b))
	}
	srid, wkb := binary.LittleEndian.Uint32(b), b[4:]
	if srid == 0 {
		return append([]byte(nil), wkb...), nil
	}
	var order interface {
		binary.ByteOrder
		binary.AppendByteOrder
	}
	switch wkb[0] {
	case 0:
		order = binary.BigEndian
	case 1:
		order = binary.LittleEndian
	default:
		return nil, fmt.Errorf("WKB byte order %d, want 0 or 1", wkb[0])
	}
	out := make([]byte, 0, len(wkb)+4)
	out = append(out, wkb[0])
	out = order.AppendUint32(out, order.Uint32(wkb[1:5])|ewkbSRID)
	out = order.AppendUint32(out, srid)
	return append(out, wkb[5:]...), nil
}
