package kafka

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/hamba/avro/v2"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/schema"
)

// shape is a table shape ready to produce: its codec, topic and the
// registry ids of its key (0 when the table has no key) and value schemas.
// shapeKey is a table shape in a topic: the topic template a route gives
// its records ("" is the sink's own).
type shapeKey struct {
	t     *pipeline.Table
	topic string
}

// lastShape is a one-entry cache in front of Sink.shapes.
type lastShape struct {
	key shapeKey
	sh  *shape
}

type shape struct {
	codec   *schema.Codec
	topic   string
	state   *topicState
	keyID   int
	valueID int
}

// unencodable marks a failure of one record's shape or values: the record
// goes to the DLQ (Invariant 7), the batch goes on.
type unencodable struct{ err error }

func (e unencodable) Error() string { return e.err.Error() }
func (e unencodable) Unwrap() error { return e.err }

// valueSchema is the schema of the configured envelope.
func (s *Sink) valueSchema(c *schema.Codec) avro.Schema {
	if s.opts.Envelope == EnvelopeRow {
		return c.ValueSchema()
	}
	return c.EnvelopeSchema()
}

func (s *Sink) subject(topic string, isKey bool, sch avro.Schema) string {
	if s.opts.SubjectStrategy == StrategyRecord {
		return schema.RecordNameStrategy(topic, isKey, sch)
	}
	return schema.TopicNameStrategy(topic, isKey, sch)
}

// shapeOf prepares t for producing into the topic of template ("": the
// sink's own), once per shape, topic and process: it builds
// the codec, creates the topic and registers the key and value schemas.
//
// Contract: compatibility is checked BEFORE anything is produced under a
// new shape. Every schema not yet registered by this process is checked
// against its subject first (after setting the subject's level); only when
// all are acceptable (or IncompatiblePolicy allows them) are they
// registered. Write calls shapeOf for every record of a batch before it
// produces any record, so a refused shape stops the batch with nothing of
// it written. Errors: unencodable for shapes without an Avro form,
// pipeline.Fatal for an incompatible shape under policy fail or a bad topic
// template, a *pipeline.TableError for a topic that does not exist and that
// the sink does not create, plain errors for registry and broker trouble
// (retried).
func (s *Sink) shapeOf(ctx context.Context, t *pipeline.Table, template string) (*shape, error) {
	key := shapeKey{t, template}
	if s.last.sh != nil && s.last.key == key {
		return s.last.sh, nil // a batch's records mostly share their table
	}
	if sh, ok := s.shapes[key]; ok {
		s.last.key, s.last.sh = key, sh
		return sh, nil
	}
	codec, err := s.cache.Codec(t)
	if err != nil {
		return nil, unencodable{err}
	}
	if template == "" {
		template = s.opts.TopicTemplate
	}
	topic, err := TopicName(template, s.opts.ServerName, t.ID)
	if err != nil {
		return nil, pipeline.Fatal(fmt.Errorf("kafka sink %s: %w", s.opts.Name, err))
	}
	type pending struct {
		subject, text string
		isKey         bool
		id            *int
	}
	sh := &shape{codec: codec, topic: topic}
	var todo []pending
	for _, side := range []struct {
		isKey bool
		sch   avro.Schema
		id    *int
	}{{true, codec.KeySchema(), &sh.keyID}, {false, s.valueSchema(codec), &sh.valueID}} {
		if side.sch == nil {
			continue // no key columns: a null Kafka key, no key subject
		}
		text, err := schema.SchemaText(side.sch)
		if err != nil {
			return nil, unencodable{err}
		}
		todo = append(todo, pending{s.subject(topic, side.isKey, side.sch), text, side.isKey, side.id})
	}

	// Check every schema before registering any.
	var refused []string
	var refusedIdx []int
	for i, p := range todo {
		if id, ok := s.registered[[2]string{p.subject, p.text}]; ok {
			*p.id = id
			continue
		}
		if !s.levelSet[p.subject] {
			if err := s.reg.SetCompatibility(ctx, p.subject, s.opts.Compatibility); err != nil {
				return nil, fmt.Errorf("kafka sink %s: %w", s.opts.Name, err)
			}
			s.levelSet[p.subject] = true
		}
		ok, reason, err := s.reg.Compatible(ctx, p.subject, p.text)
		if err != nil {
			return nil, fmt.Errorf("kafka sink %s: compatibility of %s: %w", s.opts.Name, p.subject, err)
		}
		if !ok {
			refused = append(refused, fmt.Sprintf("subject %q: %s", p.subject, reason))
			refusedIdx = append(refusedIdx, i)
		}
	}
	if len(refused) > 0 {
		change := describeChange(s.prev[t.ID], t)
		msg := fmt.Sprintf("kafka sink %s: table %s: new shape (generation %d) is incompatible under %s: %s; registry: %s",
			s.opts.Name, t.ID, t.Generation, s.opts.Compatibility, change, strings.Join(refused, "; "))
		if s.opts.IncompatiblePolicy != PolicyNewSubjectVersion {
			// Invariant 9: the stop is logged with what changed.
			s.log.Error("incompatible table shape; stopping before producing it", zap.String("table", t.ID.String()),
				zap.String("change", change), zap.Strings("registry", refused))
			return nil, pipeline.Fatal(errors.New(msg + " (incompatible_policy fail; use new_subject_version to register it anyway)"))
		}
		s.log.Warn("incompatible table shape; registering a new subject version under NONE",
			zap.String("table", t.ID.String()), zap.String("change", change), zap.Strings("registry", refused))
		for _, i := range refusedIdx {
			p := todo[i]
			if err := s.reg.SetCompatibility(ctx, p.subject, schema.CompatNone); err != nil {
				return nil, fmt.Errorf("kafka sink %s: %w", s.opts.Name, err)
			}
			id, err := s.reg.Register(ctx, p.subject, p.text)
			if err != nil {
				return nil, fmt.Errorf("kafka sink %s: register %s: %w", s.opts.Name, p.subject, err)
			}
			if err := s.reg.SetCompatibility(ctx, p.subject, s.opts.Compatibility); err != nil {
				return nil, fmt.Errorf("kafka sink %s: %w", s.opts.Name, err)
			}
			s.registered[[2]string{p.subject, p.text}] = id
			*p.id = id
		}
	}
	for _, p := range todo {
		if *p.id != 0 {
			continue
		}
		id, err := s.reg.Register(ctx, p.subject, p.text)
		if err != nil {
			return nil, fmt.Errorf("kafka sink %s: register %s: %w", s.opts.Name, p.subject, err)
		}
		s.registered[[2]string{p.subject, p.text}] = id
		*p.id = id
	}
	st, err := s.ensureTopic(ctx, topic, sh.keyID != 0)
	var missing *missingTopicError
	if errors.As(err, &missing) {
		return nil, &pipeline.TableError{Table: t.ID, Err: err}
	}
	if err != nil {
		return nil, fmt.Errorf("kafka sink %s: %w", s.opts.Name, err)
	}
	sh.state = st
	if prev := s.prev[t.ID]; prev != nil && prev != t {
		s.log.Info("table shape registered", zap.String("table", t.ID.String()), zap.String("topic", topic),
			zap.String("change", describeChange(prev, t)), zap.Int("key_id", sh.keyID), zap.Int("value_id", sh.valueID))
	}
	s.prev[t.ID] = t
	s.shapes[key] = sh
	return sh, nil
}

