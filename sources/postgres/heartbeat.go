package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pglogrepl"
	"go.uber.org/zap"
)

// heartbeats writes a non-transactional logical message into the captured
// database's WAL every HeartbeatInterval. The decoder turns it into an
// OpHeartbeat record positioned at the message, so an idle database (or one
// whose server is busy only in other databases) still moves its checkpoint
// and the slot (Invariant 8), and the runtime can measure end-to-end latency
// from the time the message carries. The message also carries a digest of
// every published table's columns, by which the decoder finds shapes that
// changed with no row change after them (shapecheck.go, Invariant 11).
func (s *Source) heartbeats(ctx context.Context) {
	if s.version < 140000 {
		// pgoutput decodes logical messages from PostgreSQL 14; idle
		// keepalives still advance the slot (see keepalivePosition).
		s.log.Info("heartbeat messages need PostgreSQL 14 or newer; relying on keepalives")
		return
	}
	if s.standby {
		// A standby takes no writes; idle keepalives advance the slot
		// (Invariant 8, keepalivePosition).
		s.log.Info("hot standby: no heartbeat messages; relying on keepalives")
		return
	}
	t := time.NewTicker(s.opts.HeartbeatInterval)
	defer t.Stop()
	sql := heartbeatSQL(s.version)
	var failingSince, lastLog time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// Invariant 8: a position-carrying message even when nothing changes.
		// Invariant 11: with the catalog digest of every published table.
		now := time.Now().UTC().Format(time.RFC3339Nano)
		_, err := s.pool.Exec(ctx, sql, HeartbeatPrefix, now, s.opts.Publication)
		if err != nil && ctx.Err() == nil {
			// Whatever the digests' query ran into must not stop the
			// heartbeats themselves: the time alone still moves the slot.
			s.log.Debug("heartbeat with shape digests failed; sending the time alone", zap.Error(err))
			_, err = s.pool.Exec(ctx, "SELECT pg_logical_emit_message(false, $1::text, $2::text)", HeartbeatPrefix, now)
		}
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			s.m.heartbeatErrors.Inc()
			if failingSince.IsZero() {
				failingSince = time.Now()
			}
			// One line per minute while it keeps failing.
			if time.Since(lastLog) >= time.Minute {
				lastLog = time.Now()
				s.log.Warn("heartbeat failed; an idle database does not advance its slot until it works",
					zap.Error(err), zap.Duration("failing_for", time.Since(failingSince).Round(time.Second)))
			}
		case !failingSince.IsZero():
			s.log.Info("heartbeats work again", zap.Duration("failed_for", time.Since(failingSince).Round(time.Second)))
			failingSince, lastLog = time.Time{}, time.Time{}
		}
	}
}

// pollSlot samples the slot and the server's WAL position every
// StatusInterval for the lag and retention metrics, and logs a slot whose
// WAL is at risk or lost (Invariant 9).
func (s *Source) pollSlot(ctx context.Context) {
	t := time.NewTicker(s.opts.StatusInterval)
	defer t.Stop()
	lastStatus := ""
	for {
		s.sampleSlot(ctx, &lastStatus)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Source) sampleSlot(ctx context.Context, lastStatus *string) {
	if s.stream != nil {
		if s.stream.connected.Load() {
			s.m.connected.Set(1)
		} else {
			s.m.connected.Set(0)
		}
	}
	s.m.lagSeconds.Set(s.lagSeconds())
	var cur string
	err := s.pool.QueryRow(ctx, `SELECT (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END)::text`).Scan(&cur)
	if err != nil {
		if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
			s.log.Debug("slot poll failed", zap.Error(err))
		}
		return
	}
	curLSN, err := pglogrepl.ParseLSN(cur)
	if err != nil {
		return
	}
	if s.stream != nil {
		s.stream.currentWAL.Store(uint64(curLSN))
		s.m.lagBytes.Set(float64(s.stream.lagBytes()))
	}
	r, ok, err := s.readSlot(ctx)
	if err != nil {
		return
	}
	if !ok {
		if *lastStatus != "missing" {
			s.log.Error("the replication slot is gone; the changes it held are lost to this pipeline: " + resnapshotHint)
		}
		*lastStatus = "missing"
		return
	}
	if r.restart != 0 && curLSN > r.restart {
		s.m.retainedWAL.Set(float64(curLSN - r.restart))
	}
	// Invariant 9: a slot at risk is a metric and a log line.
	if r.walStatus != *lastStatus {
		switch r.walStatus {
		case "lost":
			s.log.Error("the replication slot's WAL is lost (wal_status 'lost'): " + resnapshotHint)
		case "unreserved":
			s.log.Warn("the replication slot's WAL is unreserved: the server will remove WAL it needs unless the pipeline catches up",
				zap.Float64("retained_bytes", float64(curLSN-r.restart)))
		case "extended":
			s.log.Warn("the replication slot retains more WAL than max_wal_size", zap.Float64("retained_bytes", float64(curLSN-r.restart)))
		}
	}
	*lastStatus = r.walStatus
}
