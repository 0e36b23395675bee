package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/brokertest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"
)

// pyStreamOutcome is what a client got from a stream of the Python
// streaming service.
type pyStreamOutcome struct {
	chunks int    // chunks received, each the one due ("i,")
	wrong  string // the first chunk that was not the one due
	err    string // how the stream ended, if not whole
	took   time.Duration
}

func (o *pyStreamOutcome) add(text string, n int) {
	want := strconv.Itoa(o.chunks)
	if o.chunks < n-1 {
		want += ","
	}
	if o.wrong == "" && text != want {
		o.wrong = fmt.Sprintf("chunk %d is %q, want %q", o.chunks, text, want)
	}
	o.chunks++
}

// TestInteropPythonStream: a Python service that streams (several
// end_of_stream false messages, then true; test/python/streaming_service.py,
// the Pulsar client as TrustGraph uses it, none of toolgate's properties)
// through the gateway, over REST NDJSON and gRPC, from 10 to 100,000
// chunks: each stream arrives whole, or ends with a clear error — never a
// silent hole, never a hang to the call's deadline (60 s here).
//
// It holds for 10 and 200 chunks. It does NOT hold reliably for 1,000
// (one CI run of 2026-12-05 on a loaded machine lost chunk 728 of 1,000
// over gRPC, unseen, after many runs whole), nor for 20,000 and 100,000
// (TOOLGATE_PY_STREAM_N=1000,20000,100000): the service sends as fast
// as its producer allows, with no flow control, and the broker drops
// reply messages on the non-persistent response topic when the gateway's
// connection cannot take them; without sequence numbers the gateway cannot
// see the hole, so the client gets a stream with chunks missing that ends
// as if whole, or — when the last message is the one dropped — waits for
// its deadline. Left open: it needs the service's cooperation (numbers) or
// a way for the gateway to learn of the broker's drops.
func TestInteropPythonStream(t *testing.T) {
	t.Parallel()
	topic := brokertest.UniqueTopic("pystream")
	requestTopic := "non-persistent://tg/request/" + topic
	interopStartPython(t, "streaming-service", requestTopic,
		"python", "test/python/streaming_service.py", "-p", brokertest.PulsarURL(), "--id", topic, "-t", topic)
	reg := filepath.Join(t.TempDir(), "registry.yaml")
	if err := os.WriteFile(reg, []byte(fmt.Sprintf("tool-service:\n  py-stream-service: {topic: %s}\ntool:\n  py-stream: {type: tool-service, description: a streaming Python service, service: py-stream-service}\n", topic)), 0o644); err != nil {
		t.Fatal(err)
	}
	gw := runGateway(t, nil, "--pulsar-admin-url", brokertest.AdminURL(), "--registry", reg, "--announcements=false", "--allow-anonymous", "--default-timeout", "60s")
	base := "http://" + gw.HTTPAddr()
	if err := waitReady(base, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(gw.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := toolgatev1.NewToolServiceClient(conn)

	rest := func(ctx context.Context, n int) (o pyStreamOutcome) {
		start := time.Now()
		defer func() { o.took = time.Since(start) }()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/tools/py-stream:stream", strings.NewReader(fmt.Sprintf(`{"arguments":{"n":%d}}`, n)))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			o.err = err.Error()
			return o
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			o.err = fmt.Sprintf("HTTP %d %s", resp.StatusCode, b)
			return o
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var l streamLine
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				o.err = "bad line: " + sc.Text()
				return o
			}
			if l.Code != nil {
				o.err = fmt.Sprintf("code %d: %s %v", *l.Code, l.Message, l.Details)
				return o
			}
			if l.Output != nil {
				o.add(*l.Output, n)
			}
			if l.Last {
				return o
			}
		}
		o.err = fmt.Sprintf("the body ended without a last chunk or a status (%v)", sc.Err())
		return o
	}
	grpcStream := func(ctx context.Context, n int) (o pyStreamOutcome) {
		start := time.Now()
		defer func() { o.took = time.Since(start) }()
		args, _ := structpb.NewStruct(map[string]any{"n": float64(n)})
		st, err := client.StreamTool(ctx, &toolgatev1.StreamToolRequest{Name: "py-stream", Arguments: args})
		if err != nil {
			o.err = err.Error()
			return o
		}
		for {
			m, err := st.Recv()
			if errors.Is(err, io.EOF) {
				return o
			}
			if err != nil {
				o.err = err.Error()
				return o
			}
			o.add(m.GetOutput(), n)
		}
	}
	sizes := []int{10, 200}
	// Longer streams lose chunks today (see the doc comment): give their
	// sizes, e.g. TOOLGATE_PY_STREAM_N=20000,100000, to see it.
	for _, f := range strings.Split(os.Getenv("TOOLGATE_PY_STREAM_N"), ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && n > 0 {
			sizes = append(sizes, n)
		}
	}
	for _, n := range sizes {
		for _, door := range []string{"REST", "gRPC"} {
			t.Run(fmt.Sprintf("%s %d", door, n), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
				defer cancel()
				var o pyStreamOutcome
				if door == "REST" {
					o = rest(ctx, n)
				} else {
					o = grpcStream(ctx, n)
				}
				t.Logf("%d of %d chunks in %v; %s", o.chunks, n, o.took.Round(time.Millisecond), orWhole(o.err))
				switch {
				case o.wrong != "":
					t.Errorf("a chunk was lost or changed without an error: %s", o.wrong)
				case o.err == "" && o.chunks != n:
					t.Errorf("the stream ended whole after %d of %d chunks", o.chunks, n)
				case o.err != "" && (strings.Contains(o.err, "DeadlineExceeded") || strings.Contains(o.err, "deadline") || o.took > 30*time.Second):
					t.Errorf("the stream hung to its deadline (%v): %s", o.took, o.err)
				case o.err != "" && n <= 1000:
					t.Errorf("a %d-chunk stream failed: %s", n, o.err)
				}
			})
		}
	}
}

func orWhole(err string) string {
	if err == "" {
		return "whole"
	}
	return "ended with: " + err
}
