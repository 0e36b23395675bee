//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package audit

import (
	"errors"
	"os"
	"syscall"
)

// lock takes f's advisory lock for the life of f, so that two gateways
// never write one file (two writers would interleave two chains).
func lock(f *os.File) error {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return errors.New("another process is writing it (each gateway needs a file of its own)")
	}
	return err
}
