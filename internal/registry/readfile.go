package registry

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// DefaultMaxFileBytes bounds the size of a registry file (64 MiB: a
// 100,000-tool file takes about 30 MB).
const DefaultMaxFileBytes int64 = 64 << 20

// ErrNotRegularFile says the registry path names something other than a
// regular file (after symbolic links are followed), such as a device or a
// named pipe, which could be read forever or block the reader.
var ErrNotRegularFile = errors.New("not a regular file")

// ErrFileTooLarge says the registry file is larger than the limit.
var ErrFileTooLarge = errors.New("file too large")

// readRegular reads path, which must be a regular file (symbolic links are
// followed) of at most limit bytes. It never blocks on a named pipe and
// never reads more than limit+1 bytes, whatever the path names.
func readRegular(path string, limit int64) ([]byte, error) {
	// O_NONBLOCK: opening a named pipe without a writer returns at once
	// instead of waiting for one; on a regular file it changes nothing.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %w (it is a %s)", path, ErrNotRegularFile, fileKind(fi.Mode()))
	}
	if fi.Size() > limit {
		return nil, fmt.Errorf("%s: %w: %d bytes, the limit is %d", path, ErrFileTooLarge, fi.Size(), limit)
	}
	// The file may grow between Stat and the read: never take more than
	// the limit.
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: %w: more than %d bytes", path, ErrFileTooLarge, limit)
	}
	return data, nil
}

func fileKind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&os.ModeNamedPipe != 0:
		return "named pipe"
	case m&os.ModeSocket != 0:
		return "socket"
	case m&os.ModeCharDevice != 0:
		return "character device"
	case m&os.ModeDevice != 0:
		return "device"
	default:
		return "file of mode " + m.String()
	}
}
