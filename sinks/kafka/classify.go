package kafka

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluice-cdc/sluice/pipeline"
)

// pending is what one input record turned into: the Kafka records to
// produce (a delete and its tombstone share the input's index).
type pending struct {
	idx  int
	recs []*kgo.Record
	// table is the input record's table and topic its topic's state; both
	// nil for the sink's own records (a dead letter, the high-water mark).
	table *pipeline.Table
	topic *topicState
}

// judge sorts the produce errors of work (by input record index, as the
// flight collects them) into the verdict on the batch, most severe first:
//
//   - pipeline.Fatal: credentials, a cluster-wide authorization, a fenced
//     transactional producer, or an authorization failure on the sink's own
//     topics (dead letters, high-water marks);
//   - a *pipeline.TableError: the principal may not write a table's topic
//     (TOPIC_AUTHORIZATION_FAILED), or the topic does not exist and the sink
//     does not create it (UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID, which
//     the client answers after asking several times);
//   - pipeline.TooLarge: MESSAGE_TOO_LARGE or RECORD_LIST_TOO_LARGE, which
//     the broker answers for a whole record batch of a partition (records of
//     many inputs), so the runtime writes the records again in smaller
//     pieces and dead-letters one that is refused alone;
//   - a plain error for anything else (leaders moving, delivery timeouts, a
//     lost broker): the runtime retries the batch.
//
// Without such an error, refused holds the inputs the broker refused for
// good (INVALID_RECORD, CORRUPT_MESSAGE), as permanent per-record failures.
func (s *Sink) judge(work []pending, errs map[int]error) (refused map[int]error, err error) {
	var fatal, table, tooLarge, transient error
	for _, p := range work {
		e := errs[p.idx]
		if e == nil {
			continue
		}
		topicAuth := errors.Is(e, kerr.TopicAuthorizationFailed)
		switch {
		case isFenced(e) || (isFatal(e) && (!topicAuth || p.table == nil)):
			fatal = e
		case topicAuth:
			table = firstOf(table, &pipeline.TableError{Table: p.table.ID, Err: fmt.Errorf(
				"kafka: the sink's principal may not write topic %s: grant it WRITE and DESCRIBE on the topic: %w", topicOf(p), e)})
		case (errors.Is(e, kerr.UnknownTopicOrPartition) || errors.Is(e, kerr.UnknownTopicID)) && p.table != nil && !p.topic.mayCreate:
			table = firstOf(table, &pipeline.TableError{Table: p.table.ID, Err: fmt.Errorf("%w: %w", s.missingTopic(topicOf(p)), e)})
		case errors.Is(e, kerr.MessageTooLarge) || errors.Is(e, kerr.RecordListTooLarge):
			tooLarge = firstOf(tooLarge, e)
		case p.idx >= 0 && isPermanent(e):
			if refused == nil {
				refused = map[int]error{}
			}
			refused[p.idx] = e
		default:
			transient = firstOf(transient, e)
		}
	}
	switch {
	case fatal != nil:
		return nil, pipeline.Fatal(fmt.Errorf("kafka sink %s: %w", s.opts.Name, fatal))
	case table != nil:
		return nil, table
	case tooLarge != nil:
		return nil, pipeline.TooLarge(fmt.Errorf("kafka sink %s: the broker refused records as too large: %w", s.opts.Name, tooLarge))
	case transient != nil:
		return nil, fmt.Errorf("kafka sink %s: not every record was acknowledged: %w", s.opts.Name, transient)
	}
	return refused, nil
}

// firstOf returns the first error of a kind: the one already kept, else e.
func firstOf(kept, e error) error {
	if kept != nil {
		return kept
	}
	return e
}

func topicOf(p pending) string {
	if len(p.recs) > 0 {
		return p.recs[0].Topic
	}
	return "?"
}

// missingTopicError is a table's topic that does not exist and that the
// sink does not create: create_topics is off, or the broker refused the
// sink's principal the creation. Its message names the fix.
type missingTopicError struct {
	topic    string
	createOn bool // create_topics is on: the creation was refused
}

func (e *missingTopicError) Error() string {
	if e.createOn {
		return fmt.Sprintf("kafka: topic %s does not exist and the sink's principal may not create it: "+
			"create the topic, or grant CREATE on it", e.topic)
	}
	return fmt.Sprintf("kafka: topic %s does not exist and create_topics is off: create the topic, "+
		"or enable create_topics", e.topic)
}

func (s *Sink) missingTopic(topic string) error {
	return &missingTopicError{topic: topic, createOn: s.opts.CreateTopics.Enabled}
}

// isPermanent reports broker answers that no retry can change for the
// records of the refused batch.
func isPermanent(err error) bool {
	return errors.Is(err, kerr.InvalidRecord) || errors.Is(err, kerr.CorruptMessage)
}

// isFatal reports answers that need an operator (credentials, ACLs).
func isFatal(err error) bool {
	return errors.Is(err, kerr.TopicAuthorizationFailed) || errors.Is(err, kerr.ClusterAuthorizationFailed) ||
		errors.Is(err, kerr.SaslAuthenticationFailed) || errors.Is(err, kerr.TransactionalIDAuthorizationFailed)
}
