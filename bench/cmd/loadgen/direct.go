package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/internal/transport/pulsarbroker"
	"github.com/toolgate/toolgate/wire"
)

// direct does request/reply over Pulsar itself: the same client wrapper,
// producer settings, envelope and properties as the gateway, but no gRPC,
// HTTP, registry or argument checks, and the simplest correlation (one
// channel per call in a sync.Map). What the gateway adds on top of this is
// its overhead.
type direct struct {
	br       *pulsarbroker.Pulsar
	sub      transport.Subscription
	reqTopic string
	payload  []byte
	want     string
	stream   bool
	streamN  int
	pending  sync.Map // id → chan wire.Response
	orphans  atomic.Int64
	overflow atomic.Int64
}

func newDirect(ctx context.Context, o Options, msg string, stream bool) (*direct, error) {
	br, err := pulsarbroker.New(pulsarbroker.Options{URL: o.PulsarURL})
	if err != nil {
		return nil, err
	}
	d := &direct{br: br, reqTopic: wire.RequestTopic(o.Topic), want: msg, stream: stream, streamN: o.StreamN}
	args := `{"msg":"` + msg + `"}`
	if stream {
		args = fmt.Sprintf(`{"mode":"stream","n":%d}`, o.StreamN)
	}
	d.payload = wire.EncodeRequest(wire.Request{User: "anonymous", Config: "{}", Arguments: args})
	sub := "loadgen-" + newID()[:12]
	d.sub, err = br.Subscribe(ctx, wire.ResponseTopic(o.Topic), sub, transport.Exclusive, d.route)
	if err != nil {
		br.Close()
		return nil, err
	}
	return d, nil
}

func (d *direct) route(m transport.Message) {
	v, ok := d.pending.Load(m.Properties[wire.PropID])
	if !ok {
		d.orphans.Add(1)
		return
	}
	r, err := wire.DecodeResponse(m.Payload)
	if err != nil {
		r = wire.Response{Error: &wire.Error{Type: "bad-reply", Message: err.Error()}, EndOfStream: true}
	}
	select {
	case v.(chan wire.Response) <- r:
	default:
		d.overflow.Add(1)
	}
}

func (d *direct) Call(ctx context.Context, _ int) (int, error) {
	id := newID()
	capacity := 1
	if d.stream {
		capacity = d.streamN + 1
	}
	ch := make(chan wire.Response, capacity)
	d.pending.Store(id, ch)
	defer d.pending.Delete(id)
	props := map[string]string{wire.PropID: id}
	if dl, ok := ctx.Deadline(); ok {
		props[wire.PropDeadline] = wire.FormatDeadline(dl)
	}
	if err := d.br.Publish(ctx, d.reqTopic, transport.Message{Payload: d.payload, Properties: props}); err != nil {
		return 0, err
	}
	chunks := 0
	var text string
	for {
		select {
		case r := <-ch:
			if r.Error != nil {
				return chunks, r.Error
			}
			chunks++
			if !d.stream {
				text += r.Response
			}
			if !r.EndOfStream {
				continue
			}
			if d.stream && chunks != d.streamN {
				return chunks, fmt.Errorf("got %d chunks, want %d", chunks, d.streamN)
			}
			if !d.stream && text != d.want {
				return chunks, errors.New("reply differs from the message sent")
			}
			return chunks, nil
		case <-ctx.Done():
			return chunks, ctx.Err()
		}
	}
}

func (d *direct) Close() {
	_ = d.sub.Close()
	d.br.Close()
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
