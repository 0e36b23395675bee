package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
)

// FileSource keeps a Sink (the gateway's Merger) in step with a
// descriptor file. A reload that fails changes nothing: the last good
// descriptors keep serving, and the failure is logged, counted and kept
// for readiness details.
type FileSource struct {
	path     string
	sink     Sink
	log      *slog.Logger
	maxBytes int64
	// reloading serializes reloads (the watcher's and SIGHUP's): the
	// second then finds the document unchanged instead of parsing it too.
	reloading sync.Mutex
	failures  atomic.Int64
	lastErr   atomic.Pointer[string]
}

// FileOption tunes a FileSource.
type FileOption func(*FileSource)

// WithMaxFileBytes bounds the file's size (default DefaultMaxFileBytes); a
// larger file is refused like an invalid one.
func WithMaxFileBytes(n int64) FileOption {
	return func(f *FileSource) {
		if n > 0 {
			f.maxBytes = n
		}
	}
}

// NewFileSource loads path into sink once; a file with problems is an
// error here. The path must name a regular file (symbolic links are
// followed) no larger than the limit: a device, a named pipe or a huge file
// is refused without being read.
func NewFileSource(path string, log *slog.Logger, sink Sink, opts ...FileOption) (*FileSource, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f := &FileSource{path: path, sink: sink, log: log, maxBytes: DefaultMaxFileBytes}
	for _, o := range opts {
		o(f)
	}
	data, err := readRegular(path, f.maxBytes)
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	// The sink parses and validates it (once: a large file takes a while).
	if err := sink.Apply(Update{Origin: OriginFile, Name: path, Doc: data}); err != nil {
		return nil, err
	}
	sink.State(OriginFile, true, nil)
	return f, nil
}

// Origin implements Source.
func (f *FileSource) Origin() Origin { return OriginFile }

// Run implements Source: it watches the file until ctx ends.
func (f *FileSource) Run(ctx context.Context, _ Sink) error {
	return f.Watch(ctx, 100*time.Millisecond)
}

// Failures counts reloads that failed; LastError is the most recent one's
// message ("" after a successful reload).
func (f *FileSource) Failures() int64 { return f.failures.Load() }

// LastError is the message of the last failed reload, "" when the last
// reload succeeded.
func (f *FileSource) LastError() string {
	if p := f.lastErr.Load(); p != nil {
		return *p
	}
	return ""
}

// Reload reads the file again and hands it to the sink, which swaps in a
// new snapshot if it is valid.
func (f *FileSource) Reload() error {
	f.reloading.Lock()
	defer f.reloading.Unlock()
	data, err := readRegular(f.path, f.maxBytes)
	if err == nil {
		// The sink's error holds the file's problems as a *LoadError.
		err = f.sink.Apply(Update{Origin: OriginFile, Name: f.path, Doc: data})
	} else {
		err = fmt.Errorf("registry: %w", err)
	}
	if err != nil {
		f.failures.Add(1)
		msg := err.Error()
		f.lastErr.Store(&msg)
		f.log.Error("registry reload failed; still serving the last good registry", "file", f.path, "err", err)
		return err
	}
	f.lastErr.Store(nil)
	f.log.Info("registry file reloaded", "file", f.path)
	return nil
}

// Watch reloads when the file changes (written in place, replaced by a
// rename, or re-created) until ctx ends. Bursts of events within debounce
// cause one reload.
func (f *FileSource) Watch(ctx context.Context, debounce time.Duration) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer w.Close()
	// Watch the directory: editors and config managers replace files.
	dir, base := filepath.Dir(f.path), filepath.Base(f.path)
	if err := w.Add(dir); err != nil {
		return err
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("registry watcher closed")
			}
			if filepath.Base(ev.Name) == base && ev.Op&(fsnotify.Write|fsnotify.Create|fsnotify.Rename|fsnotify.Remove) != 0 {
				timer.Reset(debounce)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return errors.New("registry watcher closed")
			}
			f.log.Warn("registry watcher", "err", err)
		case <-timer.C:
			_ = f.Reload()
		}
	}
}
