package toolservice

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/wire"
)

// chunkWindow bounds the chunks of one reply published but not yet
// confirmed by the broker: a fast handler streams without waiting a round
// trip per chunk, and cannot flood the producer's queue.
const chunkWindow = 64

// asyncPublisher is the part of transport.Broker the chunk sender uses.
type asyncPublisher interface {
	PublishAsync(ctx context.Context, topic string, msg transport.Message, done func(error)) error
}

// ErrCallerGone is what Send returns once the caller has given the call up
// (the gateway said so on the flow topic): nobody reads the chunks.
var ErrCallerGone = errors.New("toolservice: the caller has given the call up")

// chunkSender publishes one call's stream chunks in order, up to
// chunkWindow of them unconfirmed at a time and, when the caller does flow
// control (wire.PropCredit), none past the credit it granted.
type chunkSender struct {
	pub   asyncPublisher
	topic string
	id    string
	slots chan struct{} // one token per unconfirmed chunk
	flow  string        // the flow topic named on each chunk; "" without flow control
	// instance, when set, is named on each chunk (wire.PropInstance).
	instance string

	seq int // of the next reply message (send is not called concurrently)

	mu     sync.Mutex
	err    error         // the first failure; every later send returns it
	limit  int           // messages numbered below it may be sent; <0: no limit
	credit chan struct{} // signalled when the limit rises or the caller is gone
}

// newChunkSender returns a sender for one call's chunks; with a flow topic
// it waits for credit beyond limit, else it sends without limit.
func newChunkSender(pub asyncPublisher, topic, id, flow string, limit int) *chunkSender {
	if flow == "" {
		limit = -1
	}
	return &chunkSender{pub: pub, topic: topic, id: id, flow: flow, limit: limit,
		slots: make(chan struct{}, chunkWindow), credit: make(chan struct{}, 1)}
}

// grant raises the credit to limit (grants are cumulative: a smaller one
// arrived late and changes nothing).
func (c *chunkSender) grant(limit int) {
	c.mu.Lock()
	raised := c.limit >= 0 && limit > c.limit
	if raised {
		c.limit = limit
	}
	c.mu.Unlock()
	if raised {
		c.signal()
	}
}

// cancel ends the stream: the caller is gone.
func (c *chunkSender) cancel() {
	c.fail(ErrCallerGone)
	c.signal()
}

func (c *chunkSender) signal() {
	select {
	case c.credit <- struct{}{}:
	default:
	}
}

// waitCredit returns once the next message may be sent.
func (c *chunkSender) waitCredit(ctx context.Context) error {
	for {
		c.mu.Lock()
		err, ok := c.err, c.limit < 0 || c.seq < c.limit
		c.mu.Unlock()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-c.credit:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (c *chunkSender) failed() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *chunkSender) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.mu.Unlock()
}

// send publishes one chunk. It waits only when chunkWindow chunks are
// unconfirmed, or ctx ends.
func (c *chunkSender) send(ctx context.Context, text string) error {
	if err := c.waitCredit(ctx); err != nil {
		return err
	}
	b := wire.EncodeResponse(wire.Response{Response: text})
	select {
	case c.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	props := map[string]string{wire.PropID: c.id, wire.PropSeq: strconv.Itoa(c.seq)}
	if c.flow != "" {
		props[wire.PropFlow] = c.flow
	}
	if c.instance != "" {
		props[wire.PropInstance] = c.instance
	}
	msg := transport.Message{Key: c.id, Payload: b, Properties: props}
	c.mu.Lock()
	c.seq++
	c.mu.Unlock()
	var err error
	for {
		// Whether chunks of its own were unconfirmed when this one was
		// offered: read before the publish, since one confirmed while
		// the queue refused this chunk has drained it too.
		own := len(c.slots) > 1
		err = c.pub.PublishAsync(context.WithoutCancel(ctx), c.topic, msg, func(err error) {
			if err != nil {
				c.fail(fmt.Errorf("publish reply chunk: %w", err))
			}
			<-c.slots
		})
		if !errors.Is(err, transport.ErrQueueFull) || !own {
			break
		}
		// The producer is saturated by other calls too: let this reply's
		// own chunks drain, then try again.
		if werr := c.drain(ctx, 1); werr != nil {
			<-c.slots
			return werr
		}
	}
	if err != nil {
		<-c.slots // the callback will not run
		c.fail(err)
		return err
	}
	return nil
}

// drain waits until at most keep chunks are unconfirmed.
func (c *chunkSender) drain(ctx context.Context, keep int) error {
	for i := keep; i < chunkWindow; i++ {
		select {
		case c.slots <- struct{}{}:
		case <-ctx.Done():
			for ; i > keep; i-- {
				<-c.slots
			}
			return ctx.Err()
		}
	}
	for i := keep; i < chunkWindow; i++ {
		<-c.slots
	}
	return nil
}

// wait returns once every chunk sent is confirmed or failed, with the
// first failure.
func (c *chunkSender) wait(ctx context.Context) error {
	if err := c.drain(ctx, 0); err != nil {
		return err
	}
	return c.failed()
}
