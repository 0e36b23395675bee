package toolservice

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/wire"
)

// heldPublisher keeps every publish until the test confirms it, like a
// broker whose receipts have not come back yet.
type heldPublisher struct {
	mu       sync.Mutex
	sent     []string
	pending  []func(error)
	full     int // refuse this many publishes with ErrQueueFull first
	refusals int
	onRefuse func()
}

func (h *heldPublisher) PublishAsync(_ context.Context, _ string, m transport.Message, done func(error)) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.refusals < h.full {
		h.refusals++
		if h.onRefuse != nil {
			h.onRefuse()
		}
		return transport.ErrQueueFull
	}
	r, err := wire.DecodeResponse(m.Payload)
	if err != nil {
		return err
	}
	h.sent = append(h.sent, r.Response)
	h.pending = append(h.pending, done)
	return nil
}

// confirm answers the oldest n publishes with err.
func (h *heldPublisher) confirm(n int, err error) {
	h.mu.Lock()
	var ds []func(error)
	n = min(n, len(h.pending))
	ds, h.pending = h.pending[:n], h.pending[n:]
	h.mu.Unlock()
	for _, d := range ds {
		d(err)
	}
}

// Chunks go out in order without waiting for receipts, up to the window;
// the next send waits for a receipt.
func TestChunkSenderWindow(t *testing.T) {
	h := &heldPublisher{}
	c := newChunkSender(h, "resp", "id-1", "", 0)
	for i := range chunkWindow {
		if err := c.send(t.Context(), fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	blocked := make(chan error, 1)
	go func() { blocked <- c.send(t.Context(), "next") }()
	select {
	case err := <-blocked:
		t.Fatalf("send beyond the window returned (%v) before any receipt", err)
	case <-time.After(50 * time.Millisecond):
	}
	h.confirm(1, nil)
	if err := <-blocked; err != nil {
		t.Fatal(err)
	}
	h.confirm(chunkWindow, nil)
	if err := c.wait(t.Context()); err != nil {
		t.Fatalf("wait: %v", err)
	}
	if len(h.sent) != chunkWindow+1 || h.sent[0] != "0" || h.sent[chunkWindow-1] != fmt.Sprint(chunkWindow-1) || h.sent[chunkWindow] != "next" {
		t.Fatalf("sent %v: out of order or incomplete", h.sent)
	}
}

// A chunk that fails after send returned fails the stream: later sends and
// wait report it.
func TestChunkSenderLateFailure(t *testing.T) {
	h := &heldPublisher{}
	c := newChunkSender(h, "resp", "id-2", "", 0)
	for i := range 3 {
		if err := c.send(t.Context(), fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	lost := errors.New("connection reset")
	h.confirm(1, nil)
	h.confirm(1, lost)
	if err := c.send(t.Context(), "after"); !errors.Is(err, lost) {
		t.Fatalf("send after a lost chunk = %v, want the loss", err)
	}
	h.confirm(10, nil)
	if err := c.wait(t.Context()); !errors.Is(err, lost) {
		t.Fatalf("wait = %v, want the loss", err)
	}
}

// A full producer queue: the sender lets its own chunks drain and tries
// again — also when its chunk outstanding was confirmed while the queue
// refused the next one; with nothing of its own outstanding it gives up
// at once.
func TestChunkSenderQueueFull(t *testing.T) {
	for _, tc := range []struct {
		name     string
		onRefuse func(h *heldPublisher) // runs with h.mu held
	}{
		{"drained after the refusal", func(h *heldPublisher) { go h.confirm(1, nil) }},
		{"drained during the refusal", func(h *heldPublisher) {
			d := h.pending[0]
			h.pending = h.pending[1:]
			d(nil)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &heldPublisher{}
			c := newChunkSender(h, "resp", "id-3", "", 0)
			if err := c.send(t.Context(), "a"); err != nil {
				t.Fatal(err)
			}
			h.mu.Lock()
			h.full, h.refusals = 1, 0
			h.onRefuse = func() { tc.onRefuse(h) } // "a" confirmed
			h.mu.Unlock()
			if err := c.send(t.Context(), "b"); err != nil {
				t.Fatalf("send after the queue drained: %v", err)
			}
			h.confirm(1, nil)
			if err := c.wait(t.Context()); err != nil {
				t.Fatal(err)
			}
			if len(h.sent) != 2 || h.sent[1] != "b" {
				t.Fatalf("sent %v", h.sent)
			}
		})
	}

	h2 := &heldPublisher{full: 5}
	c2 := newChunkSender(h2, "resp", "id-4", "", 0)
	if err := c2.send(t.Context(), "x"); !errors.Is(err, transport.ErrQueueFull) {
		t.Fatalf("send with nothing of its own to drain = %v, want ErrQueueFull", err)
	}
	if err := c2.wait(t.Context()); !errors.Is(err, transport.ErrQueueFull) {
		t.Fatalf("wait = %v, want ErrQueueFull", err)
	}
}

// A caller whose context ends while the window is full stops waiting.
func TestChunkSenderContext(t *testing.T) {
	h := &heldPublisher{}
	c := newChunkSender(h, "resp", "id-5", "", 0)
	for range chunkWindow {
		_ = c.send(t.Context(), "x")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if err := c.send(ctx, "y"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("send = %v, want the context's error", err)
	}
	if err := c.wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait = %v, want the context's error", err)
	}
	h.confirm(chunkWindow, nil)
	if err := c.wait(t.Context()); err != nil {
		t.Fatalf("wait after the receipts: %v", err)
	}
}
