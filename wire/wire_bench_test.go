package wire_test

import (
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/wire"
)

// The envelope of a typical call, as the gateway builds it.
var benchReq = wire.Request{
	User:      "alice",
	Config:    `{"style":"pun"}`,
	Arguments: `{"msg":"abcdefghijklmnopqrstuvwxyz012345"}`,
}

func benchReply(n int) []byte {
	b := wire.EncodeResponse(wire.Response{Response: strings.Repeat("x", n), EndOfStream: true})
	return b
}

// BenchmarkEncodeRequest is the gateway's per-call envelope encoding.
func BenchmarkEncodeRequest(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = wire.EncodeRequest(benchReq)
	}
}

// BenchmarkDecodeRequest is what a Go tool service pays per request.
func BenchmarkDecodeRequest(b *testing.B) {
	payload := wire.EncodeRequest(benchReq)
	b.ReportAllocs()
	b.SetBytes(int64(len(payload)))
	for b.Loop() {
		if _, err := wire.DecodeRequest(payload); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeResponse is a tool service's per-reply encoding.
func BenchmarkEncodeResponse(b *testing.B) {
	r := wire.Response{Response: "abcdefghijklmnopqrstuvwxyz012345", EndOfStream: true}
	b.ReportAllocs()
	for b.Loop() {
		_ = wire.EncodeResponse(r)
	}
}

// BenchmarkDecodeResponse is the gateway's per-reply (per-chunk) decoding,
// for a short reply, a 1 KiB one and a 64 KiB one.
func BenchmarkDecodeResponse(b *testing.B) {
	for _, size := range []struct {
		name string
		n    int
	}{{"32B", 32}, {"1KiB", 1 << 10}, {"64KiB", 64 << 10}} {
		b.Run(size.name, func(b *testing.B) {
			payload := benchReply(size.n)
			b.ReportAllocs()
			b.SetBytes(int64(len(payload)))
			for b.Loop() {
				if _, err := wire.DecodeResponse(payload); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecodeResponseError is a reply carrying a service error.
func BenchmarkDecodeResponseError(b *testing.B) {
	payload := []byte(`{"error": {"type": "not-found", "message": "no such thing"}, "response": "", "end_of_stream": true}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := wire.DecodeResponse(payload); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDeadlineProperty is the deadline property written per call and
// read per request by Go services.
func BenchmarkDeadlineProperty(b *testing.B) {
	t := time.Now().Add(30 * time.Second)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := wire.ParseDeadline(wire.FormatDeadline(t)); !ok {
			b.Fatal("deadline did not parse")
		}
	}
}
