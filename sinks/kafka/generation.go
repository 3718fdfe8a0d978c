package kafka

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/upsert"
)

// A plain (not exactly-once) sink records the generations it writes
// (Invariant 10) in OffsetsTopic under generationKey, as the exactly-once
// mark does in its own record: a run without a checkpoint then takes a
// generation above every event the topics hold, so readers that order a
// key's events by sluice.version (and `sluice verify`) never rank a
// reload's events below the old ones. The record is produced (acks=all)
// before the first batch of a higher generation.

// genRecord is the JSON value of a plain sink's generation record.
type genRecord struct {
	Pipeline    string    `json:"pipeline"`
	Sink        string    `json:"sink"`
	Generation  uint64    `json:"generation"`
	CommittedAt time.Time `json:"committed_at"`
}

// generationKey is the key of a plain sink's generation record.
func (o *Options) generationKey() string { return o.markKey() + "#generation" }

// plainGen is a plain sink's recorded generation, once loaded.
type plainGen struct {
	loaded bool
	// missing is set when OffsetsTopic does not exist and the sink may
	// not create it: nothing is recorded (a warning said so at Open).
	missing bool
	gen     upsert.Generation
}

// loadGeneration reads the newest generation record of a plain sink.
func (s *Sink) loadGeneration(ctx context.Context) error {
	topic := s.opts.OffsetsTopic
	key := s.opts.generationKey()
	var newest *kgo.Record
	err := scanTopic(ctx, s.client, topic, false, markReadWait, func(r *kgo.Record) error {
		if string(r.Key) == key && (newest == nil || r.Partition == newest.Partition && r.Offset > newest.Offset ||
			r.Timestamp.After(newest.Timestamp)) {
			newest = r
		}
		return nil
	})
	st := plainGen{loaded: true}
	switch {
	case errors.Is(err, errNoTopic):
		st.missing = !s.opts.CreateTopics.Enabled
		if st.missing {
			s.log.Warn("the offsets topic does not exist and create_topics is disabled: this sink records no generation, "+
				"so after --reset-offsets or a restore its events may carry versions below older ones of the same key; "+
				"create the topic (cleanup.policy=compact) to record it", zap.String("topic", topic))
		}
	case err != nil:
		return fmt.Errorf("kafka sink %s: read offsets topic %s: %w", s.opts.Name, topic, err)
	case newest != nil && newest.Value != nil:
		var g genRecord
		if err := json.Unmarshal(newest.Value, &g); err != nil {
			return pipeline.Fatal(fmt.Errorf("kafka sink %s: offsets topic %s: generation record at partition %d offset %d is not JSON: %w",
				s.opts.Name, topic, newest.Partition, newest.Offset, err))
		}
		st.gen = upsert.Generation{Gen: g.Generation, Held: true}
	}
	s.gen = st
	return nil
}

// recordGeneration produces the generation record a plain sink's batch
// needs before the batch itself (s.mu held).
func (s *Sink) recordGeneration(ctx context.Context, records []pipeline.Record) error {
	if !s.gen.loaded {
		if err := s.loadGeneration(ctx); err != nil {
			return err
		}
	}
	g, ok := s.gen.gen.Raise(records)
	if !ok || s.gen.missing {
		return nil
	}
	topic := s.opts.OffsetsTopic
	if s.opts.CreateTopics.Enabled && !s.gen.gen.Held {
		if err := s.createOffsetsTopic(ctx); err != nil {
			return err
		}
	}
	val, err := json.Marshal(genRecord{Pipeline: s.opts.Pipeline, Sink: s.opts.Name, Generation: g, CommittedAt: time.Now().UTC()})
	if err != nil {
		return err
	}
	rec := &kgo.Record{Topic: topic, Key: []byte(s.opts.generationKey()), Value: val}
	if err := s.client.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return fmt.Errorf("kafka sink %s: record generation %d in %s: %w", s.opts.Name, g, topic, err)
	}
	s.gen.gen = upsert.Generation{Gen: g, Held: true}
	return nil
}

// createOffsetsTopic creates OffsetsTopic (compacted, one partition) when
// it does not exist.
func (s *Sink) createOffsetsTopic(ctx context.Context) error {
	configs := map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}
	_, err := s.admin.CreateTopic(ctx, 1, int16(s.opts.CreateTopics.ReplicationFactor), configs, s.opts.OffsetsTopic)
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("kafka sink %s: offsets topic %s: %w", s.opts.Name, s.opts.OffsetsTopic, err)
	}
	return nil
}
