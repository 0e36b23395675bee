package toolservice

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/toolgate/toolgate/internal/transport"
)

// The requests taken and waiting for a slot. The subscription's goroutine
// takes each request at once — a request that asks for a receipt starts
// its receipt's clock then (takeReceipted) — and leaves it here; one
// goroutine starts them in order as slots free up. So a request waiting
// behind MaxConcurrency running calls is spoken for within
// wire.ReceiptAfter, like one that runs, and a caller does not take its
// silence for a frozen instance's and publish it again (a burst would
// otherwise be hedged whole, its copies deepening the queue they wait
// in). The queue holds RequestQueue requests; a full one holds the
// subscription's goroutine up, and the client's own queue behind it.

// waiting is a request taken, and its receipt (nil: none asked).
type waiting struct {
	m  transport.Message
	rw *receiptWait
}

// requestQueue is the queue of requests taken.
type requestQueue struct {
	ch     chan waiting
	quit   chan struct{} // closed when Run has stopped: nothing starts
	queued atomic.Int64  // requests taken and not yet started (or dropped)
	moved  chan struct{} // a request left the queue (a wake-up for drained)
	once   sync.Once
}

func (q *requestQueue) init(size int) {
	q.ch = make(chan waiting, max(size, 1))
	q.quit = make(chan struct{})
	q.moved = make(chan struct{}, 1)
}

// done notes that a request left the queue.
func (q *requestQueue) done() {
	q.queued.Add(-1)
	select {
	case q.moved <- struct{}{}:
	default:
	}
}

// drained waits until every request taken has started, or ctx ends.
func (q *requestQueue) drained(ctx context.Context) {
	for q.queued.Load() > 0 {
		select {
		case <-q.moved:
		case <-ctx.Done():
			return
		}
	}
}

// enqueue leaves request m (its receipt rw) for a slot. After the stop it
// is not run.
func (s *Service) enqueue(m transport.Message, rw *receiptWait) {
	q := &s.queue
	q.queued.Add(1)
	select {
	case q.ch <- waiting{m, rw}:
	case <-q.quit:
		q.done()
		if rw != nil {
			s.endReceipted(rw)
		}
	}
}

// dispatch starts the requests taken, in order, as slots free up, until
// the queue is closed; what is left then is not run.
func (s *Service) dispatch() {
	q := &s.queue
	for {
		select {
		case w := <-q.ch:
			s.start(w.m, w.rw)
			q.done()
		case <-q.quit:
			for {
				select {
				case w := <-q.ch:
					if w.rw != nil {
						s.endReceipted(w.rw)
					}
					q.done()
				default:
					return
				}
			}
		}
	}
}

// closeQueue ends dispatch; the requests still waiting are not run.
func (s *Service) closeQueue() { s.queue.once.Do(func() { close(s.queue.quit) }) }
