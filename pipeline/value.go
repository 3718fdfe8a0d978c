package pipeline

import (
	"fmt"
	"math/big"
	"math/bits"
	"strings"
	"time"
)

// Values in Record.Before/After are Go values of a closed set of types. Each
// column's Type says which one to expect:
//
//	nil                 SQL NULL (any type)
//	Unchanged           the value did not change and was not sent (Postgres
//	                    unchanged TOAST); sinks keep what they hold
//	bool                TypeBool
//	int64               TypeInt16, TypeInt32, TypeInt64
//	uint64              TypeUint8 … TypeUint64 (MySQL unsigned)
//	float64             TypeFloat32, TypeFloat64
//	Decimal             TypeDecimal
//	string              TypeString, TypeEnum, TypeInet, TypeMacaddr, TypeText
//	                    (unknown types in their source text form), TypeSet
//	JSON                TypeJSON
//	[]byte              TypeBytes, TypeBit, TypeGeometry (WKB; EWKB when it carries an SRID)
//	UUID                TypeUUID
//	Date                TypeDate
//	TimeOfDay           TypeTime
//	TimeTZ              TypeTimeTZ
//	Timestamp           TypeTimestamp (local, no zone), TypeTimestampTZ (UTC)
//	Interval            TypeInterval
//	[]any               TypeArray (elements of the element type; nil elements
//	                    are NULL; nested arrays are []any)
type Unchanged struct{}

// UnchangedValue is the single Unchanged value.
var UnchangedValue = Unchanged{}

// NotCarried says, for errors about an Unchanged value, where such values
// come from and what makes every change carry its values.
const NotCarried = "an unchanged TOAST value, or a column a MySQL/MariaDB session's partial row image left out; " +
	"ALTER TABLE … REPLICA IDENTITY FULL (PostgreSQL) or binlog_row_image=FULL in every session (MySQL/MariaDB) makes every change carry it"

// Special marks infinities and NaN of decimals, dates and timestamps.
type Special int8

const (
	Finite Special = iota
	PosInfinity
	NegInfinity
	NaN
)

func (s Special) String() string {
	switch s {
	case PosInfinity:
		return "infinity"
	case NegInfinity:
		return "-infinity"
	case NaN:
		return "NaN"
	}
	return ""
}

// Decimal is an exact decimal number: Unscaled × 10^-Scale, or a special value.
type Decimal struct {
	Unscaled *big.Int
	Scale    int32
	Special  Special
}

// ParseDecimal reads a decimal in plain or exponent notation, or NaN/Infinity.
func ParseDecimal(s string) (Decimal, error) {
	if d, ok := parsePlainDecimal(s); ok {
		return d, nil
	}
	switch strings.ToLower(s) {
	case "nan":
		return Decimal{Special: NaN}, nil
	case "infinity", "+infinity", "inf":
		return Decimal{Special: PosInfinity}, nil
	case "-infinity", "-inf":
		return Decimal{Special: NegInfinity}, nil
	}
	mant, exp := s, int64(0)
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		mant = s[:i]
		if _, err := fmt.Sscan(s[i+1:], &exp); err != nil {
			return Decimal{}, fmt.Errorf("decimal %q: bad exponent", s)
		}
	}
	scale := int64(0)
	if i := strings.IndexByte(mant, '.'); i >= 0 {
		scale = int64(len(mant) - i - 1)
		mant = mant[:i] + mant[i+1:]
	}
	u, ok := new(big.Int).SetString(mant, 10)
	if !ok {
		return Decimal{}, fmt.Errorf("decimal %q: not a number", s)
	}
	scale -= exp
	if scale < 0 {
		u.Mul(u, new(big.Int).Exp(big.NewInt(10), big.NewInt(-scale), nil))
		scale = 0
	}
	return Decimal{Unscaled: u, Scale: int32(scale)}, nil
}

// IsFinite reports whether d is a number (not NaN or an infinity).
func (d Decimal) IsFinite() bool { return d.Special == Finite }

// String prints d in plain notation with exactly Scale fractional digits;
// a negative Scale appends zeros ({12, -2} is 1200). The special values are
// NaN, Infinity and -Infinity, as Postgres prints numerics (ParseDecimal
// takes any case).
func (d Decimal) String() string {
	switch d.Special {
	case Finite:
	case PosInfinity:
		return "Infinity" // Postgres numeric's spelling (dates say infinity)
	case NegInfinity:
		return "-Infinity"
	default:
		return d.Special.String()
	}
	if d.Unscaled == nil {
		return "0"
	}
	s := new(big.Int).Abs(d.Unscaled).String()
	neg := d.Unscaled.Sign() < 0
	if d.Scale < 0 && s != "0" {
		s += strings.Repeat("0", int(-d.Scale))
	}
	if d.Scale > 0 {
		for len(s) <= int(d.Scale) {
			s = "0" + s
		}
		s = s[:len(s)-int(d.Scale)] + "." + s[len(s)-int(d.Scale):]
	}
	if neg {
		s = "-" + s
	}
	return s
}

