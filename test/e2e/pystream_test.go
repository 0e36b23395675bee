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
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
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
// through the gateway, over REST NDJSON and gRPC.
//
// On a persistent response topic (the service's response-queue) every
// stream arrives whole, 100,000 chunks included: the broker keeps what
// the gateway's consumer cannot take at once, and the gateway's
// subscription there is non-durable (nothing is left behind when it
// stops).
//
// On a non-persistent response topic (TrustGraph's default) the service
// sends as fast as its producer allows, with no flow control, and the
// broker drops reply messages when the gateway's connection cannot take
// them; without sequence numbers a hole would not show. The gateway (with
// --pulsar-admin-url) compares the topic's messages in with those sent to
// its subscription and holds an unnumbered stream's end until that shows
// nothing dropped: each stream arrives whole or ends with REPLY_LOST,
// never with a silent hole, never at its deadline. 10, 200 and 1,000
// chunks arrive whole here; 20,000 usually end with REPLY_LOST
// (TOOLGATE_PY_STREAM_N adds sizes, e.g. 100000).
func TestInteropPythonStream(t *testing.T) {
	t.Parallel()
	// Two instances of the service, one per kind of response topic.
	volatile, durable := brokertest.UniqueTopic("pystream"), brokertest.UniqueTopic("pystream-p")
	for _, svc := range []struct{ topic, response string }{
		{volatile, "non-persistent://tg/response/" + volatile},
		{durable, "persistent://tg/response/" + durable},
	} {
		interopStartPython(t, "streaming-service-"+svc.topic, "non-persistent://tg/request/"+svc.topic,
			"python", "test/python/streaming_service.py", "-p", brokertest.PulsarURL(), "--id", svc.topic, "-t", svc.topic,
			"--response-topic", svc.response)
	}
	reg := filepath.Join(t.TempDir(), "registry.yaml")
	if err := os.WriteFile(reg, fmt.Appendf(nil, `tool-service:
  py-stream-service: {topic: %s}
  py-stream-persistent: {request-queue: "non-persistent://tg/request/%s", response-queue: "persistent://tg/response/%s"}
tool:
  py-stream: {type: tool-service, description: a streaming Python service, service: py-stream-service}
  py-stream-p: {type: tool-service, description: the same on a persistent response topic, service: py-stream-persistent}
`, volatile, durable, durable), 0o644); err != nil {
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

	rest := func(ctx context.Context, tool string, n int) (o pyStreamOutcome) {
		start := time.Now()
		defer func() { o.took = time.Since(start) }()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/tools/"+tool+":stream", strings.NewReader(fmt.Sprintf(`{"arguments":{"n":%d}}`, n)))
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
	grpcStream := func(ctx context.Context, tool string, n int) (o pyStreamOutcome) {
		start := time.Now()
		defer func() { o.took = time.Since(start) }()
		args, _ := structpb.NewStruct(map[string]any{"n": float64(n)})
		st, err := client.StreamTool(ctx, &toolgatev1.StreamToolRequest{Name: tool, Arguments: args})
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
				for _, d := range status.Convert(err).Details() {
					if info, ok := d.(*errdetails.ErrorInfo); ok {
						o.err += " " + info.GetReason()
					}
				}
				return o
			}
			o.add(m.GetOutput(), n)
		}
	}
	type run struct {
		tool  string
		n     int
		whole bool // must arrive whole (else: whole or REPLY_LOST, before the deadline)
	}
	runs := []run{{"py-stream", 10, true}, {"py-stream", 200, true}, {"py-stream", 1000, false}, {"py-stream", 20000, false},
		{"py-stream-p", 10, true}, {"py-stream-p", 1000, true}, {"py-stream-p", 20000, true}, {"py-stream-p", 100000, true}}
	for _, f := range strings.Split(os.Getenv("TOOLGATE_PY_STREAM_N"), ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && n > 0 {
			runs = append(runs, run{"py-stream", n, false})
		}
	}
	for _, r := range runs {
		for _, door := range []string{"REST", "gRPC"} {
			t.Run(fmt.Sprintf("%s %s %d", r.tool, door, r.n), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
				defer cancel()
				var o pyStreamOutcome
				if door == "REST" {
					o = rest(ctx, r.tool, r.n)
				} else {
					o = grpcStream(ctx, r.tool, r.n)
				}
				t.Logf("%d of %d chunks in %v; %s", o.chunks, r.n, o.took.Round(time.Millisecond), orWhole(o.err))
				switch {
				case o.err != "" && (strings.Contains(o.err, "DeadlineExceeded") || strings.Contains(o.err, "deadline")):
					t.Errorf("the stream hung to its deadline (%v): %s", o.took, o.err)
				case r.whole && (o.wrong != "" || o.err != "" || o.chunks != r.n):
					t.Errorf("the stream did not arrive whole: %d of %d chunks; %s %s", o.chunks, r.n, o.wrong, o.err)
				case o.wrong != "" && o.err == "" || o.err == "" && o.chunks != r.n:
					t.Errorf("a chunk was lost without an error: %d of %d chunks; %s", o.chunks, r.n, o.wrong)
				case o.err != "" && !strings.Contains(o.err, "REPLY_LOST"):
					t.Errorf("the stream ended with an error that is not REPLY_LOST: %s", o.err)
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
