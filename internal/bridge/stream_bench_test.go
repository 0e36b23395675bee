package bridge_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/internal/transport/transporttest"
	"github.com/toolgate/toolgate/wire"
)

// BenchmarkStreamChunk is one chunk of a flow-controlled stream from a Go
// SDK service, as the gateway's stream path handles it: routed (numbered,
// naming its flow topic), queued, and taken by a reader bounded by a
// stream idle timeout — "context" with a context per chunk as
// toolcall did, "recvidle" with RecvIdle.
func BenchmarkStreamChunk(b *testing.B) {
	for _, reader := range []string{"context", "recvidle"} {
		b.Run(reader, func(b *testing.B) {
			var id string
			fb := &transporttest.Fake{OnPublish: func(_ string, m transport.Message) error {
				if id == "" {
					id = m.Properties[wire.PropID]
				}
				return nil
			}}
			br := bridge.New(fb, bridge.Options{})
			defer br.Close()
			ctx := context.Background()
			c, err := br.Call(ctx, benchTarget, benchReq, bridge.CallOptions{})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			flow := wire.FlowTopic(benchTarget.RequestTopic, "0123456789ab")
			payload := benchReplyPayload(b, "12345,", false)
			h := fb.Handler()
			seq := 0
			b.ReportAllocs()
			for b.Loop() {
				h(transport.Message{Payload: payload, Properties: map[string]string{wire.PropID: id, wire.PropSeq: strconv.Itoa(seq), wire.PropFlow: flow}})
				seq++
				if reader == "context" {
					ictx, cancel := context.WithTimeout(ctx, time.Minute)
					_, err = c.Recv(ictx)
					cancel()
				} else {
					_, err = c.RecvIdle(ctx, time.Minute, context.DeadlineExceeded)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
