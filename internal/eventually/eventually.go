// Package eventually is how tests wait for something to happen: they poll
// a condition until it holds or a bound passes, instead of sleeping for a
// time and hoping it was long enough. The bound only says when to give up;
// a test never asserts on how long the wait took.
package eventually

import (
	"testing"
	"time"
)

// True polls cond — every 5 ms at first, backing off to every 100 ms —
// until it holds, and returns how long that took. When it still does not
// hold after d, the test fails with what (what should have become true).
func True(t testing.TB, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	pause := 5 * time.Millisecond
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(pause)
		pause = min(2*pause, 100*time.Millisecond)
	}
	return time.Since(start)
}
