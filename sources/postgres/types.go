package postgres

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"github.com/jackc/pgx/v5/pgtype"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
)

// TypeInfo describes a Postgres type as far as value decoding needs it.
// Domains carry their resolved base type, arrays their resolved element type.
type TypeInfo struct {
	OID       uint32
	Namespace string // "pg_catalog" for built-in types
	Name      string // pg_type.typname, e.g. "int4", "_text", "mood"
	// Kind is pg_type.typtype: 'b' base, 'e' enum, 'd' domain, 'c' composite,
	// 'r' range, 'm' multirange, 'p' pseudo.
	Kind byte
	// Elem is the element type of an array type, nil otherwise.
	Elem *TypeInfo
	// Delim separates array elements in the text form (',' except for box).
	Delim byte
	// Base is the base type of a domain, nil otherwise; BaseTypMod is the
	// domain's typmod on it (e.g. numeric(10,2)), -1 when none.
	Base       *TypeInfo
	BaseTypMod int32
	// Enum holds the labels of an enum type in declaration order.
	Enum []string
}

// ColumnInfo is what decoding one column needs: its declared type (possibly
// a domain or an array), the type modifier and the resolved type.
type ColumnInfo struct {
	Name   string
	OID    uint32 // declared type OID (pg_attribute.atttypid / Relation message)
	TypMod int32  // pg_attribute.atttypmod, -1 when none
	Type   TypeInfo
}

// TypeResolver resolves a type OID to its decoding description. The
// implementation in this package (NewTypeResolver) answers built-in types
// without a query and asks pg_type for the rest, caching the answers.
type TypeResolver interface {
	ResolveType(ctx context.Context, oid uint32) (TypeInfo, error)
}

// decodeTarget is the type whose text form a value of t has: domains are
// unwrapped to their base type.
func (t *TypeInfo) decodeTarget() *TypeInfo {
	for i := 0; t.Base != nil && i < 32; i++ {
		t = t.Base
	}
	return t
}

// PipelineType maps the type onto the record model: the column type and,
// for arrays, the element type.
func (t *TypeInfo) PipelineType() (typ, elem pipeline.Type) {
	d := t.decodeTarget()
	if d.Elem != nil {
		e, _ := d.Elem.PipelineType()
		return pipeline.TypeArray, e
	}
	if d.Kind == 'e' {
		return pipeline.TypeEnum, 0
	}
	if d.Kind != 'b' {
		return pipeline.TypeText, 0
	}
	if d.Name == "citext" {
		return pipeline.TypeString, 0
	}
	if d.Namespace != "" && d.Namespace != "pg_catalog" {
		return pipeline.TypeText, 0
	}
	switch d.OID {
	case pgtype.Int2OID:
		return pipeline.TypeInt16, 0
	case pgtype.Int4OID:
		return pipeline.TypeInt32, 0
	case pgtype.Int8OID, pgtype.OIDOID:
		return pipeline.TypeInt64, 0
	case pgtype.NumericOID:
		return pipeline.TypeDecimal, 0
	case pgtype.Float4OID:
		return pipeline.TypeFloat32, 0
	case pgtype.Float8OID:
		return pipeline.TypeFloat64, 0
	case pgtype.BoolOID:
		return pipeline.TypeBool, 0
	case pgtype.TextOID, pgtype.VarcharOID, pgtype.BPCharOID, pgtype.NameOID, pgtype.QCharOID:
		return pipeline.TypeString, 0
	case pgtype.ByteaOID:
		return pipeline.TypeBytes, 0
	case pgtype.UUIDOID:
		return pipeline.TypeUUID, 0
	case pgtype.JSONOID, pgtype.JSONBOID:
		return pipeline.TypeJSON, 0
	case pgtype.DateOID:
		return pipeline.TypeDate, 0
	case pgtype.TimeOID:
		return pipeline.TypeTime, 0
	case pgtype.TimetzOID:
		return pipeline.TypeTimeTZ, 0
	case pgtype.TimestampOID:
		return pipeline.TypeTimestamp, 0
	case pgtype.TimestamptzOID:
		return pipeline.TypeTimestampTZ, 0
	case pgtype.IntervalOID:
		return pipeline.TypeInterval, 0
	case pgtype.InetOID, pgtype.CIDROID:
		return pipeline.TypeInet, 0
	case pgtype.MacaddrOID, pgtype.Macaddr8OID:
		return pipeline.TypeMacaddr, 0
	}
	return pipeline.TypeText, 0
}

