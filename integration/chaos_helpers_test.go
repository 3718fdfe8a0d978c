package integration

import (
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-cdc/sluice/integration/harness"
)

// killAtRandom kill -9s the daemon of cfg harness.Trials(8) times at
// random moments: as many as land there (up to half) during the initial
// load, the rest during the stream. loaded reports whether a checkpoint exists, i.e. whether the
// load finished. It returns the kills of each phase.
func killAtRandom(t *testing.T, cfg string, loaded func() bool) (loadKills, streamKills int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	kills := harness.Trials(8)
	for attempt := 0; loadKills < kills/2 && attempt < 2*kills; attempt++ {
		d := startDaemon(t, cfg)
		d.waitAddr(t, 2*time.Minute)
		time.Sleep(time.Duration(50+rng.IntN(1200)) * time.Millisecond) // a random moment
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
		// hold the target's lock meanwhile: allow for it.
		deadline := time.Now().Add(5 * time.Minute)
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
