package registry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/eventually"
)

const goodDoc = "tool-service:\n  s: {topic: s}\ntool:\n  t: {type: tool-service, service: s}\n"

// TestFileSourceRefusesWhatIsNotARegularFile: a device, a named pipe, a
// directory or a file over the limit in the registry file's place is
// refused with an error saying why, without reading it; the last good
// registry keeps serving.
func TestFileSourceRefusesWhatIsNotARegularFile(t *testing.T) {
	cases := []struct {
		name string
		make func(t *testing.T, path string)
		want error
	}{
		{"symlink to /dev/zero", func(t *testing.T, path string) {
			if _, err := os.Stat("/dev/zero"); err != nil {
				t.Skip("no /dev/zero")
			}
			must(t, os.Symlink("/dev/zero", path))
		}, ErrNotRegularFile},
		{"named pipe", func(t *testing.T, path string) {
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Skipf("mkfifo: %v", err)
			}
		}, ErrNotRegularFile},
		{"directory", func(t *testing.T, path string) { must(t, os.Mkdir(path, 0o700)) }, ErrNotRegularFile},
		{"1 GB file", func(t *testing.T, path string) {
			f, err := os.Create(path)
			must(t, err)
			must(t, f.Truncate(1<<30)) // sparse: takes no disk
			must(t, f.Close())
		}, ErrFileTooLarge},
		{"over the limit by one byte", func(t *testing.T, path string) {
			must(t, os.WriteFile(path, []byte(goodDoc+strings.Repeat("#", 1024-len(goodDoc)+1)), 0o600))
		}, ErrFileTooLarge},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "registry.yaml")

			// Refused at start.
			c.make(t, path)
			m := NewMerger(nil, nil)
			if _, err := NewFileSource(path, nil, m, WithMaxFileBytes(1024)); !errors.Is(err, c.want) {
				t.Fatalf("NewFileSource: %v, want %v", err, c.want)
			}

			// Refused on reload, the last good registry kept, memory bounded.
			must(t, os.RemoveAll(path))
			must(t, os.WriteFile(path, []byte(goodDoc), 0o600))
			m = NewMerger(nil, nil)
			f, err := NewFileSource(path, nil, m, WithMaxFileBytes(1024))
			must(t, err)
			must(t, os.Remove(path))
			c.make(t, path)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			err = f.Reload()
			runtime.ReadMemStats(&after)
			if !errors.Is(err, c.want) {
				t.Fatalf("Reload: %v, want %v", err, c.want)
			}
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
				t.Errorf("the refused reload allocated %d bytes", grew)
			}
			if _, ok := m.Registry().Snapshot().Tool("t"); !ok || f.Failures() != 1 || !strings.Contains(f.LastError(), c.want.Error()) {
				t.Fatalf("tool kept %v, failures %d, last error %q", ok, f.Failures(), f.LastError())
			}
		})
	}
}

// TestWatchNotStuckOnANamedPipe: a named pipe in the file's place does not
// block the watcher: it goes on reloading and ends with its context.
func TestWatchNotStuckOnANamedPipe(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "registry.yaml")
	must(t, os.WriteFile(path, []byte(goodDoc), 0o600))
	m := NewMerger(nil, nil)
	f, err := NewFileSource(path, nil, m)
	must(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- f.Watch(ctx, 10*time.Millisecond) }()
	// The watcher is live once a write reaches the registry (it sees only
	// what happens after it started watching).
	writes := 0
	eventually.True(t, 10*time.Second, "the watcher reloads a written file", func() bool {
		for i := 1; i <= writes; i++ {
			if _, ok := m.Registry().Snapshot().Tool(fmt.Sprintf("w%d", i)); ok {
				return true
			}
		}
		writes++
		must(t, os.WriteFile(path, []byte(strings.ReplaceAll(goodDoc, "t:", fmt.Sprintf("w%d:", writes))), 0o600))
		return false
	})
	must(t, os.Remove(path))
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	eventually.True(t, 10*time.Second, "the failed read counted", func() bool { return f.Failures() >= 1 })
	// A good file again is picked up: the watcher still runs.
	must(t, os.Remove(path))
	must(t, os.WriteFile(path, []byte(strings.ReplaceAll(goodDoc, "t:", "t2:")), 0o600))
	eventually.True(t, 10*time.Second, "tool t2 served", func() bool { _, ok := m.Registry().Snapshot().Tool("t2"); return ok })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Watch did not return after its context ended")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