// textFallbackSeen remembers the types already reported as kept in text form.
var textFallbackSeen sync.Map

// noteTextFallback logs once per type OID that values of t are passed on as
// their text form (TypeText).
func noteTextFallback(log *zap.Logger, t *TypeInfo) {
	if log == nil {
		return
	}
	if typ, _ := t.PipelineType(); typ != pipeline.TypeText {
		return
	}
	if _, seen := textFallbackSeen.LoadOrStore(t.OID, true); seen {
		return
	}
	log.Info("postgres type has no dedicated mapping; values are passed on in their text form",
		zap.Uint32("oid", t.OID), zap.String("type", t.Namespace+"."+t.Name))
}

// ErrValue wraps every error DecodeText returns.
var ErrValue = errors.New("postgres value")

// DecodeText turns a value in the server's text output form (what pgoutput
// and COPY/text-format queries send under SessionSettings) into the record
// model's Go value for the column's type; see pipeline/value.go for the set
// of types (oid maps to int64 as well). Types without a dedicated mapping
// (point, ranges, money, bit strings, composites …) come back as their text.
// Array lower bounds other than 1 are not kept.
func DecodeText(info ColumnInfo, text []byte) (v any, err error) {
	d := info.Type.decodeTarget()
	if d.Elem != nil {
		v, err = decodeTextAs(d, string(text), 0)
	} else {
		typ, _ := d.PipelineType()
		s := string(text)
		if parsedAway(typ) {
			// A view of text, not a copy: the value parsed from it does
			// not keep it, and errors quote copies (strconv clones what
			// it keeps).
			s = unsafe.String(unsafe.SliceData(text), len(text))
		}
		v, err = decodeScalarText(d, typ, s)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: column %q (%s): %w", ErrValue, info.Name, info.Type.Name, err)
	}
	return v, nil
}

// parsedAway reports whether decodeScalarText turns a value of typ into a
// number or a bool, which holds nothing of its text.
func parsedAway(typ pipeline.Type) bool {
	switch typ {
	case pipeline.TypeInt16, pipeline.TypeInt32, pipeline.TypeInt64, pipeline.TypeDecimal,
		pipeline.TypeFloat32, pipeline.TypeFloat64, pipeline.TypeBool:
		return true
	}
	return false
}

// maxArrayDims bounds array nesting (Postgres allows 6 dimensions).
const maxArrayDims = 6

func decodeTextAs(t *TypeInfo, s string, depth int) (any, error) {
	d := t.decodeTarget()
	if d.Elem != nil {
		if depth > maxArrayDims {
			return nil, errors.New("arrays nested too deep")
		}
		delim := d.Delim
		if delim == 0 {
			delim = ','
		}
		elem := d.Elem
		return parseArrayText(s, delim, func(e string) (any, error) { return decodeTextAs(elem, e, depth+1) })
	}
	typ, _ := d.PipelineType()
	return decodeScalarText(d, typ, s)
}

// decodeScalarText decodes s, the text of a value of the non-array type
// d (decodeTarget resolved) whose record-model type is typ.
func decodeScalarText(d *TypeInfo, typ pipeline.Type, s string) (any, error) {
	switch typ {
	case pipeline.TypeInt16, pipeline.TypeInt32, pipeline.TypeInt64:
		return strconv.ParseInt(s, 10, 64)
	case pipeline.TypeDecimal:
		return parseNumericText(s)
	case pipeline.TypeFloat32:
		f, err := strconv.ParseFloat(s, 32)
		return f, err
	case pipeline.TypeFloat64:
		return strconv.ParseFloat(s, 64)
	case pipeline.TypeBool:
		switch s {
		case "t", "true":
			return true, nil
		case "f", "false":
			return false, nil
		}
		return nil, fmt.Errorf("bad boolean %q", s)
	case pipeline.TypeBytes:
		return parseByteaText(s)
	case pipeline.TypeUUID:
		return parseUUIDText(s)
	case pipeline.TypeJSON:
		return pipeline.JSON(s), nil
	case pipeline.TypeDate:
		return parseDateText(s)
	case pipeline.TypeTime:
		us, rest, err := parseClock(s)
		if err == nil && rest != "" {
			err = fmt.Errorf("bad time %q", s)
		}
		return pipeline.TimeOfDay(us), err
	case pipeline.TypeTimeTZ:
		return parseTimeTZText(s)
	case pipeline.TypeTimestamp:
		return parseTimestampText(s, false)
	case pipeline.TypeTimestampTZ:
		return parseTimestampText(s, true)
	case pipeline.TypeInterval:
		return parseIntervalText(s)
	}
	// TypeString, TypeEnum, TypeInet, TypeMacaddr and TypeText: the text as is.
	return s, nil
}

