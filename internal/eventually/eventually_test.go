package eventually

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeT records a failure instead of ending the test.
type fakeT struct {
	testing.TB
	failed string
	msg    string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed = format
	f.msg = fmt.Sprintf(format, args...)
	panic(f) // Fatalf does not return
}

func TestTrueWaitsForTheCondition(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	True(t, 10*time.Second, "the counter reaches 3", func() bool { return n.Add(1) >= 3 })
	if n.Load() != 3 {
		t.Fatalf("cond called %d times, want 3 (it holds on the third)", n.Load())
	}
}

func TestTrueFailsNamingWhat(t *testing.T) {
	t.Parallel()
	f := &fakeT{TB: t}
	func() {
		defer func() {
			if r := recover(); r != nil && r != any(f) {
				panic(r)
			}
		}()
		True(f, 20*time.Millisecond, "never", func() bool { return false })
	}()
	if f.failed == "" {
		t.Fatal("True returned although the condition never held")
	}
}

func TestSucceedsFailsWithTheLastError(t *testing.T) {
	t.Parallel()
	f := &fakeT{TB: t}
	var n atomic.Int32
	func() {
		defer func() {
			if r := recover(); r != nil && r != any(f) {
				panic(r)
			}
		}()
		Succeeds(f, 20*time.Millisecond, "the service answers", func() error {
			return fmt.Errorf("attempt %d refused", n.Add(1))
		})
	}()
	if f.failed == "" {
		t.Fatal("Succeeds returned although f never succeeded")
	}
	if want := fmt.Sprintf("attempt %d refused", n.Load()); !strings.Contains(f.msg, want) || !strings.Contains(f.msg, "the service answers") {
		t.Fatalf("failure %q, want what and the last error (%q)", f.msg, want)
	}
}

func TestSucceedsWaits(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	Succeeds(t, 10*time.Second, "the third attempt", func() error {
		if n.Add(1) < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if n.Load() != 3 {
		t.Fatalf("f called %d times, want 3", n.Load())
	}
}

func TestHolds(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	if !Holds(10*time.Second, func() bool { return n.Add(1) >= 3 }) || n.Load() != 3 {
		t.Fatalf("Holds: cond called %d times, want true on the third", n.Load())
	}
	if Holds(10*time.Millisecond, func() bool { return false }) {
		t.Fatal("Holds reported a condition that never held")
	}
}

func TestWithin(t *testing.T) {
	t.Parallel()
	if err := Within(10*time.Second, func() error { return nil }); err != nil {
		t.Fatalf("Within: %v", err)
	}
	refused := errors.New("refused")
	err := Within(10*time.Millisecond, func() error { return refused })
	if !errors.Is(err, refused) || !strings.Contains(err.Error(), "not within 10ms") {
		t.Fatalf("Within: %v, want the bound and the last error", err)
	}
}
