package chainbench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/schema"
	kafkasink "github.com/sluice-cdc/sluice/sinks/kafka"
)

// A broker and a schema registry for -sink kafka, started once per
// process and stopped by TestMain; every run writes topics of its own.
var kafkaServers struct {
	once sync.Once
	k    *harness.Kafka
	reg  *harness.Registry
	err  error
	runs int
}

// kafkaSink returns a Kafka sink with the config defaults (Debezium
// envelope in Avro, lz4, compacted topics) writing topics of a fresh
// prefix.
func kafkaSink(b *testing.B) pipeline.Sink {
	b.Helper()
	s := &kafkaServers
	s.once.Do(func() {
		var wg sync.WaitGroup
		var kErr, rErr error
		wg.Add(2)
		go func() { defer wg.Done(); s.k, kErr = harness.StartKafka(context.Background(), harness.KafkaOptions{}) }()
		go func() {
			defer wg.Done()
			s.reg, rErr = harness.StartRegistry(context.Background(), harness.RegistryOptions{})
		}()
		wg.Wait()
		s.err = errors.Join(kErr, rErr)
	})
	if s.err != nil {
		b.Fatalf("start Kafka and the registry: %v", s.err)
	}
	s.runs++
	o := kafkasink.Defaults(s.k.Brokers(), fmt.Sprintf("bench%d", s.runs))
	sink, err := kafkasink.New(o, schema.NewSRClient(s.reg.URL(), schema.SRClientOptions{}), nil)
	if err != nil {
		b.Fatal(err)
	}
	return sink
}

// stopKafka stops what kafkaSink started.
func stopKafka() {
	if kafkaServers.k != nil {
		_ = kafkaServers.k.Stop()
	}
	if kafkaServers.reg != nil {
		_ = kafkaServers.reg.Stop()
	}
}
