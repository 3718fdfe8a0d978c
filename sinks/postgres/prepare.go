package postgres

import (
	"encoding/binary"
	"math/big"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/upsert"
)

// prepare folds records into per-table batches holding the newest change
// per key. It returns the per-record permanent failures.
func (s *Sink) prepare(records []pipeline.Record) ([]*upsert.TableBatch, []pipeline.RecordError) {
	return upsert.Prepare(records, stager{}, s.targetName)
}

// stager is the sink's upsert.Converter: values become COPY values
// (toStage) and the pgx key types encode by value.
type stager struct{}

func (stager) Stage(c *pipeline.Column, v any) (any, error) { return toStage(c, v) }

func (stager) Invalid(msg string) error { return valueErr("%s", msg) }

func (stager) AppendKey(b []byte, x any) ([]byte, bool) {
	switch x := x.(type) {
	case [16]byte:
		b = append(append(b, 7), x[:]...)
	case pgtype.Numeric:
		// Numerically equal decimals (1.5, 1.50) are one key.
		d := pipeline.Decimal{Unscaled: x.Int, Scale: -x.Exp}
		if x.NaN {
			d = pipeline.Decimal{Special: pipeline.NaN}
		}
		s := "dec:" + canonDecimal(d)
		b = append(binary.AppendUvarint(append(b, 10), uint64(len(s))), s...)
	case pgtype.Timestamptz:
		b = binary.BigEndian.AppendUint64(append(b, 11, byte(x.InfinityModifier)), uint64(x.Time.UnixMicro()))
	case pgtype.Timestamp:
		b = binary.BigEndian.AppendUint64(append(b, 12, byte(x.InfinityModifier)), uint64(x.Time.UnixMicro()))
	case pgtype.Date:
		b = binary.BigEndian.AppendUint64(append(b, 13, byte(x.InfinityModifier)), uint64(x.Time.Unix()))
	default:
		return b, false
	}
	return b, true
}

// canonDecimal renders a finite decimal without trailing fractional zeros.
func canonDecimal(d pipeline.Decimal) string {
	if !d.IsFinite() || d.Unscaled == nil {
		return d.String()
	}
	u, scale := new(big.Int).Set(d.Unscaled), d.Scale
	ten, r := big.NewInt(10), new(big.Int)
	for scale > 0 {
		q, m := new(big.Int).QuoRem(u, ten, r)
		if m.Sign() != 0 {
			break
		}
		u, scale = q, scale-1
	}
	return pipeline.Decimal{Unscaled: u, Scale: scale}.String()
}
