// Package jsontext appends JSON text without reflection, for the sinks that
// build their documents by hand (Redis json format, search, Bleve).
package jsontext

// AppendString appends s as a JSON string. s must be valid UTF-8: the
// sinks refuse values that are not, rather than store a replacement
// character. Quotes, backslashes and control characters are escaped;
// nothing is HTML-escaped.
func AppendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
