package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"
)

// grpcCaller calls the gateway over a few gRPC connections, workers taking
// them in turn.
type grpcCaller struct {
	conns   []*grpc.ClientConn
	clients []toolgatev1.ToolServiceClient
	tool    string
	want    string
	args    *structpb.Struct
	stream  bool
	sse     bool // streams as Server-Sent Events instead of NDJSON
	streamN int
}

func dialGRPC(addr string, n int, apiKey string) ([]*grpc.ClientConn, error) {
	conns := make([]*grpc.ClientConn, 0, n)
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if apiKey != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer{"Bearer " + apiKey}))
	}
	for range n {
		c, err := grpc.NewClient("passthrough:///"+addr, opts...)
		if err != nil {
			for _, c := range conns {
				_ = c.Close()
			}
			return nil, err
		}
		c.Connect()
		conns = append(conns, c)
	}
	return conns, nil
}

// bearer sends an API key with every call. The benchmark talks to the
// gateway over plain loopback connections, hence no transport security.
type bearer struct{ header string }

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": b.header}, nil
}

func (bearer) RequireTransportSecurity() bool { return false }

func newGRPC(o Options, msg string, stream bool) (*grpcCaller, error) {
	conns, err := dialGRPC(o.GRPCAddr, o.Conns, o.APIKey)
	if err != nil {
		return nil, err
	}
	g := &grpcCaller{conns: conns, tool: o.Tool, want: msg, stream: stream, streamN: o.StreamN}
	for _, c := range conns {
		g.clients = append(g.clients, toolgatev1.NewToolServiceClient(c))
	}
	a := map[string]any{"msg": msg}
	if stream {
		a = map[string]any{"mode": "stream", "n": o.StreamN}
	}
	if g.args, err = structpb.NewStruct(a); err != nil {
		return nil, err
	}
	return g, nil
}

func (g *grpcCaller) Call(ctx context.Context, worker int) (int, error) {
	c := g.clients[worker%len(g.clients)]
	if !g.stream {
		resp, err := c.InvokeTool(ctx, &toolgatev1.InvokeToolRequest{Name: g.tool, Arguments: g.args})
		if err != nil {
			return 0, err
		}
		if resp.GetOutput() != g.want {
			return 1, errors.New("reply differs from the message sent")
		}
		return 1, nil
	}
	st, err := c.StreamTool(ctx, &toolgatev1.StreamToolRequest{Name: g.tool, Arguments: g.args})
	if err != nil {
		return 0, err
	}
	n := 0
	for {
		m, err := st.Recv()
		if err == io.EOF {
			if n != g.streamN {
				return n, fmt.Errorf("got %d chunks, want %d", n, g.streamN)
			}
			return n, nil
		}
		if err != nil {
			return n, err
		}
		if m.GetIndex() != int64(n) {
			return n, fmt.Errorf("chunk %d has index %d", n, m.GetIndex())
		}
		n++
	}
}

func (g *grpcCaller) Close() {
	for _, c := range g.conns {
		_ = c.Close()
	}
}

// restCaller calls the gateway's HTTP/JSON side with keep-alive
// connections, one per worker at most.
type restCaller struct {
	client  *http.Client
	url     string
	auth    string
	body    []byte
	want    string
	stream  bool
	sse     bool // streams as Server-Sent Events instead of NDJSON
	streamN int
}

// newHTTPClient keeps a connection per worker alive, uncompressed.
func newHTTPClient(o Options) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        o.Concurrency + 16,
		MaxIdleConnsPerHost: o.Concurrency + 16,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}}
}

func newREST(o Options, msg string, stream, sse bool) *restCaller {
	r := &restCaller{client: newHTTPClient(o), want: msg, stream: stream, sse: sse, streamN: o.StreamN}
	if o.APIKey != "" {
		r.auth = "Bearer " + o.APIKey
	}
	if stream {
		r.url = "http://" + o.HTTPAddr + "/v1/tools/" + o.Tool + ":stream"
		r.body = fmt.Appendf(nil, `{"arguments":{"mode":"stream","n":%d}}`, o.StreamN)
	} else {
		r.url = "http://" + o.HTTPAddr + "/v1/tools/" + o.Tool + ":invoke"
		r.body, _ = json.Marshal(map[string]any{"arguments": map[string]any{"msg": msg}})
	}
	return r
}

func (r *restCaller) Call(ctx context.Context, _ int) (int, error) {
	accept := ""
	if r.sse {
		accept = "text/event-stream"
	}
	resp, err := postJSON(ctx, r.client, r.url, r.body, accept, r.auth)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if !r.stream {
		var out struct {
			Output string `json:"output"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body) // keep the connection reusable
		if out.Output != r.want {
			return 1, errors.New("reply differs from the message sent")
		}
		return 1, nil
	}
	// NDJSON: one chunk per line ({"output": …}), a Status line on failure.
	// SSE: "event: chunk" per chunk, then "event: done" or "event: error".
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	n, done := 0, false
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case len(bytes.TrimSpace(line)) == 0:
		case r.sse && bytes.Equal(line, []byte("event: chunk")):
			n++
		case r.sse && bytes.Equal(line, []byte("event: done")):
			done = true
		case r.sse && (bytes.HasPrefix(line, []byte("data: ")) || bytes.HasPrefix(line, []byte(":"))):
		case !r.sse && bytes.HasPrefix(line, []byte(`{"output"`)):
			n++
		default:
			return n, fmt.Errorf("stream line after %d chunks: %.200s", n, line)
		}
	}
	if err := sc.Err(); err != nil {
		return n, err
	}
	if r.sse && !done {
		return n, fmt.Errorf("SSE stream ended after %d chunks without a done event", n)
	}
	if n != r.streamN {
		return n, fmt.Errorf("got %d chunks, want %d", n, r.streamN)
	}
	return n, nil
}

func (r *restCaller) Close() { r.client.CloseIdleConnections() }

// postJSON posts body with the given Accept (none when empty) and bearer
// credential; any answer but 200 is an error carrying the start of its body.
func postJSON(ctx context.Context, c *http.Client, url string, body []byte, accept, auth string, header ...string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	return resp, nil
}
