package eval

import (
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
)

// TypeNames lists the type names ParseType takes, for messages.
const TypeNames = "bool, int16, int32, int64, float32, float64, decimal, decimal(p,s), string, bytes, uuid, json, date, time, timestamp, timestamptz"

var decimalSpec = regexp.MustCompile(`^decimal\((\d+)(?:,\s*(\d+))?\)$`)

// ParseType reads a declared column type (a computed column's, a cast's
// target) into a nullable column named name.
func ParseType(name, spec string) (pipeline.Column, error) {
	c := pipeline.Column{Name: name, Nullable: true, Scale: -1}
	s := strings.ToLower(strings.TrimSpace(spec))
	if m := decimalSpec.FindStringSubmatch(s); m != nil {
		p, _ := strconv.Atoi(m[1])
		sc := 0
		if m[2] != "" {
			sc, _ = strconv.Atoi(m[2])
		}
		if p < 1 || p > 1000 || sc > p {
			return c, fmt.Errorf("type %q: want decimal(p,s) with 1 <= p <= 1000 and s <= p", spec)
		}
		c.Type, c.Precision, c.Scale = pipeline.TypeDecimal, p, sc
		return c, nil
	}
	types := map[string]pipeline.Type{
		"bool": pipeline.TypeBool, "int16": pipeline.TypeInt16, "int32": pipeline.TypeInt32, "int64": pipeline.TypeInt64,
		"float32": pipeline.TypeFloat32, "float64": pipeline.TypeFloat64, "decimal": pipeline.TypeDecimal,
		"string": pipeline.TypeString, "bytes": pipeline.TypeBytes, "uuid": pipeline.TypeUUID, "json": pipeline.TypeJSON,
		"date": pipeline.TypeDate, "time": pipeline.TypeTime, "timestamp": pipeline.TypeTimestamp, "timestamptz": pipeline.TypeTimestampTZ,
	}
	t, ok := types[s]
	if !ok {
		return c, fmt.Errorf("unknown type %q; the types: %s", spec, TypeNames)
	}
	c.Type = t
	return c, nil
}

// Assignable reports whether an expression whose static type is t can
// give a value of column c (FromExpr converts it); an interface type is
// checked at run time.
func Assignable(t reflect.Type, c *pipeline.Column) error {
	if t.Kind() == reflect.Interface {
		return nil
	}
	ok := false
	switch c.Type {
	case pipeline.TypeBool:
		ok = t.Kind() == reflect.Bool
	case pipeline.TypeInt16, pipeline.TypeInt32, pipeline.TypeInt64:
		ok = isInt(t)
	case pipeline.TypeFloat32, pipeline.TypeFloat64:
		ok = isInt(t) || isFloat(t) || t == typeDecimal
	case pipeline.TypeDecimal:
		ok = isInt(t) || isFloat(t) || t == typeDecimal
	case pipeline.TypeString:
		ok = t.Kind() == reflect.String
	case pipeline.TypeBytes:
		ok = t.Kind() == reflect.String || t == typeBytes
	case pipeline.TypeUUID:
		ok = t.Kind() == reflect.String
	case pipeline.TypeJSON:
		ok = true // a string is taken as the document's text; other values are encoded
	case pipeline.TypeDate, pipeline.TypeTimestamp, pipeline.TypeTimestampTZ:
		ok = t == typeTime
	case pipeline.TypeTime:
		ok = t == typeDuration
	}
	if !ok {
		return fmt.Errorf("the expression gives %s, which a %s column cannot hold", typeName(t), c.Type)
	}
	return nil
}

func isInt(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return t != typeDuration
	}
	return false
}

func isFloat(t reflect.Type) bool { return t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64 }

