package redis

import (
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluice-cdc/sluice/pipeline"
)

// A tombstone written while its table's snapshot runs is held (no
// expiry) until the snapshot is over, across a restart; then the sweep
// expires each held tombstone an hour (the TTL) after it was written, or
// deletes it when that is past, and forgets the snapshot. A tombstone
// written after the snapshot expires as usual.
func TestTombstonesHeldUntilTheSnapshotIsOver(t *testing.T) {
	eachFormat(t, func(t *testing.T, s *Sink, c *goredis.Client) {
		t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		now := t0
		s.now = func() time.Time { return now }
		snap := func(id int64) pipeline.Record {
			r := row(pipeline.OpRead, 1, id, "snap", nil)
			r.Snapshot = true
			return r
		}
		held := func(key string) {
			t.Helper()
			if ttl := c.PTTL(ctx, key).Val(); ttl != -1 {
				t.Fatalf("%s: TTL %v while its table's snapshot runs, want none", key, ttl)
			}
			if _, err := c.ZScore(ctx, "public.acct#held", key).Result(); err != nil {
				t.Fatalf("%s is not in the held set: %v", key, err)
			}
		}
		mustWrite(t, s, snap(1), snap(2), snap(3))
		now = t0.Add(10 * time.Minute)
		mustWrite(t, s, row(pipeline.OpDelete, 11, 1, nil, nil))
		held("public.acct:1")
		now = t0.Add(50 * time.Minute)
		mustWrite(t, s, snap(4)) // the snapshot still runs

		// A restart remembers the snapshot time.
		if err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
		s = openSink(t, s.opts.Addr, s.opts)
		s.now = func() time.Time { return now }
		now = t0.Add(70 * time.Minute)
		mustWrite(t, s, row(pipeline.OpDelete, 12, 2, nil, nil))
		held("public.acct:2")
		// A late snapshot row meets the tombstone (and is a snapshot
		// record: the snapshot runs until an hour after it).
		mustWrite(t, s, snap(2))
		expect(t, s, []any{int64(3), "snap", nil}, []any{int64(4), "snap", nil})
		now = t0.Add(100 * time.Minute)
		mustWrite(t, s, row(pipeline.OpDelete, 13, 4, nil, nil))
		held("public.acct:4")

		// 62 minutes after the last snapshot record the snapshot is over.
		now = t0.Add(132 * time.Minute)
		mustWrite(t, s, row(pipeline.OpUpdate, 14, 3, "c", nil))
		for _, k := range []string{"public.acct:1", "public.acct:2"} {
			if n := c.Exists(ctx, k).Val(); n != 0 {
				t.Fatalf("%s, a tombstone written over an hour ago, outlived the snapshot by more than the TTL", k)
			}
		}
		if ttl := c.PTTL(ctx, "public.acct:4").Val(); ttl <= 27*time.Minute || ttl > 28*time.Minute {
			t.Fatalf("tombstone written 32 minutes ago: TTL %v, want the 28 minutes its hour has left", ttl)
		}
		if _, deleted, _ := readKey(t, s, c, "public.acct:4"); !deleted {
			t.Fatal("released key 4 is no longer a tombstone")
		}
		for _, k := range []string{"public.acct#held", "public.acct#snapshot"} {
			if c.Exists(ctx, k).Val() != 0 {
				t.Fatalf("%s left after the release", k)
			}
		}
		if c.SIsMember(ctx, s.registryKey(), "public.acct").Val() {
			t.Fatal("the table is still listed as having a snapshot")
		}
		now = t0.Add(133 * time.Minute)
		mustWrite(t, s, row(pipeline.OpDelete, 15, 3, nil, nil))
		if ttl := c.PTTL(ctx, "public.acct:3").Val(); ttl <= 59*time.Minute || ttl > time.Hour {
			t.Fatalf("tombstone after the snapshot: TTL %v, want an hour", ttl)
		}
		expect(t, s)
	})
}
