package ratelog

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/eventually"
)

// lockedBuffer is a log's output, read while records are written.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Split(strings.TrimSpace(l.b.String()), "\n")
}

func TestOneLinePerIntervalThenTheCount(t *testing.T) {
	var out lockedBuffer
	h := NewHandler(slog.NewTextHandler(&out, nil), 200*time.Millisecond)
	log := slog.New(h).With("listener", "grpc")
	for i := range 10_000 {
		log.Info("call refused", "n", i)
	}
	log.Info("another kind")
	lines := out.lines()
	if len(lines) != 2 || !strings.Contains(lines[0], "n=0") || !strings.Contains(lines[1], "another kind") {
		t.Fatalf("before the interval ends, want the first of each kind only; got %q", lines)
	}
	eventually.True(t, 5*time.Second, "the count of the suppressed lines", func() bool { return len(out.lines()) == 3 })
	last := out.lines()[2]
	for _, want := range []string{"call refused", "n=9999", "suppressed=9999", "listener=grpc"} {
		if !strings.Contains(last, want) {
			t.Errorf("count line %q lacks %q", last, want)
		}
	}
	// A new interval: the next record is written (after the count's).
	eventually.True(t, 5*time.Second, "a record of a new interval written", func() bool {
		log.Info("call refused", "n", -1)
		return strings.Contains(strings.Join(out.lines(), "\n"), "n=-1")
	})
}

func TestLevelsAndKindsBounded(t *testing.T) {
	var out lockedBuffer
	h := NewHandler(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelWarn}), time.Hour)
	if h.Enabled(context.Background(), slog.LevelInfo) {
		t.Fatal("info is below the next handler's level, and must stay so")
	}
	log := slog.New(h)
	for i := range 3 * maxKinds {
		log.Warn(strings.Repeat("x", i%50) + string(rune('a'+i%26)))
	}
	h.state.mu.Lock()
	n := len(h.state.kinds)
	h.state.mu.Unlock()
	if n > maxKinds {
		t.Fatalf("%d kinds kept, want at most %d", n, maxKinds)
	}
}

func TestByShape(t *testing.T) {
	var out lockedBuffer
	log := slog.NewLogLogger(NewHandlerByShape(slog.NewTextHandler(&out, nil), time.Hour), slog.LevelWarn)
	for i := range 1000 {
		log.Printf("http: TLS handshake error from 127.0.0.1:%d: EOF", 1000+i)
	}
	log.Printf("http: something else")
	if lines := out.lines(); len(lines) != 2 || !strings.Contains(lines[0], "1000: EOF") {
		t.Fatalf("want the first of each shape; got %q", lines)
	}
}
