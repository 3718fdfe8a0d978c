package mysql

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/sluice-cdc/sluice/pipeline"
)

// keyset builds the keyset-pagination SQL of a table's primary key, for
// the initial load's ranges and the incremental snapshot's chunks. Every
// comparison is made by the server, with the column's own type and
// collation (a case-insensitive or PAD SPACE key compares as the index
// orders it), and every bound is a key the server returned:
//
//   - ENUM orders by label index and SET by bitmask, and so do they
//     compare with a number, but they compare with a string by label
//     text: their bounds are the number.
//   - BIT orders as a number: its bound is the number.
//   - DECIMAL compared with a string compares as a double, which rounds
//     beyond 15 digits: its bound is CAST to the column's DECIMAL(p,s).
type keyset struct {
	descs []*colDesc // the key columns, in key order
	names []string   // their quoted names
	ph    []string   // their placeholders
}

func newKeyset(descs []colDesc, keyIdx []int) keyset {
	var k keyset
	for _, i := range keyIdx {
		d := &descs[i]
		k.descs = append(k.descs, d)
		k.names = append(k.names, quoteIdent(d.name))
		ph := "?"
		if d.kind == gomysql.MYSQL_TYPE_NEWDECIMAL {
			ph = fmt.Sprintf("CAST(? AS DECIMAL(%d,%d))", max(d.precision, 1), d.scale)
		}
		k.ph = append(k.ph, ph)
	}
	return k
}

// list is "k1, k2"; desc is "k1 DESC, k2 DESC".
func (k keyset) list() string { return strings.Join(k.names, ", ") }

func (k keyset) desc() string { return strings.Join(k.names, " DESC, ") + " DESC" }

// after is the condition "key > bound", spelled as an OR of prefixes so
// that both servers use the index: k1 > ? OR (k1 = ? AND k2 > ?) …; its
// arguments are afterArgs(bound).
func (k keyset) after() string {
	ors := make([]string, len(k.names))
	for i := range k.names {
		ands := make([]string, 0, i+1)
		for j := 0; j < i; j++ {
			ands = append(ands, k.names[j]+" = "+k.ph[j])
		}
		ands = append(ands, k.names[i]+" > "+k.ph[i])
		ors[i] = "(" + strings.Join(ands, " AND ") + ")"
	}
	return "(" + strings.Join(ors, " OR ") + ")"
}

// afterArgs lays out a bound's values for after: term i takes the
// first i+1.
func afterArgs(bound []any) []any {
	var args []any
	for i := range bound {
		args = append(args, bound[:i+1]...)
	}
	return args
}

