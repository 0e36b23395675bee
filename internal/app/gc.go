package app

import (
	"log/slog"
	"os"
	"sync"

	"github.com/bytedance/gopkg/util/gctuner"
)

// gcMaxPercent bounds how far tuneGC stretches the collector: at most a
// heap goal six times the live heap.
const gcMaxPercent = 500

// tuneGC makes the garbage collector run less often while the heap is
// small. A gateway's live heap is a few MiB, so with Go's default (GOGC
// 100) a busy one collects dozens of times a second, and each cycle's
// fixed cost (stacks, globals, the phases' hand-offs) is paid again and
// again. With a target of T bytes the GC percent is raised after every
// cycle so that the next heap goal is about T, at most 500 and never below
// 100: once the live heap reaches T/2 the collector behaves as Go's
// default does. An operator's GOGC wins: then nothing is tuned.
func tuneGC(mib int, log *slog.Logger) {
	gogc := os.Getenv("GOGC")
	t := gcTarget(mib, gogc)
	if t == 0 {
		if mib > 0 {
			log.Info("GOGC is set; --gc-heap-mib ignored", "gogc", gogc)
		}
		return
	}
	gcBounds.Do(func() {
		// Set once, before the tuner's first cycle reads them: the tuner
		// reads its bounds without synchronization.
		gctuner.SetMinGCPercent(100)
		gctuner.SetMaxGCPercent(gcMaxPercent)
	})
	gctuner.Tuning(t)
}

var gcBounds sync.Once

// gcTarget is the tuner's threshold in bytes, 0 when nothing is to be
// tuned.
func gcTarget(mib int, gogc string) uint64 {
	if mib <= 0 || gogc != "" {
		return 0
	}
	return uint64(mib) << 20
}
