package integration

import (
	"math/rand/v2"
	"syscall"
	"testing"
	"time"
)

// killAtRandom kill -9s the daemon of cfg 20 times at random moments: as
// many as land there (up to 10) during the initial load, the rest during
// the stream. loaded reports whether a checkpoint exists, i.e. whether the
// load finished. It returns the kills of each phase.
func killAtRandom(t *testing.T, cfg string, loaded func() bool) (loadKills, streamKills int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	for attempt := 0; loadKills < 10 && attempt < 40; attempt++ {
		d := startDaemon(t, cfg)
		d.waitAddr(t, 2*time.Minute)
		time.Sleep(time.Duration(50+rng.IntN(1200)) * time.Millisecond) // a random moment
		d.signal(syscall.SIGKILL)
		<-d.done
		// No checkpoint yet means the kill landed before the load finished.
		if !loaded() {
			loadKills++
		} else {
			streamKills++
			break
		}
	}
	if loadKills < 10 {
		t.Logf("only %d kills landed during the load (it finished before the others)", loadKills)
	}
	for loadKills+streamKills < 20 {
		d := startDaemon(t, cfg)
		d.waitAddr(t, 2*time.Minute)
		// Let the load finish (it may be redone), then kill mid-stream.
		deadline := time.Now().Add(3 * time.Minute)
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
