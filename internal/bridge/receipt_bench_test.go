package bridge_test

import (
	"context"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/internal/transport/transporttest"
	"github.com/toolgate/toolgate/wire"
)

// newReceiptEchoBridge answers every request at once, inside Publish, as
// a Go SDK instance does: numbered, naming its instance — so that calls
// ask for receipts, and are watched for silence.
func newReceiptEchoBridge(b *testing.B) *bridge.Bridge {
	fb := &transporttest.Fake{}
	reply := benchReplyPayload(b, "abcdefghijklmnopqrstuvwxyz012345", true)
	fb.OnPublish = func(_ string, m transport.Message) error {
		fb.Deliver(transport.Message{Payload: reply, Properties: map[string]string{wire.PropID: m.Properties[wire.PropID],
			wire.PropInstance: "0123456789abcdef"}})
		return nil
	}
	br := bridge.New(fb, bridge.Options{})
	if err := br.Listen(context.Background(), benchTarget.ResponseTopic); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(br.Close)
	// The first reply names the instance: the calls from here on ask for
	// receipts.
	c, err := br.Call(context.Background(), benchTarget, benchReq, bridge.CallOptions{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := c.Wait(context.Background()); err != nil {
		b.Fatal(err)
	}
	c.Close()
	return br
}

// BenchmarkCallUnaryReceipts is BenchmarkCallUnary to a service that
// sends receipts, with a deadline of its own as the gateway's calls have:
// the call asks for a receipt and is watched for silence.
func BenchmarkCallUnaryReceipts(b *testing.B) {
	br := newReceiptEchoBridge(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		c, err := br.Call(ctx, benchTarget, benchReq, bridge.CallOptions{Deadline: time.Now().Add(time.Minute)})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Wait(ctx); err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}

// BenchmarkCallUnaryReceiptsParallel is the same from many goroutines.
func BenchmarkCallUnaryReceiptsParallel(b *testing.B) {
	br := newReceiptEchoBridge(b)
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c, err := br.Call(ctx, benchTarget, benchReq, bridge.CallOptions{Deadline: time.Now().Add(time.Minute)})
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