// parseNumericText reads numeric output exactly: plain notation, NaN,
// Infinity or -Infinity (PG14+).
func parseNumericText(s string) (pipeline.Decimal, error) {
	switch s {
	case "NaN":
		return pipeline.Decimal{Special: pipeline.NaN}, nil
	case "Infinity":
		return pipeline.Decimal{Special: pipeline.PosInfinity}, nil
	case "-Infinity":
		return pipeline.Decimal{Special: pipeline.NegInfinity}, nil
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c == '.' || (c == '-' || c == '+') && i == 0) {
			return pipeline.Decimal{}, fmt.Errorf("bad numeric %q", s)
		}
	}
	return pipeline.ParseDecimal(s)
}

func parseByteaText(s string) ([]byte, error) {
	if strings.HasPrefix(s, `\x`) {
		return hex.DecodeString(s[2:])
	}
	// Escape format (bytea_output=escape): \\ and \ooo octal escapes.
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			out = append(out, s[i])
			continue
		}
		switch {
		case i+1 < len(s) && s[i+1] == '\\':
			out = append(out, '\\')
			i++
		case i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]):
			out = append(out, (s[i+1]-'0')<<6|(s[i+2]-'0')<<3|(s[i+3]-'0'))
			i += 3
		default:
			return nil, fmt.Errorf("bad bytea escape in %q", s)
		}
	}
	return out, nil
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

func parseUUIDText(s string) (pipeline.UUID, error) {
	var u pipeline.UUID
	h := strings.ReplaceAll(strings.Trim(s, "{}"), "-", "")
	if len(h) != 32 {
		return u, fmt.Errorf("bad uuid %q", s)
	}
	if _, err := hex.Decode(u[:], []byte(h)); err != nil {
		return u, fmt.Errorf("bad uuid %q: %w", s, err)
	}
	return u, nil
}

// parseArrayText reads the array_out form: optional "[lo:hi]…=" dimension
// decoration (lower bounds are dropped), nested braces per dimension,
// elements separated by delim, double-quoted elements with backslash
// escapes, and unquoted NULL for SQL NULL. Each element's text goes through
// elem; nested dimensions become nested []any and an empty array is an
// empty (non-nil) []any.
func parseArrayText(s string, delim byte, elem func(string) (any, error)) ([]any, error) {
	p := &arrayTextParser{s: s, delim: delim, elem: elem}
	if strings.HasPrefix(s, "[") {
		eq := strings.IndexByte(s, '=')
		if eq < 0 {
			return nil, fmt.Errorf("bad array dimensions in %q", s)
		}
		p.i = eq + 1
	}
	p.skipSpace()
	v, err := p.level(0)
	if err != nil {
		return nil, fmt.Errorf("array %q: %w", truncateForError(s), err)
	}
	p.skipSpace()
	if p.i != len(p.s) {
		return nil, fmt.Errorf("array %q: junk after closing brace", truncateForError(s))
	}
	return v, nil
}

type arrayTextParser struct {
	s     string
	i     int
	delim byte
	elem  func(string) (any, error)
}

func (p *arrayTextParser) skipSpace() {
	for p.i < len(p.s) && isArraySpace(p.s[p.i]) {
		p.i++
	}
}

func isArraySpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