// parsePlainDecimal is ParseDecimal's fast path for the common form
// [-]digits[.digits] with at most 18 digits, which fits an int64 and
// skips big.Int's parser and the string concatenation.
func parsePlainDecimal(s string) (Decimal, bool) {
	i, neg := 0, false
	if len(s) > 0 && (s[0] == '-' || s[0] == '+') {
		neg, i = s[0] == '-', 1
	}
	var n int64
	digits, scale, dot := 0, int32(0), false
	for ; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			if digits == 18 {
				return Decimal{}, false
			}
			n = n*10 + int64(c-'0')
			digits++
			if dot {
				scale++
			}
		case c == '.' && !dot:
			dot = true
		default:
			return Decimal{}, false
		}
	}
	if digits == 0 {
		return Decimal{}, false
	}
	if neg {
		n = -n
	}
	return Decimal{Unscaled: smallInt(n), Scale: scale}, true
}

// smallBig is a big.Int and the words of its magnitude in one allocation
// (big.NewInt makes two): enough words for any int64.
type smallBig struct {
	i big.Int
	w [64 / bits.UintSize]big.Word
}

// smallInt is big.NewInt(n) with one allocation instead of two. The Int
// owns the words; arithmetic on it that needs more reallocates, as ever.
func smallInt(n int64) *big.Int {
	b := new(smallBig)
	u := uint64(n)
	if n < 0 {
		u = -u
	}
	for i := range b.w {
		b.w[i] = big.Word(u)
		// Shift by a word's width in two steps: one step would shift a
		// uint64 by 64, which vet refuses (0 once a 64-bit word took it).
		u >>= bits.UintSize / 2
		u >>= bits.UintSize / 2
	}
	b.i.SetBits(b.w[:]) // trims the leading zero words
	if n < 0 {
		b.i.Neg(&b.i)
	}
	return &b.i
}

// Equal compares numerically (1.50 equals 1.5) and specials by kind.
func (d Decimal) Equal(o Decimal) bool {
	if d.Special != Finite || o.Special != Finite {
		return d.Special == o.Special
	}
	a, b := d.Unscaled, o.Unscaled
	if a == nil {
		a = new(big.Int)
	}
	if b == nil {
		b = new(big.Int)
	}
	ra := new(big.Rat).SetFrac(a, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(d.Scale)), nil))
	rb := new(big.Rat).SetFrac(b, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(o.Scale)), nil))
	return ra.Cmp(rb) == 0
}

// JSON is a JSON document in its source text form.
type JSON string

// UUID is a 16-byte UUID.
type UUID [16]byte

func (u UUID) String() string {
	const hex = "0123456789abcdef"
	b := make([]byte, 0, 36)
	for i, c := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b = append(b, '-')
		}
		b = append(b, hex[c>>4], hex[c&15])
	}
	return string(b)
}

// Date is a calendar date as days since 1970-01-01, or ±infinity.
type Date struct {
	Days    int32
	Special Special
}

// Time returns the date at midnight UTC.
func (d Date) Time() time.Time { return time.Unix(int64(d.Days)*86400, 0).UTC() }

func (d Date) String() string {
	if d.Special != Finite {
		return d.Special.String()
	}
	return d.Time().Format("2006-01-02")
}

// CivilDays counts the days from 1970-01-01 to y-m-d in the proleptic
// Gregorian calendar with astronomical year numbering (1 BC is year 0),
// for m in 1..12 and any d: a day past the month's end counts on into the
// next, as time.Date normalizes it. It is time.Date's arithmetic without
// its cost, for the sources' date and timestamp decoding.
func CivilDays(y, m, d int64) int64 {
	if m <= 2 {
		y--
	}
	era := y / 400
	if y < 0 && y%400 != 0 {
		era--
	}
	yoe := y - era*400                     // [0, 399]
	doy := (153*((m+9)%12)+2)/5 + d - 1    // days since March 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy // days since the era began
	return era*146097 + doe - 719468
}

// DateOf returns the Date of t's calendar day (in t's location).
func DateOf(t time.Time) Date {
	y, m, dd := t.Date()
	u := time.Date(y, m, dd, 0, 0, 0, 0, time.UTC)
	return Date{Days: int32(u.Unix() / 86400)}
}

// TimeOfDay is a time of day in microseconds since midnight (24:00:00 allowed).
type TimeOfDay int64

func (t TimeOfDay) String() string {
	us := int64(t)
	return fmt.Sprintf("%02d:%02d:%02d.%06d", us/3600e6, us/60e6%60, us/1e6%60, us%1e6)
}

// TimeTZ is a time of day with a UTC offset in seconds east of UTC.
type TimeTZ struct {
	Micros    int64
	OffsetSec int32
}

// Timestamp is microseconds since 1970-01-01 00:00:00, or ±infinity. For
// TypeTimestampTZ it is an instant in UTC; for TypeTimestamp a wall-clock
// reading without zone.
type Timestamp struct {
	Micros  int64
	Special Special
}

// TimestampOf converts t (its instant) to a Timestamp.
func TimestampOf(t time.Time) Timestamp { return Timestamp{Micros: t.UnixMicro()} }

// Time returns the timestamp as a UTC time.Time.
func (t Timestamp) Time() time.Time { return time.UnixMicro(t.Micros).UTC() }

func (t Timestamp) String() string {
	if t.Special != Finite {
		return t.Special.String()
	}
	return t.Time().Format("2006-01-02 15:04:05.999999")
}

// Interval is a Postgres-style interval kept by field, never by text.
type Interval struct {
	Months int32
	Days   int32
	Micros int64
}
