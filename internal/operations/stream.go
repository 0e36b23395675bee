package operations

// The chunk stream: an answer in several messages kept chunk by chunk
// on the chunk topic, and read back from any gateway (Stream).

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/wire"
)

// Stream hands owner's operation id's answer to emit chunk by chunk, in
// order and each once, from chunk from on: the chunks kept so far, then
// each as it comes, until the last. Any gateway can serve it: the chunks
// are read from the chunk topic. An answer that came in one message is
// one chunk (index 0), emitted once the operation is done. Stream returns
// the record as it stands at the end: an operation that failed, was
// cancelled or passed its deadline ends the stream after the chunks
// recorded before that, and the caller reports the record's failure. The
// error is emit's, ctx's, ErrNotFound (also when the operation is
// deleted meanwhile), ErrChunksLost or ErrUnavailable.
func (m *Manager) Stream(ctx context.Context, owner, id string, from int, emit func(i int, text string, last bool) error) (Record, error) {
	r, err := m.Get(owner, id)
	if err != nil {
		return Record{}, err
	}
	if r.Finished() && r.Chunks == 0 {
		if r.State == Done && from == 0 {
			return r, emit(0, r.Output, true)
		}
		return r, nil
	}
	type chunk struct {
		i    int
		text string
		last bool
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	chunks := make(chan chunk, 64)
	readErr := make(chan error, 1)
	since := time.UnixMilli(r.CreateMS).Add(-clockSlack)
	go func() {
		readErr <- m.bus.ReadSince(rctx, m.opts.ChunkTopic, "toolgate-operation-stream", since, func(msg transport.Message) bool {
			if msg.Key != id {
				return true
			}
			text, ok := m.chunkText(msg)
			if !ok {
				return true
			}
			i, err := strconv.Atoi(msg.Properties[wire.PropSeq])
			if err != nil || i < 0 {
				m.log.Warn("operation chunk without a valid index ignored", "id", id, "index", msg.Properties[wire.PropSeq])
				return true
			}
			select {
			case chunks <- chunk{i: i, text: text, last: msg.Properties[propLast] == "true"}:
				return true
			case <-rctx.Done():
				return false
			}
		})
	}()
	next := 0 // the chunk due next from the topic
	var endedAt time.Time
	wake := time.NewTimer(time.Hour)
	defer wake.Stop()
	for {
		_, _, changed := m.lookup(id) // before the read: no change is missed
		r, err = m.Get(owner, id)
		if err != nil {
			return Record{}, err
		}
		if r.Finished() {
			switch {
			case r.State == Done && r.Chunks == 0 && next == 0:
				// Answered in one message after all.
				if from == 0 {
					return r, emit(0, r.Output, true)
				}
				return r, nil
			case r.State != Done && next >= r.Chunks:
				return r, nil
			}
			if endedAt.IsZero() {
				endedAt = time.Now()
			}
		}
		if r.Finished() {
			wake.Reset(time.Until(endedAt.Add(lastChunkWait)))
		}
		select {
		case c := <-chunks:
			switch {
			case c.i < next:
				continue // written twice (a gateway stopped between writing it and acknowledging its reply)
			case c.i > next:
				return r, fmt.Errorf("%w: chunk %d came after %d", ErrChunksLost, c.i, next-1)
			}
			next++
			if c.i >= from {
				if err := emit(c.i, c.text, c.last); err != nil {
					return r, err
				}
			}
			if c.last {
				return r, nil
			}
		case <-changed:
		case <-wake.C:
			if !endedAt.IsZero() && time.Since(endedAt) >= lastChunkWait {
				return r, fmt.Errorf("%w: the operation ended with %d chunks, %d of them found", ErrChunksLost, r.Chunks, next)
			}
		case err := <-readErr:
			if ctx.Err() != nil {
				return r, ctx.Err()
			}
			if err == nil {
				err = errors.New("the reader stopped")
			}
			return r, fmt.Errorf("%w: %w", ErrUnavailable, err)
		case <-ctx.Done():
			return r, ctx.Err()
		}
	}
}

// rejoin fills p with the chunks of r's answer kept on the chunk topic:
// the longest run from chunk 0, the sequence number due next being the
// chunk's (the Go SDK numbers an answer's messages from 0, one chunk
// each).
func (m *Manager) rejoin(ctx context.Context, r Record, p *partial) error {
	kept := map[int]string{}
	err := m.bus.ReadRange(ctx, m.opts.ChunkTopic, "toolgate-operation-rejoin", time.UnixMilli(r.CreateMS).Add(-clockSlack), func(msg transport.Message) {
		if msg.Key != r.ID {
			return
		}
		text, ok := m.chunkText(msg)
		if !ok {
			return
		}
		if i, err := strconv.Atoi(msg.Properties[wire.PropSeq]); err == nil && i >= 0 {
			kept[i] = text
		}
	})
	if err != nil {
		return err
	}
	for {
		text, ok := kept[p.written]
		if !ok {
			break
		}
		p.sb.WriteString(text)
		p.written++
	}
	p.next = p.written
	m.log.Info("operation taken over: chunks kept so far rejoined", "id", r.ID, "chunks", p.written)
	return nil
}

// writeChunk keeps chunk i of operation id's answer on the chunk topic,
// waiting for the broker's receipt.
func (m *Manager) writeChunk(ctx context.Context, id string, i int, text string, last bool) error {
	props := map[string]string{wire.PropSeq: strconv.Itoa(i)}
	if last {
		props[propLast] = "true"
	}
	msg := transport.Message{Key: id, Payload: []byte(text), Properties: props}
	if err := m.opts.Keys.protect(kindChunk, &msg); err != nil {
		return err
	}
	return m.publish(ctx, m.opts.ChunkTopic, msg)
}

// chunkText checks a chunk read from the chunk topic, signed with one of
// the deployment's keys, and returns its text decrypted. One refused is
// counted and logged (refuse).
func (m *Manager) chunkText(msg transport.Message) (string, bool) {
	text, err := m.opts.Keys.unprotect(kindChunk, msg)
	if err != nil {
		m.refuseRead(m.opts.ChunkTopic, msg, err)
		return "", false
	}
	return string(text), true
}

// recordOf returns id's record, waiting up to lagWait for it to reach the