func (p *arrayTextParser) level(depth int) ([]any, error) {
	if depth >= maxArrayDims {
		return nil, errors.New("more than 6 dimensions")
	}
	if p.i >= len(p.s) || p.s[p.i] != '{' {
		return nil, errors.New("expected '{'")
	}
	p.i++
	out := []any{}
	p.skipSpace()
	if p.i < len(p.s) && p.s[p.i] == '}' {
		p.i++
		return out, nil
	}
	for {
		p.skipSpace()
		if p.i >= len(p.s) {
			return nil, errors.New("unterminated array")
		}
		if p.s[p.i] == '{' {
			sub, err := p.level(depth + 1)
			if err != nil {
				return nil, err
			}
			out = append(out, sub)
		} else {
			text, quoted, err := p.element()
			if err != nil {
				return nil, err
			}
			if !quoted && strings.EqualFold(text, "NULL") {
				out = append(out, nil)
			} else {
				v, err := p.elem(text)
				if err != nil {
					return nil, err
				}
				out = append(out, v)
			}
		}
		p.skipSpace()
		if p.i >= len(p.s) {
			return nil, errors.New("unterminated array")
		}
		switch p.s[p.i] {
		case p.delim:
			p.i++
		case '}':
			p.i++
			return out, nil
		default:
			return nil, fmt.Errorf("unexpected %q at offset %d", p.s[p.i], p.i)
		}
	}
}

// element reads one element: quoted (escapes resolved) or unquoted (escapes
// resolved, surrounding unescaped whitespace trimmed).
func (p *arrayTextParser) element() (string, bool, error) {
	var b strings.Builder
	if p.s[p.i] == '"' {
		p.i++
		for p.i < len(p.s) {
			c := p.s[p.i]
			switch c {
			case '\\':
				if p.i+1 >= len(p.s) {
					return "", true, errors.New("dangling backslash")
				}
				b.WriteByte(p.s[p.i+1])
				p.i += 2
			case '"':
				p.i++
				return b.String(), true, nil
			default:
				b.WriteByte(c)
				p.i++
			}
		}
		return "", true, errors.New("unterminated quoted element")
	}
	keep := 0 // length of b up to the last escaped or non-space byte
	escaped := false
	for p.i < len(p.s) {
		c := p.s[p.i]
		if c == p.delim || c == '}' {
			break
		}
		switch c {
		case '{', '"':
			return "", false, fmt.Errorf("unexpected %q in unquoted element", c)
		case '\\':
			if p.i+1 >= len(p.s) {
				return "", false, errors.New("dangling backslash")
			}
			b.WriteByte(p.s[p.i+1])
			p.i += 2
			keep = b.Len()
			escaped = true
			continue
		}
		b.WriteByte(c)
		p.i++
		if !isArraySpace(c) {
			keep = b.Len()
		}
	}
	text := b.String()[:keep]
	if text == "" && !escaped {
		return "", false, errors.New("empty unquoted element")
	}
	// An element spelled with escapes (\NULL) is not the NULL keyword.
	return text, escaped, nil
}

func truncateForError(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// parseDigits reads n>0 decimal digits (exactly n when exact, at least n
// otherwise) from the front of s.
func parseDigits(s string, n int, exact bool) (int64, string, error) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' && (!exact || i < n) && i < 18 {
		i++
	}
	if i < n {
		return 0, s, fmt.Errorf("expected %d digits in %q", n, s)
	}
	v, err := strconv.ParseInt(s[:i], 10, 64)
	return v, s[i:], err
}

// parseDateBody reads "YYYY-MM-DD" (years may have more than 4 digits) and
// returns days since 1970-01-01 before any BC adjustment of the year.
func parseDateBody(s string, bc bool) (int64, string, error) {
	y, rest, err := parseDigits(s, 4, false)
	if err != nil {
		return 0, s, err
	}
	if len(rest) < 6 || rest[0] != '-' || rest[3] != '-' {
		return 0, s, fmt.Errorf("bad date %q", s)
	}
	m, _, err1 := parseDigits(rest[1:3], 2, true)
	d, _, err2 := parseDigits(rest[4:6], 2, true)
	if err1 != nil || err2 != nil || m < 1 || m > 12 || d < 1 || d > 31 {
		return 0, s, fmt.Errorf("bad date %q", s)
	}
	if bc {
		y = 1 - y
	}
	return pipeline.CivilDays(y, m, d), rest[6:], nil
}

