package toolservice

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/wire"
)

// Receipts (wire.PropReceipt): a caller that asks for one learns within
// wire.ReceiptAfter, plus the way back, that an instance has its call — by
// the call's first reply, or else by a receipt. A call it hears nothing of
// it may publish once more with the same id: the request may have been
// dropped on its way to an instance whose consumer was closing (on a
// non-persistent topic nothing sends it again). An instance that has the
// call already does not run it twice: it sends a receipt at once, or its
// kept last reply when the call has ended here.

// receiptWait is a call taken here that asked for a receipt.
type receiptWait struct {
	id    string
	topic string      // where its replies, and the receipt, go
	done  atomic.Bool // a reply or the receipt went out
	timer *time.Timer // sends the receipt
	fired chan struct{}
}

// replied notes that the call sent a reply: no receipt is needed. It does
// nothing on a nil receiptWait (a call that asked for none).
func (rw *receiptWait) replied() {
	if rw != nil && !rw.done.Load() {
		rw.done.Store(true)
	}
}

// takeReceipted notes request m, which asks for a receipt, and starts the
// receipt's clock. It reports true when the call is not new here (the
// caller published it again): then a receipt, or the call's kept reply,
// has been sent instead, and m is not to be served.
func (s *Service) takeReceipted(m transport.Message) (*receiptWait, bool) {
	id := m.Properties[wire.PropID]
	if id == "" || id == "unknown" {
		return nil, false
	}
	rw := &receiptWait{id: id, topic: s.replyTopicOf(m, false), fired: make(chan struct{})}
	if _, running := s.receipts.LoadOrStore(id, rw); running {
		s.repeated.Add(1)
		s.log.Debug("request published again for a call that runs here; sending a receipt", "id", id)
		// Off the subscription's goroutine: a slow publish holds up no
		// other request.
		go s.sendReceipt(context.WithoutCancel(s.callCtx), rw)
		return nil, true
	}
	if s.resend(id) { // it ended here already: its reply again
		s.receipts.Delete(id)
		s.repeated.Add(1)
		s.log.Debug("request published again for a call answered here; sending its reply again", "id", id)
		return nil, true
	}
	rw.timer = time.AfterFunc(wire.ReceiptAfter, func() {
		defer close(rw.fired)
		if !rw.done.Load() {
			s.sendReceipt(s.callCtx, rw)
		}
	})
	return rw, false
}

// endReceipted forgets a call that asked for a receipt, once it has ended
// (its last reply is kept in recent by then), after any receipt being
// sent is out.
func (s *Service) endReceipted(rw *receiptWait) {
	rw.done.Store(true)
	if !rw.timer.Stop() {
		<-rw.fired
	}
	s.receipts.CompareAndDelete(rw.id, rw)
}

// sendReceipt publishes the receipt of call rw to where its replies go,
// bounded by 10 s.
func (s *Service) sendReceipt(ctx context.Context, rw *receiptWait) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	msg := transport.Message{Key: rw.id, Properties: map[string]string{
		wire.PropID: rw.id, wire.PropReceipt: "1", wire.PropInstance: s.instance}}
	if err := s.broker.Publish(ctx, rw.topic, msg); err != nil {
		s.log.Warn("cannot send a receipt", "id", rw.id, "topic", rw.topic, "err", err)
	}
}
