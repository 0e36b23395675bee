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

// chunkSender publishes one call's stream chunks in order, up to
// chunkWindow of them unconfirmed at a time.
type chunkSender struct {
	pub   asyncPublisher
	topic string
	id    string
	slots chan struct{} // one token per unconfirmed chunk

	seq int // of the next reply message (send is not called concurrently)

	mu  sync.Mutex
	err error // the first failure; every later send returns it
}

func newChunkSender(pub asyncPublisher, topic, id string) *chunkSender {
	return &chunkSender{pub: pub, topic: topic, id: id, slots: make(chan struct{}, chunkWindow)}
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
	if err := c.failed(); err != nil {
		return err
	}
	b := wire.EncodeResponse(wire.Response{Response: text})
	select {
	case c.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	msg := transport.Message{Payload: b, Properties: map[string]string{wire.PropID: c.id, wire.PropSeq: strconv.Itoa(c.seq)}}
	c.seq++
	var err error
	for {
		err = c.pub.PublishAsync(context.WithoutCancel(ctx), c.topic, msg, func(err error) {
			if err != nil {
				c.fail(fmt.Errorf("publish reply chunk: %w", err))
			}
			<-c.slots
		})
		if !errors.Is(err, transport.ErrQueueFull) || len(c.slots) == 1 {
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
