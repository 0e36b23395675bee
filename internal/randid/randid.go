// Package randid makes the random identifiers every call needs (its
// request id, its correlation id) from crypto/rand, read a block at a time:
// one read of the system's generator serves 256 identifiers instead of
// one, where that read was a measurable share of a call's CPU.
package randid

import (
	"crypto/rand"
	"encoding/hex"
	"sync"
)

// Size is the bytes of randomness in an identifier (128 bits).
const Size = 16

const block = 256 * Size

var (
	mu   sync.Mutex
	buf  [block]byte
	next = block // all used: the first New reads a block
)

// New returns a fresh identifier: 128 random bits as 32 lower-case hex
// digits.
func New() string {
	var b [Size]byte
	mu.Lock()
	if next == block {
		if _, err := rand.Read(buf[:]); err != nil {
			mu.Unlock()
			panic("randid: crypto/rand failed: " + err.Error()) // crypto/rand does not fail (Go 1.24+)
		}
		next = 0
	}
	copy(b[:], buf[next:next+Size])
	clear(buf[next : next+Size]) // an identifier's bits are not kept once given out
	next += Size
	mu.Unlock()
	var h [2 * Size]byte
	hex.Encode(h[:], b[:])
	return string(h[:])
}
