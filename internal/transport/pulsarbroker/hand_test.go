package pulsarbroker

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/toolgate/toolgate/internal/eventually"
)

// stalledProducer takes messages and never has the broker's receipt: its
// flush lasts as long as the context it is given (a broker that took the
// connection and answers nothing, or a topic without an owner).
type stalledProducer struct {
	pulsar.Producer
	flushes atomic.Int64
}

func (p *stalledProducer) SendAsync(context.Context, *pulsar.ProducerMessage, func(pulsar.MessageID, *pulsar.ProducerMessage, error)) {
}

func (p *stalledProducer) FlushWithCtx(ctx context.Context) error {
	p.flushes.Add(1)
	<-ctx.Done()
	return ctx.Err()
}

// quickProducer has the broker's receipt at once.
type quickProducer struct{ stalledProducer }

func (p *quickProducer) FlushWithCtx(context.Context) error {
	p.flushes.Add(1)
	return nil
}

func testEntry(p pulsar.Producer, timeout time.Duration) (*producerEntry, *Pulsar) {
	b := &Pulsar{}
	b.reach.Store(newReachSignal())
	return &producerEntry{p: p, timeout: timeout, reach: &b.reach}, b
}

func message() *outgoing {
	return &outgoing{ctx: context.Background(), done: func(error) {}}
}

// handReturns runs hand on its own goroutine and waits for it to return:
// a wait without its bound would hang there.
func handReturns(t *testing.T, e *producerEntry, ctx context.Context, deadline time.Time, what string) {
	t.Helper()
	var returned atomic.Bool
	go func() {
		e.handing.Lock()
		e.hand(ctx, deadline, message())
		e.handing.Unlock()
		returned.Store(true)
	}()
	eventually.True(t, 10*time.Second, what, returned.Load)
}

// A wait for the broker's receipt ends at its bound, at the message's
// deadline, with an inline publisher's context, and once the broker is
// known away — each with one wait made for many batches, not one per batch.
func TestHandWaitsWithinBounds(t *testing.T) {
	t.Parallel()
	t.Run("timeout", func(t *testing.T) {
		e, _ := testEntry(&stalledProducer{}, 20*time.Millisecond)
		handReturns(t, e, context.Background(), time.Time{}, "a hand past the receipt timeout")
		handReturns(t, e, context.Background(), time.Time{}, "the next hand, under a new wait")
	})
	t.Run("deadline", func(t *testing.T) {
		e, _ := testEntry(&stalledProducer{}, time.Hour)
		handReturns(t, e, context.Background(), time.Now().Add(20*time.Millisecond), "a hand past the message's deadline")
	})
	t.Run("caller", func(t *testing.T) {
		e, _ := testEntry(&stalledProducer{}, time.Hour)
		ctx, cancel := context.WithCancel(context.Background())
		p := e.p.(*stalledProducer)
		go func() {
			eventually.Holds(10*time.Second, func() bool { return p.flushes.Load() == 1 })
			cancel()
		}()
		handReturns(t, e, ctx, time.Time{}, "a hand whose inline publisher's context ended")
	})
	t.Run("reach", func(t *testing.T) {
		e, b := testEntry(&stalledProducer{}, time.Hour)
		p := e.p.(*stalledProducer)
		go func() {
			eventually.Holds(10*time.Second, func() bool { return p.flushes.Load() == 1 })
			b.SetReachable(false)
		}()
		handReturns(t, e, context.Background(), time.Time{}, "a hand when the broker was found away")
		// While it is away nobody waits; once back, the wait is bounded again.
		handReturns(t, e, context.Background(), time.Time{}, "a hand while the broker is away")
		b.SetReachable(true)
		if w := e.flushWait(); w.ctx.Err() != nil || w.reach != b.reach.Load() {
			t.Fatal("the wait after the broker came back is not under its new reach")
		}
	})
	t.Run("reused", func(t *testing.T) {
		e, _ := testEntry(&quickProducer{}, time.Hour)
		handReturns(t, e, context.Background(), time.Time{}, "a hand with its receipt")
		first := e.wait
		handReturns(t, e, context.Background(), time.Now().Add(time.Hour), "another")
		if first == nil || e.wait != first || first.ctx.Err() != nil {
			t.Fatalf("a wait that ended with its receipt was not kept for the next batch: %p, then %p", first, e.wait)
		}
		e.handing.Lock()
		e.wait.timer.Stop()
		e.wait.cancel()
		e.handing.Unlock()
	})
}