// FromExpr converts an expression's result to the record model's value
// of column c; nil stays NULL.
func FromExpr(c *pipeline.Column, v any) (any, error) {
	if v == nil {
		return nil, nil
	}
	switch c.Type {
	case pipeline.TypeBool:
		if _, ok := v.(bool); ok {
			return v, nil
		}
	case pipeline.TypeInt16, pipeline.TypeInt32, pipeline.TypeInt64:
		if n, ok := toInt64(v); ok {
			lim := map[pipeline.Type]int64{pipeline.TypeInt16: math.MaxInt16, pipeline.TypeInt32: math.MaxInt32, pipeline.TypeInt64: math.MaxInt64}[c.Type]
			if n > lim || n < -lim-1 {
				return nil, fmt.Errorf("%d is out of range for %s", n, c.Type)
			}
			return n, nil
		}
		if _, ok := v.(uint64); ok {
			return nil, fmt.Errorf("%v is out of range for %s", v, c.Type)
		}
	case pipeline.TypeFloat32, pipeline.TypeFloat64:
		switch x := v.(type) {
		case float64:
			return x, nil
		case pipeline.Decimal:
			return decimalFloat(x)
		}
		if n, ok := toInt64(v); ok {
			return float64(n), nil
		}
	case pipeline.TypeDecimal:
		d, err := makeDecimal(v)
		if err != nil {
			return nil, err
		}
		return fitDecimal(c, d.(pipeline.Decimal))
	case pipeline.TypeString:
		if _, ok := v.(string); ok {
			return v, nil // as it is: boxing it again would allocate
		}
	case pipeline.TypeBytes:
		switch x := v.(type) {
		case []byte:
			return x, nil
		case string:
			return []byte(x), nil
		}
	case pipeline.TypeUUID:
		if s, ok := v.(string); ok {
			return pipeline.ParseUUID(s)
		}
	case pipeline.TypeJSON:
		if s, ok := v.(string); ok {
			if !json.Valid([]byte(s)) {
				return nil, fmt.Errorf("%q is not a JSON document", s)
			}
			return pipeline.JSON(s), nil
		}
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		return pipeline.JSON(b), nil
	case pipeline.TypeDate:
		if t, ok := v.(time.Time); ok {
			return pipeline.DateOf(t), nil
		}
	case pipeline.TypeTimestamp, pipeline.TypeTimestampTZ:
		if t, ok := v.(time.Time); ok {
			if c.Type == pipeline.TypeTimestamp {
				// A wall-clock reading: the time as written, zone dropped.
				t = time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
			}
			return pipeline.TimestampOf(t), nil
		}
	case pipeline.TypeTime:
		if d, ok := v.(time.Duration); ok {
			if d < 0 || d > 24*time.Hour {
				return nil, fmt.Errorf("%v is not a time of day", d)
			}
			return pipeline.TimeOfDay(d / time.Microsecond), nil
		}
	}
	return nil, fmt.Errorf("%v (%T) cannot be a %s value", v, v, c.Type)
}

func toInt64(v any) (int64, bool) {
	switch x := v.(type) {
	case int:
		return int64(x), true
	case int64:
		return x, true
	case int32:
		return int64(x), true
	case int16:
		return int64(x), true
	case int8:
		return int64(x), true
	case uint64:
		if x <= math.MaxInt64 {
			return int64(x), true
		}
	case uint32:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint8:
		return int64(x), true
	case uint:
		if uint64(x) <= math.MaxInt64 {
			return int64(x), true
		}
	}
	return 0, false
}

// fitDecimal rounds d to column c's scale (half away from zero) and
// refuses a value with more integer digits than its precision allows.
func fitDecimal(c *pipeline.Column, d pipeline.Decimal) (any, error) {
	if !d.IsFinite() || c.Precision == 0 || c.Scale < 0 {
		return d, nil
	}
	r, err := roundDecimal(d, c.Scale)
	if err != nil {
		return nil, err
	}
	rd := r.(pipeline.Decimal)
	u := rd.Unscaled
	if u == nil {
		u = new(big.Int)
	}
	if digits := len(new(big.Int).Abs(u).String()); int(rd.Scale) == c.Scale && digits > c.Precision && u.Sign() != 0 {
		return nil, fmt.Errorf("%s does not fit decimal(%d,%d)", d, c.Precision, c.Scale)
	}
	return rd, nil
}
