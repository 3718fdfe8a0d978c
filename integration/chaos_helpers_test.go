package integration

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/integration/harness"
	"github.com/sluice-cdc/sluice/pipeline"
)

// killAtRandom kill -9s the daemon of cfg harness.Trials(8) times at
// random moments: as many as land there (up to half) during the initial
// load, the rest during the stream. loaded reports whether the load
// finished, from the checkpoint file at checkpoint. It returns the kills
// of each phase.
//
// A load kill comes once the run has made some of the load durable (the
// checkpoint's snapshot progress moved), then 0–100 ms later: an event,
// not a time, so a machine that loads faster still kills during the load
// as long as it spans a few checkpoints.
func killAtRandom(t *testing.T, cfg, checkpoint string, loaded func() bool) (loadKills, streamKills int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	kills := harness.Trials(8)
	for attempt := 0; loadKills < kills/2 && attempt < 2*kills; attempt++ {
		before, _ := loadProgress(checkpoint)
		d := startDaemon(t, cfg)
		d.waitAddr(t, 2*time.Minute)
		waitUntil(t, d, 2*time.Minute, "load progress", func() bool {
			now, ok := loadProgress(checkpoint)
			return ok && now != before || loaded()
		})
		time.Sleep(time.Duration(rng.IntN(100)) * time.Millisecond) // a random moment after it
		d.signal(syscall.SIGKILL)
		<-d.done
		// A checkpoint that still shows tables to read means the kill
		// landed before the load finished.
		if !loaded() {
			loadKills++
		} else {
			streamKills++
			break
		}
	}
	if loadKills < max(1, kills/2-2) {
		t.Fatalf("only %d of the kills landed during the initial load", loadKills)
	}
	if loadKills < kills/2 {
		t.Logf("only %d kills landed during the load (it finished before the others)", loadKills)
	}
	for loadKills+streamKills < kills {
		d := startDaemon(t, cfg)
		d.waitAddr(t, 2*time.Minute)
		// Let the load finish (resumed in chunks), then kill mid-stream.
		// A killed run's Postgres sink session can still be filling an
		// added column's rows (it ends only when the statement does) and
		// hold the target's lock meanwhile: allow for it. An incremental
		// load's chunks wait for their high watermarks to come through the
		// stream, which a machine busy with other packages' tests slows:
		// one such CI run took over 5 minutes.
		deadline := time.Now().Add(10 * time.Minute)
		for !loaded() {
			if time.Now().After(deadline) {
				t.Fatalf("initial load never completed:\n%s", d.logs())
			}
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(time.Duration(100+rng.IntN(1500)) * time.Millisecond)
		d.signal(syscall.SIGKILL)
		<-d.done
		streamKills++
	}
	return loadKills, streamKills
}

// loadProgress is the snapshot progress the checkpoint at path shows: the
// rows its unfinished snapshots have read and how many there are; ok is
// false while there is no checkpoint (or a torn read of one).
func loadProgress(path string) (p [2]int64, ok bool) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return p, false
	}
	var env struct {
		Checkpoint pipeline.Checkpoint `json:"checkpoint"`
	}
	var pos struct {
		Snapshot struct {
			Tables []struct {
				Rows int64 `json:"rows"`
			} `json:"tables"`
		} `json:"snapshot"`
	}
	if json.Unmarshal(raw, &env) != nil || json.Unmarshal(env.Checkpoint.Position, &pos) != nil {
		return p, false
	}
	for _, tb := range pos.Snapshot.Tables {
		p[0] += tb.Rows
	}
	p[1] = int64(len(pos.Snapshot.Tables))
	return p, true
}
