package search

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/upsert"
)

// generationDoc is the state index document holding the highest
// generation of the versions this sink wrote (Invariant 10). Index names
// never contain '#', so it never meets an index's state document.
func (s *Sink) generationDoc() string { return "#generation#" + s.opts.Name }

func (s *Sink) loadGeneration(ctx context.Context) error {
	status, body, err := s.call(ctx, "generation", http.MethodGet, s.statePath(s.generationDoc()), nil, nil, 404)
	if err != nil {
		return err
	}
	s.generation = upsert.Generation{}
	if status == 404 {
		return nil
	}
	var doc struct {
		Source struct {
			Generation string `json:"generation"`
		} `json:"_source"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return fmt.Errorf("generation: %w", err)
	}
	g, err := strconv.ParseUint(doc.Source.Generation, 10, 64)
	if err != nil {
		return pipeline.Fatal(fmt.Errorf("state document %s holds generation %q: %w", s.generationDoc(), doc.Source.Generation, err))
	}
	s.generation = upsert.Generation{Gen: g, Held: true}
	return nil
}

// Generation implements pipeline.GenerationKeeper.
func (s *Sink) Generation(context.Context) (uint64, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.eng == nil {
		return 0, false, errNotOpen
	}
	return s.generation.Gen, s.generation.Held, nil
}

// recordGeneration stores the generation of records before any of them is
// written when it is above the recorded one. The state index's translog
// is synced per request, so the answer is durable.
func (s *Sink) recordGeneration(ctx context.Context, records []pipeline.Record) error {
	g, ok := s.generation.Raise(records)
	if !ok {
		return nil
	}
	body := []byte(`{"generation":"` + strconv.FormatUint(g, 10) + `"}`)
	if _, _, err := s.call(ctx, "record generation", http.MethodPut, s.statePath(s.generationDoc()), nil, body); err != nil {
		return err
	}
	s.generation = upsert.Generation{Gen: g, Held: true}
	return nil
}
