// Package gcgoal keeps the garbage collector's heap goal near a target
// while the live heap is small, so a busy process with a few MiB of live
// data does not collect dozens of times a second.
package gcgoal

import (
	"log/slog"
	"os"
	"sync"

	"github.com/bytedance/gopkg/util/gctuner"
)

// DefaultHeapMiB is the target a gateway runs with unless told otherwise.
const DefaultHeapMiB = 64

// MaxPercent bounds how far Set stretches the collector: at most a heap
// goal six times the live heap.
const MaxPercent = 500

// Set makes the garbage collector run less often while the heap is small.
// A gateway's live heap is a few MiB, so with Go's default (GOGC 100) a
// busy one collects dozens of times a second, and each cycle's fixed cost
// (stacks, globals, the phases' hand-offs) is paid again and again. With
// a target of heapMiB the GC percent is raised after every cycle so that
// the next heap goal is about the target, at most MaxPercent and never
// below 100: once the live heap reaches half the target the collector
// behaves as Go's default does. heapMiB 0 turns it off. An operator's GOGC
// wins: then nothing is tuned.
func Set(heapMiB int, log *slog.Logger) {
	gogc := os.Getenv("GOGC")
	t := target(heapMiB, gogc)
	if t == 0 {
		if heapMiB > 0 {
			log.Info("GOGC is set; --gc-heap-mib ignored", "gogc", gogc)
		}
		return
	}
	// gctuner keeps one tuner in a global of its own, unguarded: two
	// gateways of one process (tests) starting at once would race on it.
	mu.Lock()
	defer mu.Unlock()
	bounds.Do(func() {
		// Set once, before the tuner's first cycle reads them: the tuner
		// reads its bounds without synchronization.
		gctuner.SetMinGCPercent(100)
		gctuner.SetMaxGCPercent(MaxPercent)
	})
	gctuner.Tuning(t)
}

var (
	bounds sync.Once
	mu     sync.Mutex // serializes the calls into gctuner
)

// target is the tuner's threshold in bytes, 0 when nothing is to be
// tuned.
func target(mib int, gogc string) uint64 {
	if mib <= 0 || gogc != "" {
		return 0
	}
	return uint64(mib) << 20
}
