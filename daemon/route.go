package daemon

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-cdc/sluice/config"
	"github.com/sluice-cdc/sluice/dlq"
	"github.com/sluice-cdc/sluice/pipeline"
)

// openDLQ opens the pipeline's dead-letter queue: the Kafka topic when
// dlq.kafka is set, else the JSON-lines file in dlq.dir.
func openDLQ(ctx context.Context, cfg *config.Config, reg prometheus.Registerer) (pipeline.DLQ, error) {
	if k := cfg.DLQ.Kafka; k != nil {
		return dlq.OpenKafka(ctx, kafkaDLQOptions(k))
	}
	return dlq.OpenFile(cfg.DLQ.Dir, cfg.Pipeline, dlq.WithRegisterer(reg))
}

func kafkaDLQOptions(k *config.KafkaDLQ) dlq.KafkaOptions {
	return dlq.KafkaOptions{Brokers: k.Brokers, Topic: k.Topic, CreateTopic: k.CreateTopic,
		TLS: k.TLS.Enabled, CAFile: k.TLS.CAFile, CertFile: k.TLS.CertFile, KeyFile: k.TLS.KeyFile,
		Insecure: k.TLS.InsecureSkipVerify, SASLMechanism: k.SASL.Mechanism, Username: k.SASL.Username,
		Password: k.SASL.Password}
}

// routeSinks sets each sink's route (tables, columns) and its own Kafka
// dead-letter topic when it has one. The returned func closes those topics'
// clients; call it even on error.
func routeSinks(ctx context.Context, cfg *config.Config, sinks []pipeline.NamedSink) (func(), error) {
	var opened []pipeline.DLQ
	closeAll := func() {
		for _, q := range opened {
			_ = q.Close()
		}
	}
	for i := range sinks {
		c := cfg.Sinks[i].Common()
		r, err := pipeline.NewRoute(c.Tables, c.Columns.Include, c.Columns.Exclude)
		if err != nil {
			return closeAll, &pipeline.OpenError{What: "sink " + c.Name, Err: err}
		}
		sinks[i].Route = r
		if k := c.DLQ.Kafka; k != nil {
			q, err := dlq.OpenKafka(ctx, kafkaDLQOptions(k))
			if err != nil {
				return closeAll, &pipeline.OpenError{What: "sink " + c.Name + " dead-letter topic", Err: err}
			}
			opened = append(opened, q)
			sinks[i].DLQ = q
		}
	}
	return closeAll, nil
}
