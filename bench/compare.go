package bench

import (
	"context"
	"fmt"
	"time"
)

// comparison is the measure the stream and snapshot scenarios share, on
// one backlog and one broker, in this order: the reference, sluice into
// Kafka (the topic must then hold exactly the expected records: a run that
// lost or replayed a change fails rather than scores), the Kafka ceiling
// (stream only), Debezium, and the reference again (the ratio uses the
// mean of both).
type comparison struct {
	changes  int                                // changes sluice and Debezium hand over
	ref      string                             // the reference's figure name
	ratio    string                             // the sluice / reference figure name
	target   string                             // that ratio's target
	runRef   func(i int) (time.Duration, error) // the reference's i-th run (1, 2)
	sluice   kafkaRun
	topic    string
	stored   int64 // records the topic must hold after sluice
	debezium DebeziumOptions
	stream   bool // a stream (ceiling, backlog RSS target, Debezium target), else a snapshot
}

func (c comparison) run(ctx context.Context, o RunOptions, br *broker, name string) ([]Figure, error) {
	ref1, err := c.runRef(1)
	if err != nil {
		return nil, err
	}
	sl, err := br.toKafka(ctx, c.sluice)
	if err != nil {
		return nil, err
	}
	if n, err := br.topicEnd(ctx, c.topic); err != nil || n != c.stored {
		return nil, fmt.Errorf("%s holds %d records (%v), want %d", c.topic, n, err, c.stored)
	}
	var ceil time.Duration
	var size int64
	if c.stream {
		if ceil, size, err = br.ceiling(ctx, c.topic); err != nil {
			return nil, err
		}
	}
	dbz, err := runDebezium(ctx, o, c.debezium)
	if err != nil {
		return nil, err
	}
	ref2, err := c.runRef(2)
	if err != nil {
		return nil, err
	}
	ref := (ref1 + ref2) / 2
	o.log("%s: %s %s and %s, sluice %s (first batch after %s), Kafka ceiling %s (%d B/record), Debezium %s",
		name, c.ref, ref1, ref2, sl.wall, sl.first, ceil, size, dbz.Wall)
	n := float64(c.changes)
	rate := func(d time.Duration) float64 { return n / d.Seconds() }
	perM := func(d time.Duration) float64 { return d.Seconds() * 1e6 / n }
	slName, dbzName, dbzTarget, rss, rssTarget := "sluice snapshot → Kafka", "Debezium snapshot → Kafka (JSON)", "", "sluice peak RSS", ""
	if c.stream {
		slName, dbzName, dbzTarget, rss, rssTarget = "sluice → Kafka", "Debezium → Kafka (JSON)", ">= 2", "sluice peak RSS, whole backlog waiting", "< 256"
	}
	figs := []Figure{
		{Name: c.ref, Unit: "rows/s", Value: rate(ref)},
		{Name: slName, Unit: "rows/s", Value: rate(sl.wall)},
	}
	ceilRate := float64(c.stored) / ceil.Seconds()
	if c.stream {
		figs = append(figs, Figure{Name: "Kafka ceiling", Unit: "records/s", Value: ceilRate})
	}
	figs = append(figs,
		Figure{Name: dbzName, Unit: "rows/s", Value: rate(dbz.Wall)},
		Figure{Name: c.ratio, Unit: "ratio", Value: ref.Seconds() / sl.wall.Seconds(), Target: c.target})
	if c.stream {
		figs = append(figs, Figure{Name: "sluice / Kafka ceiling", Unit: "ratio", Value: float64(c.stored) / sl.wall.Seconds() / ceilRate})
	}
	figs = append(figs,
		Figure{Name: "sluice / Debezium", Unit: "ratio", Value: dbz.Wall.Seconds() / sl.wall.Seconds(), Target: dbzTarget},
		Figure{Name: "sluice CPU", Unit: "s per 1M rows", Value: perM(sl.cpu)},
		Figure{Name: "Debezium CPU", Unit: "s per 1M rows", Value: perM(dbz.CPU)},
		Figure{Name: rss, Unit: "MiB", Value: sl.peakRSS / (1 << 20), Target: rssTarget},
		Figure{Name: "Debezium peak RSS", Unit: "MiB", Value: dbz.PeakRSS / (1 << 20)})
	if c.stream {
		figs = append(figs, Figure{Name: "Kafka record", Unit: "bytes", Value: float64(size)})
	}
	return figs, nil
}
