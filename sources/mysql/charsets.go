package mysql

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/go-mysql-org/go-mysql/client"
	"golang.org/x/text/encoding"
	"golang.org/x/text/encoding/charmap"
	"golang.org/x/text/encoding/japanese"
	"golang.org/x/text/encoding/korean"
	"golang.org/x/text/encoding/simplifiedchinese"
	"golang.org/x/text/encoding/traditionalchinese"
	"golang.org/x/text/encoding/unicode"
	"golang.org/x/text/encoding/unicode/utf32"
)

// charsets maps the server's collation ids (what TABLE_MAP logs) to
// character sets, and decodes text the binlog carries in a column's own
// character set to UTF-8.
type charsets struct {
	byCollation map[uint64]string
	maxLens     map[string]int // bytes per character
}

// loadCharsets reads the server's collation table.
func loadCharsets(c *client.Conn) (*charsets, error) {
	r, err := c.Execute("SELECT ID, CHARACTER_SET_NAME FROM information_schema.COLLATIONS")
	if err != nil {
		return nil, fmt.Errorf("mysql source: read the collation table: %w", err)
	}
	defer r.Close()
	cs := &charsets{byCollation: make(map[uint64]string, len(r.Values))}
	for i := range r.Values {
		id, err := r.GetUint(i, 0)
		if err != nil {
			continue
		}
		name, _ := getString(r, i, 1)
		cs.byCollation[id] = strings.ToLower(name)
	}
	r2, err := c.Execute("SELECT CHARACTER_SET_NAME, MAXLEN FROM information_schema.CHARACTER_SETS")
	if err != nil {
		return nil, fmt.Errorf("mysql source: read the character set table: %w", err)
	}
	defer r2.Close()
	cs.maxLens = make(map[string]int, len(r2.Values))
	for i := range r2.Values {
		name, _ := getString(r2, i, 0)
		n, err := r2.GetUint(i, 1)
		if err == nil && n > 0 {
			cs.maxLens[strings.ToLower(name)] = int(n)
		}
	}
	return cs, nil
}

// maxLen is the most bytes a character of charset takes (1 for binary
// and unknown sets).
func (cs *charsets) maxLen(charset string) int {
	if n := cs.maxLens[charset]; n > 0 {
		return n
	}
	return 1
}

// binaryCollation is the id of the "binary" collation.
const binaryCollation = 63

// name returns the character set of a collation id.
func (cs *charsets) name(collation uint64) string {
	if collation == binaryCollation {
		return "binary"
	}
	if n, ok := cs.byCollation[collation]; ok {
		return n
	}
	return fmt.Sprintf("collation#%d", collation)
}

// mysqlEncodings are the decoders of the non-UTF-8 character sets. MySQL's
// latin1 is Windows-1252.
var mysqlEncodings = map[string]encoding.Encoding{
	"latin1":   charmap.Windows1252,
	"latin2":   charmap.ISO8859_2,
	"latin5":   charmap.ISO8859_9,
	"latin7":   charmap.ISO8859_13,
	"greek":    charmap.ISO8859_7,
	"hebrew":   charmap.ISO8859_8,
	"cp1250":   charmap.Windows1250,
	"cp1251":   charmap.Windows1251,
	"cp1256":   charmap.Windows1256,
	"cp1257":   charmap.Windows1257,
	"cp850":    charmap.CodePage850,
	"cp852":    charmap.CodePage852,
	"cp866":    charmap.CodePage866,
	"koi8r":    charmap.KOI8R,
	"koi8u":    charmap.KOI8U,
	"macroman": charmap.Macintosh,
	"ucs2":     unicode.UTF16(unicode.BigEndian, unicode.IgnoreBOM),
	"utf16":    unicode.UTF16(unicode.BigEndian, unicode.IgnoreBOM),
	"utf16le":  unicode.UTF16(unicode.LittleEndian, unicode.IgnoreBOM),
	"utf32":    utf32.UTF32(utf32.BigEndian, utf32.IgnoreBOM),
	"sjis":     japanese.ShiftJIS,
	"cp932":    japanese.ShiftJIS,
	"ujis":     japanese.EUCJP,
	"eucjpms":  japanese.EUCJP,
	"euckr":    korean.EUCKR,
	"gbk":      simplifiedchinese.GBK,
	"gb2312":   simplifiedchinese.GBK,
	"gb18030":  simplifiedchinese.GB18030,
	"big5":     traditionalchinese.Big5,
}

// isUTF8Charset reports the character sets whose text is UTF-8 already.
func isUTF8Charset(charset string) bool {
	switch charset {
	case "utf8mb4", "utf8mb3", "utf8", "", "ascii":
		return true
	}
	return false
}

// decode converts text in charset to a UTF-8 string.
func (cs *charsets) decode(charset string, b []byte) (string, error) {
	switch charset {
	case "utf8mb4", "utf8mb3", "utf8", "":
		if !utf8.Valid(b) {
			return "", fmt.Errorf("%s text is not valid UTF-8", charset)
		}
		return string(b), nil
	case "ascii", "binary":
		return string(b), nil
	}
	enc, ok := mysqlEncodings[charset]
	if !ok {
		return "", fmt.Errorf("character set %s is not supported; convert the column to utf8mb4", charset)
	}
	out, err := enc.NewDecoder().Bytes(b)
	if err != nil {
		return "", fmt.Errorf("%s text: %w", charset, err)
	}
	return string(out), nil
}
