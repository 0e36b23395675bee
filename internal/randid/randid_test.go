package randid

import (
	"sync"
	"testing"
)

// Identifiers are 32 hex digits and never repeat, across blocks and
// goroutines.
func TestNewUnique(t *testing.T) {
	const workers, each = 8, 1000 // several blocks of 256
	var mu sync.Mutex
	seen := make(map[string]bool, workers*each)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				id := New()
				mu.Lock()
				if seen[id] {
					t.Errorf("%s given out twice", id)
				}
				seen[id] = true
				mu.Unlock()
				if len(id) != 2*Size {
					t.Errorf("%q: %d characters, want %d", id, len(id), 2*Size)
				}
				for _, c := range id {
					if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
						t.Errorf("%q: not lower-case hex", id)
						break
					}
				}
			}
		})
	}
	wg.Wait()
}

func BenchmarkNew(b *testing.B) {
	for b.Loop() {
		_ = New()
	}
}
