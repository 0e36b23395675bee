package bridge_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/internal/transport/transporttest"
	"github.com/toolgate/toolgate/wire"
)

var (
	benchTarget = bridge.Target{RequestTopic: "non-persistent://tg/request/bench", ResponseTopic: "non-persistent://tg/response/bench"}
	benchReq    = wire.Request{User: "alice", Config: "{}", Arguments: `{"msg":"abcdefghijklmnopqrstuvwxyz012345"}`}
)

func benchReplyPayload(b *testing.B, text string, last bool) []byte {
	p := wire.EncodeResponse(wire.Response{Response: text, EndOfStream: last})
	return p
}

// newEchoBridge answers every request at once, inside Publish.
func newEchoBridge(b *testing.B) *bridge.Bridge {
	fb := &transporttest.Fake{}
	reply := benchReplyPayload(b, "abcdefghijklmnopqrstuvwxyz012345", true)
	fb.OnPublish = func(_ string, m transport.Message) error {
		fb.Deliver(transport.Message{Payload: reply, Properties: map[string]string{wire.PropID: m.Properties[wire.PropID]}})
		return nil
	}
	br := bridge.New(fb, bridge.Options{})
	if err := br.Listen(context.Background(), benchTarget.ResponseTopic); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(br.Close)
	return br
}

// BenchmarkCallUnary is one whole unary call through the bridge: Call
// (id, envelope, pending entry, publish), the reply routed back, Wait,
// Close.
func BenchmarkCallUnary(b *testing.B) {
	br := newEchoBridge(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		c, err := br.Call(ctx, benchTarget, benchReq, bridge.CallOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Wait(ctx); err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}

// BenchmarkCallUnaryParallel is the same from many goroutines at once
// (contention on the topic map's mutex and the pending map's shards).
func BenchmarkCallUnaryParallel(b *testing.B) {
	br := newEchoBridge(b)
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c, err := br.Call(ctx, benchTarget, benchReq, bridge.CallOptions{})
			if err != nil {
				b.Error(err)
				return
			}
			if _, err := c.Wait(ctx); err != nil {
				b.Error(err)
				return
			}
			c.Close()
		}
	})
}

// BenchmarkRouteChunk is reply routing alone: one reply chunk for a
// waiting (streaming) call, found among others pending, decoded, queued
// and taken by the reader.
func BenchmarkRouteChunk(b *testing.B) {
	for _, pending := range []int{1, 10000} {
		b.Run(fmt.Sprintf("pending=%d", pending), func(b *testing.B) {
			var ids []string
			fb := &transporttest.Fake{OnPublish: func(_ string, m transport.Message) error {
				ids = append(ids, m.Properties[wire.PropID])
				return nil
			}}
			br := bridge.New(fb, bridge.Options{MaxInFlight: pending + 1, MaxInFlightPerService: -1})
			defer br.Close()
			ctx := context.Background()
			var calls []*bridge.Call
			for range pending {
				c, err := br.Call(ctx, benchTarget, benchReq, bridge.CallOptions{})
				if err != nil {
					b.Fatal(err)
				}
				calls = append(calls, c)
			}
			c := calls[len(calls)/2]
			msg := transport.Message{Payload: benchReplyPayload(b, "0,", false), Properties: map[string]string{wire.PropID: ids[len(ids)/2]}}
			h := fb.Handler()
			b.ReportAllocs()
			for b.Loop() {
				h(msg)
				if _, err := c.Recv(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			for _, c := range calls {
				c.Close()
			}
		})
	}
}

// BenchmarkRouteOrphan is a reply nobody waits for (another gateway
// instance's, or a late one): looked up and dropped.
func BenchmarkRouteOrphan(b *testing.B) {
	fb := &transporttest.Fake{}
	br := bridge.New(fb, bridge.Options{})
	defer br.Close()
	if err := br.Listen(context.Background(), benchTarget.ResponseTopic); err != nil {
		b.Fatal(err)
	}
	h := fb.Handler()
	msg := transport.Message{Payload: benchReplyPayload(b, "late", true), Properties: map[string]string{wire.PropID: "0123456789abcdef0123456789abcdef"}}
	b.ReportAllocs()
	for b.Loop() {
		h(msg)
	}
}