func cutBC(s string) (string, bool) {
	if strings.HasSuffix(s, " BC") {
		return s[:len(s)-3], true
	}
	return s, false
}

func parseDateText(s string) (pipeline.Date, error) {
	switch s {
	case "infinity":
		return pipeline.Date{Special: pipeline.PosInfinity}, nil
	case "-infinity":
		return pipeline.Date{Special: pipeline.NegInfinity}, nil
	}
	body, bc := cutBC(s)
	days, rest, err := parseDateBody(body, bc)
	if err != nil {
		return pipeline.Date{}, err
	}
	if rest != "" || days < math.MinInt32 || days > math.MaxInt32 {
		return pipeline.Date{}, fmt.Errorf("bad date %q", s)
	}
	return pipeline.Date{Days: int32(days)}, nil
}

// parseClock reads "HH:MM:SS[.ffffff]" and returns microseconds and the rest.
func parseClock(s string) (int64, string, error) {
	h, rest, err := parseDigits(s, 2, false)
	if err != nil || len(rest) < 6 || rest[0] != ':' || rest[3] != ':' {
		return 0, s, fmt.Errorf("bad time %q", s)
	}
	m, _, err1 := parseDigits(rest[1:3], 2, true)
	sec, _, err2 := parseDigits(rest[4:6], 2, true)
	if err1 != nil || err2 != nil || m > 59 || sec > 60 || h > 2562047788 {
		return 0, s, fmt.Errorf("bad time %q", s)
	}
	rest = rest[6:]
	var frac int64
	if len(rest) > 0 && rest[0] == '.' {
		rest = rest[1:]
		n := 0
		for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
			if n >= 6 {
				return 0, s, fmt.Errorf("more than 6 fractional digits in %q", s)
			}
			frac = frac*10 + int64(rest[n]-'0')
			n++
		}
		if n == 0 {
			return 0, s, fmt.Errorf("bad time %q", s)
		}
		for i := n; i < 6; i++ {
			frac *= 10
		}
		rest = rest[n:]
	}
	return h*3600e6 + m*60e6 + sec*1e6 + frac, rest, nil
}

// parseOffset reads a UTC offset "+HH[:MM[:SS]]" and returns seconds east.
func parseOffset(s string) (int32, error) {
	if len(s) < 3 || (s[0] != '+' && s[0] != '-') {
		return 0, fmt.Errorf("bad UTC offset %q", s)
	}
	sign := int64(1)
	if s[0] == '-' {
		sign = -1
	}
	parts := strings.Split(s[1:], ":")
	if len(parts) > 3 {
		return 0, fmt.Errorf("bad UTC offset %q", s)
	}
	var sec int64
	mult := []int64{3600, 60, 1}
	for i, p := range parts {
		v, rest, err := parseDigits(p, 2, true)
		if err != nil || rest != "" {
			return 0, fmt.Errorf("bad UTC offset %q", s)
		}
		sec += v * mult[i]
	}
	return int32(sign * sec), nil
}

func parseTimeTZText(s string) (pipeline.TimeTZ, error) {
	us, rest, err := parseClock(s)
	if err != nil {
		return pipeline.TimeTZ{}, err
	}
	off, err := parseOffset(rest)
	if err != nil {
		return pipeline.TimeTZ{}, fmt.Errorf("bad timetz %q: %w", s, err)
	}
	return pipeline.TimeTZ{Micros: us, OffsetSec: off}, nil
}

// maxTimestampDays keeps days*86400e6 plus a day inside int64.
const maxTimestampDays = math.MaxInt64/86_400_000_000 - 1

