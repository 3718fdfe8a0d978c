package upsert

import (
	"bytes"
	"encoding/json"
)

// JSONWrapKey is the member by which a sink that stores rows as JSON
// documents keeps a json column's own null apart from SQL NULL.
//
// Such a sink stores a json column's value as itself, except JSON's null,
// which the row's null (SQL NULL) would hide, and an object whose only
// member is JSONWrapKey, which would read back as wrapped: those two are
// stored as {JSONWrapKey: value}. Reading unwraps them.
const JSONWrapKey = "$sluice_json"

// WrapJSON returns the stored form of the json value x (valid JSON,
// without surrounding white space).
func WrapJSON(x []byte) []byte {
	if !needsWrap(x) {
		return x
	}
	b := make([]byte, 0, len(x)+len(JSONWrapKey)+5)
	b = append(b, `{"`+JSONWrapKey+`":`...)
	return append(append(b, x...), '}')
}

// UnwrapJSON returns the json value whose stored form is raw.
func UnwrapJSON(raw []byte) []byte {
	if v, ok := wrapped(raw); ok {
		return bytes.TrimSpace(v)
	}
	return raw
}

func needsWrap(x []byte) bool {
	if string(x) == "null" {
		return true
	}
	_, ok := wrapped(x)
	return ok
}

// wrapped returns the value of an object whose only member is
// JSONWrapKey.
func wrapped(raw []byte) (json.RawMessage, bool) {
	if len(raw) == 0 || raw[0] != '{' || !bytes.Contains(raw, []byte(JSONWrapKey)) {
		return nil, false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil || len(m) != 1 {
		return nil, false
	}
	v, ok := m[JSONWrapKey]
	return v, ok
}
