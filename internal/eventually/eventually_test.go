package eventually

import (
	"sync/atomic"
	"testing"
	"time"
)

// fakeT records a failure instead of ending the test.
type fakeT struct {
	testing.TB
	failed string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed = format
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
