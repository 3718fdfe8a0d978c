package redis

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/sluice-cdc/sluice/pipeline"
	"github.com/sluice-cdc/sluice/sinks/upsert"
)

// Tombstones outlive their table's snapshot (Invariant 4: a late snapshot
// row must meet the tombstone of a newer delete). A table's snapshot
// counts as running while a snapshot record of it (OpRead, or marked
// Snapshot) was written within TombstoneTTL; the time of the last one is
// kept in <base>#snapshot (base: the barrier key without "#barrier"),
// stored before the records are written and at most once per
// upsert.StampEvery. Tombstones written meanwhile are held: no expiry, and
// their keys in the sorted set <base>#held scored by write time. Once the
// snapshot is over (no snapshot record for TombstoneTTL), the next Write's
// sweep expires each held tombstone TombstoneTTL after it was written and
// drops the set. The bases with a snapshot time are listed in the set
// sluice#<sink name>#snapshots, so a restarted sink sweeps tables it will
// never see again.

// maxSweepEvery bounds the time between two sweeps.
const maxSweepEvery = 10 * time.Minute

func (s *Sink) registryKey() string { return "sluice#" + s.opts.Name + "#snapshots" }

func barrierKey(base string) string { return base + "#barrier" }

func snapshotKey(base string) string { return base + "#snapshot" }

func heldKey(base string) string { return base + "#held" }

// loadSnapshots reads the stored snapshot times.
func (s *Sink) loadSnapshots(ctx context.Context, c *goredis.Client) error {
	bases, err := c.SMembers(ctx, s.registryKey()).Result()
	if err != nil {
		return fmt.Errorf("redis sink: snapshot times: %w", err)
	}
	s.snapshots = map[string]int64{}
	for _, b := range bases {
		v, err := c.Get(ctx, snapshotKey(b)).Result()
		if err == goredis.Nil {
			continue
		}
		if err != nil {
			return fmt.Errorf("redis sink: snapshot time of %s: %w", b, err)
		}
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return pipeline.Fatal(fmt.Errorf("redis sink: %s holds %q, not a time in milliseconds", snapshotKey(b), v))
		}
		s.snapshots[b] = ms
	}
	return nil
}

// stampSnapshots stores now as the snapshot time of records' tables with
// snapshot records, where the stored one is older than upsert.StampEvery,
// and sets each table's tombstone argument for this Write: held (-now)
// while its snapshot runs, else the TTL. An ACL that denies the sink's
// user a table's snapshot key fails that table (tableError).
func (s *Sink) stampSnapshots(ctx context.Context, records []pipeline.Record, now time.Time) error {
	ms := now.UnixMilli()
	var stamp []*tableInfo
	for _, t := range upsert.SnapshotTables(records) {
		ti := s.info(t)
		if at, ok := s.snapshots[ti.base]; (!ok || ms-at >= upsert.StampEvery.Milliseconds()) &&
			!slices.ContainsFunc(stamp, func(x *tableInfo) bool { return x.base == ti.base }) {
			stamp = append(stamp, ti)
		}
	}
	if len(stamp) > 0 {
		cmds, err := s.client.TxPipelined(ctx, func(p goredis.Pipeliner) error {
			for _, ti := range stamp {
				p.Set(ctx, snapshotKey(ti.base), ms, 0)
				p.SAdd(ctx, s.registryKey(), ti.base)
			}
			return nil
		})
		if err != nil {
			// A refused command fails the transaction (EXECABORT); its
			// own error says why.
			for k, ti := range stamp {
				if 2*k < len(cmds) {
					if te := tableError(ctx, ti, cmds[2*k].Err()); te != nil {
						return te
					}
				}
			}
			return err
		}
		for _, ti := range stamp {
			s.snapshots[ti.base] = ms
		}
	}
	held := "-" + strconv.FormatInt(ms, 10)
	for _, ti := range s.tables {
		ti.tomb = s.tombTTL
		if s.snapshotRunning(ti.base, ms) {
			ti.tomb = held
		}
	}
	return nil
}

// snapshotRunning reports whether base's table had a snapshot record
// within TombstoneTTL of ms (plus the StampEvery its time may lag).
func (s *Sink) snapshotRunning(base string, ms int64) bool {
	at, ok := s.snapshots[base]
	return ok && ms-at < (s.opts.TombstoneTTL+upsert.StampEvery).Milliseconds()
}

// sweep releases the held tombstones of tables whose snapshot is over, at
// most once per min(TombstoneTTL, 10m); a failure is logged and retried
// at the next sweep.
func (s *Sink) sweep(ctx context.Context, now time.Time) {
	if !s.lastSweep.IsZero() && now.Sub(s.lastSweep) < min(s.opts.TombstoneTTL, maxSweepEvery) {
		return
	}
	s.lastSweep = now
	ms := now.UnixMilli()
	for base := range s.snapshots {
		if s.snapshotRunning(base, ms) {
			continue
		}
		n, err := s.release(ctx, base, ms)
		if err != nil {
			s.log.Warn("releasing tombstones held during the snapshot failed; retried at the next sweep",
				zap.String("table", base), zap.Error(err))
			continue
		}
		delete(s.snapshots, base)
		s.log.Info("snapshot over: held tombstones now expire", zap.String("table", base), zap.Int("tombstones", n))
	}
}

// release expires base's held tombstones, then forgets its snapshot.
func (s *Sink) release(ctx context.Context, base string, ms int64) (int, error) {
	total := 0
	for {
		zs, err := s.client.ZRangeWithScores(ctx, heldKey(base), 0, scanCount-1).Result()
		if err != nil {
			return total, err
		}
		if len(zs) == 0 {
			break
		}
		keys := []string{barrierKey(base)}
		argv := []any{"x", s.opts.Format[:1], ms, s.opts.TombstoneTTL.Milliseconds()}
		for _, z := range zs {
			keys = append(keys, z.Member.(string))
			argv = append(argv, int64(z.Score))
		}
		if err := s.run(ctx, keys, argv); err != nil {
			return total, err
		}
		total += len(zs)
	}
	_, err := s.client.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		p.Del(ctx, heldKey(base), snapshotKey(base))
		p.SRem(ctx, s.registryKey(), base)
		return nil
	})
	return total, err
}
