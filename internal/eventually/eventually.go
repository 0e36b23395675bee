// Package eventually is how tests wait for something to happen: they poll
// a condition until it holds or a bound passes, instead of sleeping for a
// time and hoping it was long enough. The bound only says when to give up;
// a test never asserts on how long the wait took.
//
// It is the one place test code may call time.Sleep (the forbidigo rule in
// .golangci.yml bans it in every other _test.go file). True and Succeeds
// fail the test with what they waited for (Succeeds with the last error
// too); Within and Holds only report, for TestMain and for goroutines
// other than the test's.
package eventually

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// True polls cond — every 5 ms at first, backing off to every 100 ms —
// until it holds, and returns how long that took. When it still does not
// hold after d, the test fails with what (what should have become true).
func True(t testing.TB, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	took, err := poll(d, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
	if err != nil {
		t.Fatalf("%s: not within %v", what, d)
	}
	return took
}

// Succeeds polls f as True polls its condition until f returns nil, and
// returns how long that took. When f still fails after d, the test fails
// with what and f's last error. f may itself end the test (t.Fatal) when
// waiting longer cannot help, a process that exited for one.
func Succeeds(t testing.TB, d time.Duration, what string, f func() error) time.Duration {
	t.Helper()
	took, err := poll(d, f)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return took
}

// Within polls f as Succeeds does, for code that has no testing.TB to fail
// (TestMain) or that reports the failure itself: it returns nil once f
// does, or, after d, an error naming d and wrapping f's last error.
func Within(d time.Duration, f func() error) error {
	_, err := poll(d, f)
	return err
}

// Holds polls cond as True does and reports whether it held within d,
// without failing anything: for a goroutine other than the test's (a
// service's handler) or a wait whose end is not a failure.
func Holds(d time.Duration, cond func() bool) bool {
	return Within(d, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	}) == nil
}

var errNotYet = errors.New("not yet")

func poll(d time.Duration, f func() error) (time.Duration, error) {
	start := time.Now()
	pause := 5 * time.Millisecond
	for {
		err := f()
		if err == nil {
			return time.Since(start), nil
		}
		if time.Since(start) > d {
			if errors.Is(err, errNotYet) {
				return time.Since(start), fmt.Errorf("not within %v", d)
			}
			return time.Since(start), fmt.Errorf("not within %v; last error: %w", d, err)
		}
		time.Sleep(pause)
		pause = min(2*pause, 100*time.Millisecond)
	}
}
