package textform

import (
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/verify"
)

// Dates and timestamps before 1 AD are written with a negative year and
// read back as written (44 BC is the year -43).
func TestValuesBeforeTheCommonEraRoundTrip(t *testing.T) {
	bc := time.Date(-43, 3, 15, 12, 0, 0, 1000, time.UTC)
	leap := time.Date(-44, 2, 29, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		col pipeline.Column
		v   any
	}{
		{pipeline.Column{Name: "d", Type: pipeline.TypeDate}, pipeline.DateOf(bc)},
		{pipeline.Column{Name: "d", Type: pipeline.TypeDate}, pipeline.DateOf(leap)},
		{pipeline.Column{Name: "ts", Type: pipeline.TypeTimestamp}, pipeline.TimestampOf(bc)},
		{pipeline.Column{Name: "tz", Type: pipeline.TypeTimestampTZ}, pipeline.TimestampOf(bc)},
	}
	for _, c := range cases {
		s, err := Encode(&c.col, c.v)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(&c.col, s)
		if err != nil {
			t.Fatalf("%s %q: %v", c.col.Type, s, err)
		}
		if !verify.Equal(got, c.v) {
			t.Errorf("%s %q: read %s, wrote %s", c.col.Type, s, verify.Canon(got), verify.Canon(c.v))
		}
	}
}