// parseTimestampText reads "YYYY-MM-DD HH:MM:SS[.ffffff][±HH[:MM[:SS]]][ BC]"
// or ±infinity. With tz the offset is required and the result is the UTC
// instant; without, the wall-clock reading.
func parseTimestampText(s string, tz bool) (pipeline.Timestamp, error) {
	switch s {
	case "infinity":
		return pipeline.Timestamp{Special: pipeline.PosInfinity}, nil
	case "-infinity":
		return pipeline.Timestamp{Special: pipeline.NegInfinity}, nil
	}
	body, bc := cutBC(s)
	days, rest, err := parseDateBody(body, bc)
	if err != nil {
		return pipeline.Timestamp{}, err
	}
	if len(rest) == 0 || (rest[0] != ' ' && rest[0] != 'T') {
		return pipeline.Timestamp{}, fmt.Errorf("bad timestamp %q", s)
	}
	us, rest, err := parseClock(rest[1:])
	if err != nil {
		return pipeline.Timestamp{}, fmt.Errorf("bad timestamp %q: %w", s, err)
	}
	var off int32
	switch {
	case tz:
		if off, err = parseOffset(rest); err != nil {
			return pipeline.Timestamp{}, fmt.Errorf("bad timestamptz %q: %w", s, err)
		}
	case rest != "":
		return pipeline.Timestamp{}, fmt.Errorf("bad timestamp %q", s)
	}
	if days > maxTimestampDays || days < -maxTimestampDays || us > 86400e6 {
		return pipeline.Timestamp{}, fmt.Errorf("timestamp %q is outside the representable range", s)
	}
	// Both terms fit; the sum may still overflow at the very top of the range.
	base, tod := days*86400e6, us-int64(off)*1e6
	if (tod > 0 && base > math.MaxInt64-tod) || (tod < 0 && base < math.MinInt64-tod) {
		return pipeline.Timestamp{}, fmt.Errorf("timestamp %q is outside the representable range", s)
	}
	return pipeline.Timestamp{Micros: base + tod}, nil
}

// parseIntervalText reads the IntervalStyle=postgres form, e.g.
// "1 year -2 mons +3 days -04:05:06.5", "-1 days", "00:00:00", by fields.
func parseIntervalText(s string) (pipeline.Interval, error) {
	var iv pipeline.Interval
	var months, days int64
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return iv, fmt.Errorf("bad interval %q", s)
	}
	for i := 0; i < len(fields); i++ {
		f := fields[i]
		if strings.Contains(f, ":") {
			us, err := parseIntervalClock(f)
			if err != nil {
				return iv, fmt.Errorf("bad interval %q: %w", s, err)
			}
			iv.Micros = us
			continue
		}
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil || i+1 >= len(fields) {
			return iv, fmt.Errorf("bad interval %q", s)
		}
		i++
		switch strings.TrimSuffix(fields[i], "s") {
		case "year":
			months += n * 12
		case "mon":
			months += n
		case "day":
			days += n
		default:
			return iv, fmt.Errorf("bad interval unit %q in %q", fields[i], s)
		}
	}
	if months < math.MinInt32 || months > math.MaxInt32 || days < math.MinInt32 || days > math.MaxInt32 {
		return iv, fmt.Errorf("interval %q out of range", s)
	}
	iv.Months, iv.Days = int32(months), int32(days)
	return iv, nil
}

// parseIntervalClock reads "[+-]H+:MM:SS[.ffffff]"; hours may be large and
// the sum is computed without overflow down to math.MinInt64.
func parseIntervalClock(f string) (int64, error) {
	neg := false
	if f != "" && (f[0] == '-' || f[0] == '+') {
		neg = f[0] == '-'
		f = f[1:]
	}
	h, rest, err := parseDigits(f, 1, false)
	if err != nil || len(rest) < 6 || rest[0] != ':' || rest[3] != ':' || h > 2562047788 {
		return 0, fmt.Errorf("bad interval time %q", f)
	}
	clock, tail, err := parseClock("00" + rest)
	if err != nil || tail != "" {
		return 0, fmt.Errorf("bad interval time %q", f)
	}
	// h ≤ 2562047788 keeps h*3600e6 below 2^63; the total fits in uint64.
	u := uint64(h)*3600e6 + uint64(clock)
	switch {
	case neg && u <= 1<<63:
		return -int64(u-1) - 1, nil
	case !neg && u <= math.MaxInt64:
		return int64(u), nil
	}
	return 0, fmt.Errorf("interval time %q out of range", f)
}
