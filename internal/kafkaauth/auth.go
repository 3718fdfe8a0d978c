// Package kafkaauth builds the SASL client options shared by every Kafka
// client sluice runs (the Kafka sink and the Kafka dead-letter queue).
package kafkaauth

import (
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// SASL returns the client option for mechanism ("" : none).
func SASL(mechanism, user, pass string) ([]kgo.Opt, error) {
	switch strings.ToUpper(mechanism) {
	case "":
		return nil, nil
	case "PLAIN":
		return []kgo.Opt{kgo.SASL(plain.Auth{User: user, Pass: pass}.AsMechanism())}, nil
	case "SCRAM-SHA-256":
		return []kgo.Opt{kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha256Mechanism())}, nil
	case "SCRAM-SHA-512":
		return []kgo.Opt{kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha512Mechanism())}, nil
	}
	return nil, fmt.Errorf("sasl: unknown mechanism %q (want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)", mechanism)
}
