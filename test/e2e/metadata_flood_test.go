package e2e

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"
)

// TestGRPCMetadataFlood: a call with 15 metadata entries of 100 KB each
// (1.5 MB), sent over HTTP/2 by hand as no gRPC client library would send
// it past the server's advertised limit, is not served: the gRPC listener
// resets the stream, or answers it with a status that is not OK, and
// never runs the call.
func TestGRPCMetadataFlood(t *testing.T) {
	t.Parallel()
	conn, err := net.Dial("tcp", env.gw.GRPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A guard against a hang; not a timing assertion.
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}

	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	enc.SetMaxDynamicTableSizeLimit(0)
	for _, f := range []hpack.HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"},
		{Name: ":path", Value: "/toolgate.v1.ToolService/InvokeTool"}, {Name: ":authority", Value: "x"},
		{Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"},
	} {
		_ = enc.WriteField(f)
	}
	for i := range 15 {
		_ = enc.WriteField(hpack.HeaderField{Name: "x-pad-" + string(rune('a'+i)), Value: strings.Repeat("a", 100_000), Sensitive: true})
	}
	// The frames' size is the default the server must accept (16 KiB).
	const frame = 16 << 10
	b := block.Bytes()
	first := b[:frame]
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: first, EndHeaders: false}); err != nil {
		t.Fatal(err)
	}
	written := len(first)
	for rest := b[frame:]; len(rest) > 0; {
		n := min(frame, len(rest))
		if err := fr.WriteContinuation(1, n == len(rest), rest[:n]); err != nil {
			if errors.Is(err, net.ErrClosed) || isConnReset(err) {
				break // the server may close the connection first
			}
			t.Fatal(err)
		}
		written += n
		rest = rest[n:]
	}
	t.Logf("sent %d bytes of header block (%d bytes of metadata)", written, 15*100_000)
	// The message: a call the gateway would serve.
	msg, err := proto.Marshal(&toolgatev1.InvokeToolRequest{Name: "echo", ArgumentsJson: `{"msg": "served"}`})
	if err != nil {
		t.Fatal(err)
	}
	_ = fr.WriteData(1, true, envelope(0, msg))

	dec := hpack.NewDecoder(4096, nil)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			// The connection closed without serving the call.
			t.Logf("connection ended: %v", err)
			return
		}
		switch f := f.(type) {
		case *http2.RSTStreamFrame:
			if f.StreamID == 1 {
				t.Logf("stream reset: %v", f.ErrCode)
				return
			}
		case *http2.GoAwayFrame:
			t.Logf("connection going away: %v", f.ErrCode)
			return
		case *http2.HeadersFrame:
			if f.StreamID != 1 {
				continue
			}
			fields, err := dec.DecodeFull(f.HeaderBlockFragment())
			if err != nil {
				t.Fatal(err)
			}
			for _, hf := range fields {
				if hf.Name == "grpc-status" {
					if hf.Value == "0" {
						t.Fatal("the call was served with 1.5 MB of metadata")
					}
					t.Logf("answered grpc-status %s", hf.Value)
					return
				}
			}
		}
	}
}

func isConnReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op)
}
