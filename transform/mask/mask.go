// Package mask is the mask transform: it hides the values of named
// columns before they reach the sinks, in both row images and in the
// value rows that predate a column hold (Column.Missing). The ways:
//
//	null       NULL (the column becomes nullable)
//	fixed      one value of the column's type, written as its text form
//	sha256     the lower-case hex SHA-256 of the value (the column becomes
//	           a string); equal values stay equal, so a masked column can
//	           still be joined or grouped on
//	hmac       the lower-case hex HMAC-SHA256 of the value under a secret
//	           key taken from the environment (a string column), so the
//	           hash cannot be reversed by hashing guesses
//	keep_last  every character but the last N becomes '*' (string columns)
//	email      the local part but its first character becomes "***"
//	           (j***@example.com); a value without '@' becomes "***"
//	           (string columns)
//
// A hash is taken over the value's bytes for a bytes column and over its
// text form (package textform) otherwise. NULL stays NULL and an
// unchanged value stays unchanged (the sink keeps the masked value it
// holds). Key columns cannot be masked: the sinks upsert by them.
package mask

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/pipeline/textform"
	"github.com/sluice-cdc/sluice/transform/reshape"
	"github.com/sluice-cdc/sluice/transform/scope"
)

// Options say how to mask.
type Options struct {
	Columns []string
	With    string // null, fixed, sha256, hmac, keep_last, email
	Value   string // fixed: the value's text form
	Last    int    // keep_last: how many characters stay
	Secret  []byte // hmac: the key
}

// Ways lists the masking ways.
var Ways = []string{"null", "fixed", "sha256", "hmac", "keep_last", "email"}

// New makes the mask operator.
func New(name string, tables scope.Tables, policy scope.Policy, o Options) (*reshape.Op, error) {
	switch o.With {
	case "hmac":
		if len(o.Secret) == 0 {
			return nil, errors.New("hmac masking needs a secret key: the variable secret_env names is unset or empty")
		}
	case "keep_last":
		if o.Last < 0 {
			return nil, errors.New("keep_last needs last >= 0")
		}
	case "null", "fixed", "sha256", "email":
	default:
		return nil, fmt.Errorf("unknown masking %q; the ways: %s", o.With, strings.Join(Ways, ", "))
	}
	return reshape.New(name, tables, policy, o.plan), nil
}

func (o Options) plan(in *pipeline.Table) (*reshape.Plan, error) {
	cols, src, conv := reshape.Same(in)
	touched := false
	for _, name := range o.Columns {
		i := -1
		for j := range in.Columns {
			if in.Columns[j].Name == name {
				i = j
			}
		}
		if i < 0 {
			continue // one mask may list columns of many tables
		}
		c := &in.Columns[i]
		fail := func(err error) error { return &scope.FieldError{Field: "columns", Table: in.ID, Err: err} }
		if c.Key {
			return nil, fail(fmt.Errorf("column %s is part of the primary key; masking it would change the key sinks upsert by", name))
		}
		f, out, err := o.way(c)
		if err != nil {
			return nil, fail(err)
		}
		cols[i], conv[i], touched = out, f, true
	}
	if !touched {
		return &reshape.Plan{Out: in}, nil
	}
	return reshape.Build(in, in.ID, cols, src, conv), nil
}

// way returns the masking of column c's values and the column they land in.
func (o Options) way(c *pipeline.Column) (func(any) (any, error), pipeline.Column, error) {
	out := *c
	asString := func() {
		out.Type, out.Elem, out.Precision, out.Scale, out.Enum, out.SourceType, out.Fields = pipeline.TypeString, 0, 0, -1, nil, "", nil
	}
	text := c.Type == pipeline.TypeString || c.Type == pipeline.TypeText || c.Type == pipeline.TypeEnum
	switch o.With {
	case "null":
		out.Nullable = true
		return func(any) (any, error) { return nil, nil }, out, nil
	case "fixed":
		v, err := textform.Decode(c, o.Value)
		if err != nil {
			return nil, out, fmt.Errorf("value %q is not a %s value: %w", o.Value, c.Type, err)
		}
		return func(any) (any, error) { return v, nil }, out, nil
	case "sha256":
		asString()
		return digest(c, nil), out, nil
	case "hmac":
		asString()
		return digest(c, o.Secret), out, nil
	case "keep_last":
		if !text {
			return nil, out, fmt.Errorf("keep_last masks text; column %s is %s (cast it to string first)", c.Name, c.Type)
		}
		n := o.Last
		return func(v any) (any, error) { return keepLast(v.(string), n), nil }, out, nil
	case "email":
		if !text {
			return nil, out, fmt.Errorf("email masks text; column %s is %s", c.Name, c.Type)
		}
		return func(v any) (any, error) { return email(v.(string)), nil }, out, nil
	}
	return nil, out, fmt.Errorf("unknown masking %q", o.With)
}

// digestsPerBlock is how many hex digests share one allocation.
const digestsPerBlock = 256

// digest hashes a value: SHA-256, or HMAC-SHA256 under key when key is
// set. The HMAC state is reused (an operator runs on one goroutine). The
// hex digests are cut from blocks of digestsPerBlock: a block lives as
// long as one of its digests does, and no byte of it is written twice.
func digest(c *pipeline.Column, key []byte) func(any) (any, error) {
	var mac hash.Hash
	if key != nil {
		mac = hmac.New(sha256.New, key)
	}
	var sum [sha256.Size]byte
	var block []byte
	return func(v any) (any, error) {
		var b []byte
		switch x := v.(type) {
		case []byte:
			b = x
		case string:
			b = unsafe.Slice(unsafe.StringData(x), len(x))
		default:
			s, err := textform.Encode(c, v)
			if err != nil {
				return nil, err
			}
			b = []byte(s)
		}
		if mac == nil {
			sum = sha256.Sum256(b)
		} else {
			mac.Reset()
			mac.Write(b)
			mac.Sum(sum[:0])
		}
		const n = 2 * sha256.Size
		if cap(block)-len(block) < n {
			block = make([]byte, 0, n*digestsPerBlock)
		}
		text := block[len(block) : len(block)+n]
		block = block[:len(block)+n]
		hex.Encode(text, sum[:])
		return unsafe.String(&text[0], n), nil
	}
}

func keepLast(s string, n int) string {
	total := utf8.RuneCountInString(s)
	if total <= n {
		return s
	}
	var b strings.Builder
	i := 0
	for _, r := range s {
		if i < total-n {
			b.WriteByte('*')
		} else {
			b.WriteRune(r)
		}
		i++
	}
	return b.String()
}

func email(s string) string {
	at := strings.LastIndexByte(s, '@')
	if at <= 0 {
		return "***"
	}
	_, size := utf8.DecodeRuneInString(s)
	return s[:size] + "***" + s[at:]
}
