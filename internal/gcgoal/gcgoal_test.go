package gcgoal

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
	"testing"
	"time"

	"github.com/bytedance/gopkg/util/gctuner"

	"github.com/toolgate/toolgate/internal/eventually"
)

func TestTarget(t *testing.T) {
	for _, c := range []struct {
		mib  int
		gogc string
		want uint64
	}{
		{64, "", 64 << 20},
		{1, "", 1 << 20},
		{0, "", 0},
		{-5, "", 0},
		{64, "200", 0},
		{64, "off", 0},
	} {
		if got := target(c.mib, c.gogc); got != c.want {
			t.Errorf("target(%d, %q) = %d, want %d", c.mib, c.gogc, got, c.want)
		}
	}
}

// TestSetRaisesPercentWhileHeapIsSmall: with a target far above this
// test binary's heap, the collector is stretched to the cap after a cycle.
func TestSetRaisesPercentWhileHeapIsSmall(t *testing.T) {
	t.Setenv("GOGC", "")
	Set(4096, slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(func() { gctuner.Tuning(0); debug.SetGCPercent(100) })
	eventually.True(t, 10*time.Second, fmt.Sprintf("GC percent %d after cycles", MaxPercent), func() bool {
		runtime.GC()
		return gctuner.GetGCPercent() == MaxPercent
	})
}

// Gateways started one after another in one process (as tests do) tune
// the one collector without racing the tuner's own reads.
func TestSetAgain(t *testing.T) {
	t.Setenv("GOGC", "")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	t.Cleanup(func() { gctuner.Tuning(0); debug.SetGCPercent(100) })
	for _, mib := range []int{64, 4096, 64} {
		Set(mib, log)
		runtime.GC()
	}
	if p := gctuner.GetGCPercent(); p < 100 || p > MaxPercent {
		t.Fatalf("GC percent %d, want within [100, %d]", p, MaxPercent)
	}
}

// TestSetConcurrently: gateways of one process may start at once; the
// race detector finds any unguarded use of gctuner's global.
func TestSetConcurrently(t *testing.T) {
	if gogc := target(DefaultHeapMiB, os.Getenv("GOGC")); gogc == 0 {
		t.Fatal("GOGC is set: nothing reaches gctuner, so nothing is tested")
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() { Set(DefaultHeapMiB+i, log) })
	}
	wg.Wait()
	Set(DefaultHeapMiB, log)
}