// describeChange names the column changes from old to cur ("added column
// note (string, NOT NULL); column n: type int64 → string"). Without an
// old shape (the first this process saw) it lists cur's columns.
func describeChange(old, cur *pipeline.Table) string {
	col := func(c pipeline.Column) string {
		null := "NOT NULL"
		if c.Nullable {
			null = "nullable"
		}
		return fmt.Sprintf("%s (%s, %s)", c.Name, typeName(c), null)
	}
	if old == nil {
		cols := make([]string, len(cur.Columns))
		for i, c := range cur.Columns {
			cols[i] = col(c)
		}
		return "columns " + strings.Join(cols, ", ") + " (no earlier shape seen by this process)"
	}
	var out []string
	was := map[string]pipeline.Column{}
	for _, c := range old.Columns {
		was[c.Name] = c
	}
	now := map[string]bool{}
	for _, c := range cur.Columns {
		now[c.Name] = true
		o, ok := was[c.Name]
		switch {
		case !ok:
			out = append(out, "added column "+col(c))
		default:
			if typeName(o) != typeName(c) || o.Precision != c.Precision || o.Scale != c.Scale {
				out = append(out, fmt.Sprintf("column %s: type %s → %s", c.Name, typeDetail(o), typeDetail(c)))
			}
			if o.Nullable != c.Nullable {
				from, to := "NOT NULL", "nullable"
				if o.Nullable {
					from, to = to, from
				}
				out = append(out, fmt.Sprintf("column %s: %s → %s", c.Name, from, to))
			}
			if o.Key != c.Key {
				out = append(out, fmt.Sprintf("column %s: key %v → %v", c.Name, o.Key, c.Key))
			}
		}
	}
	for _, c := range old.Columns {
		if !now[c.Name] {
			out = append(out, "dropped column "+col(c))
		}
	}
	if len(out) == 0 {
		return "no column change (type details or key order differ)"
	}
	return strings.Join(out, "; ")
}

func typeName(c pipeline.Column) string {
	if c.Type == pipeline.TypeArray {
		return c.Elem.String() + "[]"
	}
	return c.Type.String()
}

func typeDetail(c pipeline.Column) string {
	if c.SourceType != "" {
		return typeName(c) + " " + c.SourceType
	}
	if c.Type == pipeline.TypeDecimal && c.Precision > 0 {
		return fmt.Sprintf("decimal(%d,%d)", c.Precision, c.Scale)
	}
	return typeName(c)
}
