package rangequeue

import (
	"sync"
	"testing"
)

// Values pushed while readers wait come out once each, in push order per
// reader; after Close the readers drain the queue and stop.
func TestQueueHandsEveryValueOnceAndStopsAfterClose(t *testing.T) {
	q := New[int]()
	const n, readers = 10000, 4
	got := make([][]int, readers)
	var wg sync.WaitGroup
	for r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				v, ok := q.Pop()
				if !ok {
					return
				}
				got[r] = append(got[r], v)
			}
		}()
	}
	for i := range n {
		q.Push(i)
	}
	q.Close()
	wg.Wait()
	seen := make([]bool, n)
	for _, vs := range got {
		for i, v := range vs {
			if seen[v] {
				t.Fatalf("%d popped twice", v)
			}
			seen[v] = true
			if i > 0 && vs[i-1] >= v {
				t.Fatalf("a reader popped %d after %d", v, vs[i-1])
			}
		}
	}
	for v, ok := range seen {
		if !ok {
			t.Fatalf("%d never popped", v)
		}
	}
	if _, ok := q.Pop(); ok {
		t.Fatal("pop after close and drain returned a value")
	}
}
