package dlq

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
)

// A topic the DLQ creates is usable at once, even before every broker
// lists it; reopening an existing topic counts the letters it holds; a
// missing topic the DLQ may not create is refused with the fix.
func TestKafkaDLQCreatesReopensAndRefusesMissingTopics(t *testing.T) {
	k := harness.KafkaT(t)
	brokers := []string{k.Addr()}
	now := time.Now()
	for trial := range 5 {
		topic := "dlq.fresh." + string(rune('a'+trial))
		q, err := OpenKafka(ctx, KafkaOptions{Brokers: brokers, Topic: topic, CreateTopic: true})
		if err != nil {
			t.Fatalf("trial %d: open a new topic: %v", trial, err)
		}
		if d := q.depth.Load(); d != 0 {
			t.Fatalf("trial %d: new topic depth %d", trial, d)
		}
		if err := q.Put(ctx, []pipeline.DeadLetter{letter(1, now), letter(2, now), letter(3, now)}); err != nil {
			t.Fatal(err)
		}
		q.Close()
		again, err := OpenKafka(ctx, KafkaOptions{Brokers: brokers, Topic: topic, CreateTopic: true})
		if err != nil {
			t.Fatalf("trial %d: reopen: %v", trial, err)
		}
		if d := again.depth.Load(); d != 3 {
			t.Fatalf("trial %d: reopened depth %d, want 3", trial, d)
		}
		again.Close()
	}
	_, err := OpenKafka(ctx, KafkaOptions{Brokers: brokers, Topic: "dlq.missing"})
	if !errors.Is(err, kerr.UnknownTopicOrPartition) || !strings.Contains(err.Error(), "create_topic: true") {
		t.Fatalf("missing topic: %v", err)
	}
}
