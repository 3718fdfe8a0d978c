package pipeline

import (
	"fmt"
	"slices"
	"strings"
)

// Dest is where a routing operator (transform/route) sends a record,
// instead of every sink whose Route takes its table. Sinks in To take the
// record; sinks in Away take a delete of its key at its version instead,
// so a row that stops going to a sink leaves it (a sink never keeps a row
// the routing now sends elsewhere; Invariant 4 keeps a later change that
// routes it back above the tombstone); other sinks take nothing. Dests are
// shared between records and never modified once set.
//
// Topic and AwayTopics are for Kafka sinks, which write a table to the
// topic their topic template names: Topic, when set, is the topic
// template a Kafka sink in To writes the record to instead, and each of
// AwayTopics ("" is the sink's own template) takes a delete of the key (a
// truncate for a truncate), so a row that moves to another topic leaves
// the one it was in.
type Dest struct {
	To         []string
	Away       []string
	Topic      string
	AwayTopics []string
}

func (d *Dest) String() string {
	s := fmt.Sprintf("to [%s], away from [%s]", strings.Join(d.To, " "), strings.Join(d.Away, " "))
	if d.Topic != "" || len(d.AwayTopics) > 0 {
		s += fmt.Sprintf(", topic %q, away from topics %q", d.Topic, d.AwayTopics)
	}
	return s
}

// ForSink returns the records sink receives of recs: every record without
// a Dest, and of those with one, the record when sink is in To and a
// delete of its key when sink is in Away. recs itself is returned when no
// record has a Dest.
func ForSink(sink string, recs []Record) []Record {
	i := 0 // by index: a Record is too large to copy for a look at Dest
	for i < len(recs) && recs[i].Dest == nil {
		i++
	}
	if i == len(recs) {
		return recs
	}
	out := make([]Record, i, len(recs))
	copy(out, recs[:i])
	for _, r := range recs[i:] {
		switch {
		case r.Dest == nil || slices.Contains(r.Dest.To, sink):
			out = append(out, r)
		case slices.Contains(r.Dest.Away, sink):
			out = append(out, r.AsDelete())
		}
	}
	return out
}

// AsDelete returns r as a delete of its key at its version: Before is
// r's newest image, After is nil. Its Dest is kept: a Kafka sink deletes
// the key in the record's topic and in its AwayTopics. The delete of a
// snapshot read is a snapshot record too: its version need not follow
// the stream's order (parallel MariaDB readers), so it must not count as
// a stream change where they are told apart (the exactly-once Kafka
// sink's high-water mark).
func (r Record) AsDelete() Record {
	if r.Op == OpDelete {
		return r
	}
	d := r
	d.Op, d.Before, d.After = OpDelete, r.After, nil
	if d.Before == nil {
		d.Before = r.Before
	}
	return d
}
