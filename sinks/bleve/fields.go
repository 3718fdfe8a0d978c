package bleve

import (
	"math"
	"strconv"

	"github.com/blevesearch/bleve/v2/analysis"
	"github.com/blevesearch/bleve/v2/document"
	index "github.com/blevesearch/bleve_index_api"

	"github.com/sluice-cdc/sluice/pipeline"
)

// Fields every document carries besides the column fields (see doc.go).
const (
	fieldTable   = "_table"   // "schema.table", keyword, indexed and stored
	fieldVersion = "_v"       // pipeline.Version as 64 hex digits; stored only
	fieldDeleted = "_deleted" // "true", on tombstones only; keyword, indexed and stored
	fieldAt      = "_at"      // tombstones only: deletion time, Unix milliseconds; numeric
	fieldKey     = "_key"     // JSON array of the key values; stored only
	fieldRow     = "_row"     // JSON object of the row; stored only
	fieldAll     = "_all"     // bleve's default search field: the columns indexed as text
	fieldID      = "_id"      // bleve's document id field
)

var reservedFields = map[string]bool{fieldTable: true, fieldVersion: true, fieldDeleted: true, fieldAt: true,
	fieldKey: true, fieldRow: true, fieldAll: true, fieldID: true}

const (
	textOptions    = index.IndexField | index.IncludeTermVectors
	valueOptions   = index.IndexField
	keywordOptions = index.IndexField | index.StoreField
	storedOptions  = index.StoreField
)

// fieldName is the index field of a column: its name, or "_c" + name when
// the name is one of the reserved field names.
func fieldName(column string) string {
	if reservedFields[column] {
		return "_c" + column
	}
	return column
}

// indexValue adds the index fields of one non-NULL column value to doc:
// text-like values analysed by text (the standard analyzer), numbers as
// numeric fields, dates and timestamps as datetime fields, booleans as
// the keywords true and false, arrays element by element. It reports
// whether it added analysed text (which the _all field then includes:
// numbers, dates and booleans are searched by column, as in "qty:>5", and
// their many prefix terms stay out of _all). Values bleve cannot represent
// in the field's type (NaN, infinities, instants outside 1677-2262) and
// types with no useful search form (bytes, intervals) are stored in the
// row only.
func indexValue(doc *document.Document, name string, t, elem pipeline.Type, v any, pos []uint64, text analysis.Analyzer) (isText bool) {
	if v == nil {
		return false
	}
	addText := func(s string) {
		doc.AddField(document.NewTextFieldCustom(name, pos, []byte(s), textOptions, text))
		isText = true
	}
	addNumber := func(f float64) {
		if !math.IsNaN(f) && !math.IsInf(f, 0) {
			doc.AddField(document.NewNumericFieldWithIndexingOptions(name, pos, f, valueOptions))
		}
	}
	switch x := v.(type) {
	case []any:
		if t != pipeline.TypeArray {
			return false
		}
		for i, e := range x {
			p := make([]uint64, len(pos)+1)
			copy(p, pos)
			p[len(pos)] = uint64(i)
			if indexValue(doc, name, t, elem, e, p, text) {
				isText = true
			}
		}
	case string:
		addText(x)
	case pipeline.JSON:
		addText(string(x))
	case pipeline.UUID:
		addText(x.String())
	case pipeline.TimeOfDay:
		addText(x.String())
	case pipeline.TimeTZ:
		addText(pipeline.FormatTimeTZ(x))
	case int64:
		addNumber(float64(x))
	case uint64:
		addNumber(float64(x))
	case float64:
		addNumber(x)
	case pipeline.Decimal:
		if x.Special == pipeline.Finite {
			if f, err := strconv.ParseFloat(x.String(), 64); err == nil {
				addNumber(f)
			}
		}
	case bool:
		// As the keyword "true" or "false", which is what the query string
		// "active:false" looks for (a boolean field's terms are T and F).
		doc.AddField(document.NewTextFieldCustom(name, pos, []byte(strconv.FormatBool(x)), valueOptions, nil))
	case pipeline.Date:
		if x.Special == pipeline.Finite {
			if f, err := document.NewDateTimeFieldWithIndexingOptions(name, pos, x.Time(), "", valueOptions); err == nil {
				doc.AddField(f)
			}
		}
	case pipeline.Timestamp:
		if x.Special == pipeline.Finite {
			if f, err := document.NewDateTimeFieldWithIndexingOptions(name, pos, x.Time(), "", valueOptions); err == nil {
				doc.AddField(f)
			}
		}
	}
	return isText
}

// addInternal adds the fields every document carries. Only tombstones
// carry _deleted and _at (indexed, for the search filter and the purge);
// the version is stored only. Every term indexed here is paid per row, so
// live rows get no more than the table name.
// text names the columns indexed as text, which the _all field includes.
func addInternal(doc *document.Document, table string, v pipeline.Version, deleted bool, atMillis int64, key, row []byte,
	text []string) {
	doc.AddField(document.NewTextFieldCustom(fieldTable, nil, []byte(table), keywordOptions, nil))
	doc.AddField(document.NewTextFieldCustom(fieldVersion, nil, []byte(v.String()), storedOptions, nil))
	doc.AddField(document.NewTextFieldCustom(fieldKey, nil, key, storedOptions, nil))
	doc.AddField(document.NewTextFieldCustom(fieldRow, nil, row, storedOptions, nil))
	if deleted {
		doc.AddField(document.NewTextFieldCustom(fieldDeleted, nil, []byte("true"), keywordOptions, nil))
		doc.AddField(document.NewNumericFieldWithIndexingOptions(fieldAt, nil, float64(atMillis), keywordOptions))
		return
	}
	if len(text) > 0 {
		doc.AddField(document.NewCompositeFieldWithIndexingOptions(fieldAll, false, text, nil,
			index.IndexField|index.IncludeTermVectors))
	}
}

// stored is what a document holds of its row's state.
type stored struct {
	version pipeline.Version
	deleted bool
	row     []byte // the _row JSON object
}

// readStored reads the internal fields of a stored document.
func readStored(doc index.Document) (*stored, error) {
	st := &stored{}
	var err error
	var haveVersion bool
	doc.VisitFields(func(f index.Field) {
		switch f.Name() {
		case fieldVersion:
			st.version, err = pipeline.ParseVersion(string(f.Value()))
			haveVersion = err == nil
		case fieldDeleted:
			st.deleted = string(f.Value()) == "true"
		case fieldRow:
			st.row = f.Value()
		}
	})
	if err == nil && !haveVersion {
		err = errNoVersion
	}
	return st, err
}
