package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/upsert"
)

// generationKey holds the highest generation written (Invariant 10).
func (s *Sink) generationKey() string { return "sluice#" + s.opts.Name + "#generation" }

func (s *Sink) loadGeneration(ctx context.Context, c *goredis.Client) error {
	v, err := c.Get(ctx, s.generationKey()).Result()
	if err == goredis.Nil {
		s.gen = upsert.Generation{}
		return nil
	}
	if err != nil {
		return fmt.Errorf("redis sink: generation: %w", err)
	}
	g, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return pipeline.Fatal(fmt.Errorf("redis sink: %s holds %q, not a generation", s.generationKey(), v))
	}
	s.gen = upsert.Generation{Gen: g, Held: true}
	return nil
}

// Generation implements pipeline.GenerationKeeper.
func (s *Sink) Generation(context.Context) (uint64, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client == nil {
		return 0, false, errors.New("redis sink: generation before open")
	}
	return s.gen.Gen, s.gen.Held, nil
}

// recordGeneration stores the generation of records before any of them is
// written when it is above the recorded one (Invariant 10).
func (s *Sink) recordGeneration(ctx context.Context, records []pipeline.Record) error {
	g, ok := s.gen.Raise(records)
	if !ok {
		return nil
	}
	if err := s.client.Set(ctx, s.generationKey(), strconv.FormatUint(g, 10), 0).Err(); err != nil {
		return fmt.Errorf("redis sink: record generation %d: %w", g, err)
	}
	s.gen = upsert.Generation{Gen: g, Held: true}
	return nil
}