// bound returns the key of a row the server returned (binary protocol,
// key columns in key order) as arguments of after.
func (k keyset) bound(key []gomysql.FieldValue) ([]any, error) {
	out := make([]any, len(key))
	for i, fv := range key {
		v, err := boundOf(k.descs[i], fieldValue(fv))
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

// boundOf turns a key value as the server returned it into the form it
// compares in the key's order.
func boundOf(d *colDesc, v any) (any, error) {
	b, isBytes := v.([]byte)
	switch {
	case v == nil:
		return nil, fmt.Errorf("key column %s is NULL", d.name)
	case d.kind == gomysql.MYSQL_TYPE_ENUM && isBytes:
		for i, l := range d.labels {
			if l == string(b) {
				return int64(i + 1), nil
			}
		}
		if len(b) == 0 {
			return int64(0), nil // the invalid value '' of non-strict mode
		}
		return nil, fmt.Errorf("key column %s: %q is not one of its labels", d.name, b)
	case d.kind == gomysql.MYSQL_TYPE_SET && isBytes:
		var mask uint64
		if len(b) > 0 {
			for _, part := range strings.Split(string(b), ",") {
				found := false
				for i, l := range d.labels {
					if l == part {
						mask |= 1 << i
						found = true
					}
				}
				if !found {
					return nil, fmt.Errorf("key column %s: %q is not one of its labels", d.name, part)
				}
			}
		}
		return mask, nil
	case d.kind == gomysql.MYSQL_TYPE_BIT && isBytes:
		var buf [8]byte
		if len(b) > 8 {
			return nil, fmt.Errorf("key column %s: BIT value of %d bytes", d.name, len(b))
		}
		copy(buf[8-len(b):], b)
		return binary.BigEndian.Uint64(buf[:]), nil
	}
	return v, nil
}

// encodeCursor writes a bound as a JSON array whose items keep their Go
// type: "i:-5", "u:7", "f:1.5", "s:text" (valid UTF-8), "x:0a0b" (bytes).
func encodeCursor(bound []any) (json.RawMessage, error) {
	items := make([]string, len(bound))
	for i, v := range bound {
		switch x := v.(type) {
		case int64:
			items[i] = "i:" + strconv.FormatInt(x, 10)
		case uint64:
			items[i] = "u:" + strconv.FormatUint(x, 10)
		case float64:
			items[i] = "f:" + strconv.FormatFloat(x, 'g', -1, 64)
		case []byte:
			if utf8.Valid(x) {
				items[i] = "s:" + string(x)
			} else {
				items[i] = "x:" + hex.EncodeToString(x)
			}
		case string:
			items[i] = "s:" + x
		default:
			return nil, fmt.Errorf("key value of Go type %T", v)
		}
	}
	return json.Marshal(items)
}

// decodeCursor reads encodeCursor's form back; n is the key's width.
func decodeCursor(c json.RawMessage, n int) ([]any, error) {
	var items []string
	if err := json.Unmarshal(c, &items); err != nil || len(items) != n {
		return nil, fmt.Errorf("cursor %s does not fit a key of %d columns: re-snapshot the table", c, n)
	}
	out := make([]any, n)
	for i, it := range items {
		kind, text, _ := strings.Cut(it, ":")
		var err error
		switch kind {
		case "i":
			out[i], err = strconv.ParseInt(text, 10, 64)
		case "u":
			out[i], err = strconv.ParseUint(text, 10, 64)
		case "f":
			out[i], err = strconv.ParseFloat(text, 64)
		case "s":
			out[i] = text
		case "x":
			out[i], err = hex.DecodeString(text)
		default:
			err = fmt.Errorf("unknown kind %q", kind)
		}
		if err != nil {
			return nil, fmt.Errorf("cursor %s: item %d: %w", c, i, err)
		}
	}
	return out, nil
}

// keyArg turns a key value of the record model (as converter.value made
// it) into a query argument that compares equal to the stored key.
func keyArg(d *colDesc, v any) (any, error) {
	switch x := v.(type) {
	case nil:
		return nil, fmt.Errorf("key column %s is NULL", d.name)
	case int16, int32, int64, uint8, uint16, uint32, uint64, float64:
		return x, nil
	case string:
		if d.kind == gomysql.MYSQL_TYPE_ENUM || d.kind == gomysql.MYSQL_TYPE_SET {
			return boundOf(d, []byte(x))
		}
		return x, nil
	case []byte:
		if d.kind == gomysql.MYSQL_TYPE_BIT {
			return boundOf(d, x)
		}
		return x, nil
	case pipeline.Decimal:
		return x.String(), nil
	case pipeline.Date:
		return x.Time().Format(time.DateOnly), nil
	case pipeline.Timestamp:
		return x.Time().Format("2006-01-02 15:04:05.999999"), nil
	case pipeline.Interval:
		us, sign := x.Micros, ""
		if us < 0 {
			us, sign = -us, "-"
		}
		return fmt.Sprintf("%s%d:%02d:%02d.%06d", sign, us/3_600_000_000, us/60_000_000%60, us/1_000_000%60, us%1_000_000), nil
	}
	return nil, fmt.Errorf("key column %s: values of Go type %T cannot be looked up", d.name, v)
}
