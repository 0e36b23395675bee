package registry

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
)

// FileSource keeps a Registry in step with a descriptor file. A reload that
// fails changes nothing: the last good snapshot keeps serving, and the
// failure is logged, counted and kept for readiness details.
type FileSource struct {
	path     string
	reg      *Registry
	log      *slog.Logger
	onSwap   func(*Snapshot)
	failures atomic.Int64
	lastErr  atomic.Pointer[string]
}

// NewFileSource loads path once; a file with problems is an error here.
func NewFileSource(path string, log *slog.Logger, onSwap func(*Snapshot)) (*FileSource, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	snap, err := LoadFile(path, log)
	if err != nil {
		return nil, err
	}
	return &FileSource{path: path, reg: New(snap), log: log, onSwap: onSwap}, nil
}

// Registry is the registry this source keeps current.
func (f *FileSource) Registry() *Registry { return f.reg }

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

// Reload reads the file again and swaps in the new snapshot if it is valid.
func (f *FileSource) Reload() error {
	snap, err := LoadFile(f.path, f.log)
	if err != nil {
		f.failures.Add(1)
		msg := err.Error()
		f.lastErr.Store(&msg)
		f.log.Error("registry reload failed; still serving the last good registry",
			"file", f.path, "version", f.reg.Snapshot().Version, "err", err)
		return err
	}
	f.reg.Swap(snap)
	f.lastErr.Store(nil)
	f.log.Info("registry reloaded", "file", f.path, "version", snap.Version,
		"tools", len(snap.Tools()), "tool_services", len(snap.Services()))
	if f.onSwap != nil {
		f.onSwap(snap)
	}
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
