package e2e

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/gen/toolgate/v1/toolgatev1connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// The request limits of the limits table's gateway: the defaults, but
// for a body timeout short enough for a test.
const (
	limitBody        = 1 << 20
	limitHeader      = 64 << 10
	limitBodyTimeout = time.Second
	// bombInflated is what the compression bomb inflates to.
	bombInflated = 200 << 20
	// heapPerRefusal bounds what the gateway may allocate for one
	// refused bomb: a few times the body limit (buffers grow by doubling
	// to hold limit+1 bytes: 1-3 MiB a door measured, up to 9 MiB under
	// the race detector, which turns sync.Pool off), never what the bomb
	// inflates to.
	heapPerRefusal = 16 << 20
)

// limitKind is an attack, or a hard case, of the limits table.
type limitKind int

const (
	oversizedBody limitKind = iota
	compressionBomb
	oversizedMetadata
	slowBody
	deepJSON
	hugeNumbers
)

// limitDoor sends one kind of request through one door and says what it
// came to.
type limitDoor struct {
	name string
	send func(t *testing.T, kind limitKind) outcome
	// bombs is how many bombs send sends at once.
	bombs int
}

// hugeArgs are arguments with numbers no double holds, within the body
// limit: they must reach the tool service exactly as written.
var hugeArgs = `{"big": 123456789012345678901234567890123456789012345678901234567890.000000000000000000001e-300, "long": ` +
	"9" + strings.Repeat("0123456789", 2000) + `, "small": -0.000000000000000000000000000000000000000000000000000001}`

// deepArgs nest deeper than any decoder of the gateway goes.
var deepArgs = strings.Repeat(`{"a": `, 100) + "1" + strings.Repeat("}", 100)

// bigArgs are arguments over the body limit.
var bigArgs = `{"x": "` + strings.Repeat("a", limitBody+limitBody/2) + `"}`

// limitsTable sends the limits table through every door of a gateway of
// its own (anonymous callers, a short body timeout) and wants the same
// outcome from each; a refused compression bomb must cost the gateway's
// heap less than heapPerRefusal.
func limitsTable(t *testing.T) {
	reg := filepath.Join(t.TempDir(), "registry.yaml")
	if err := os.WriteFile(reg, []byte(fmt.Sprintf("tool-service:\n  echo-service: {topic: %s}\ntool:\n  echo: {type: tool-service, service: echo-service}\n", env.echoTopic)), 0o600); err != nil {
		t.Fatal(err)
	}
	gw := runGateway(t, nil, "--registry", reg, "--allow-anonymous", "--announcements=false",
		"--body-timeout", limitBodyTimeout.String(), "--max-body-bytes", strconv.Itoa(limitBody), "--max-header-bytes", strconv.Itoa(limitHeader))
	base := "http://" + gw.HTTPAddr()
	if err := waitReady(base, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(gw.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	grpcCli := toolgatev1.NewToolServiceClient(conn)
	// HTTP/2 without TLS, as gRPC clients speak it: for what a gRPC
	// client library would not send.
	var h2 http.Protocols
	h2.SetUnencryptedHTTP2(true)
	h2c := &http.Client{Transport: &http.Transport{Protocols: &h2}}
	t.Cleanup(h2c.CloseIdleConnections)
	bomb := gzipBomb(t)
	t.Logf("compression bomb: %d bytes inflating to %d", len(bomb), bombInflated)

	// A row's outcome is its code on every door, and its reason where
	// the door's answer has one: an oversized or slow message refused by
	// grpc-go or connect-go itself, before the door's code runs, carries
	// no ErrorInfo. REST reads the whole body as JSON, so too deep a body
	// is INVALID_BODY there.
	rows := []struct {
		name    string
		kind    limitKind
		want    outcome
		reasons []string // besides "", a reason may be one of these
	}{
		{"oversized body", oversizedBody, outcome{codes.ResourceExhausted, "", ""}, []string{"BODY_TOO_LARGE"}},
		{"compression bomb", compressionBomb, outcome{codes.ResourceExhausted, "", ""}, []string{"BODY_TOO_LARGE"}},
		{"oversized metadata", oversizedMetadata, outcome{codes.ResourceExhausted, "HEADERS_TOO_LARGE", ""}, []string{"HEADERS_TOO_LARGE"}},
		{"slow body", slowBody, outcome{codes.DeadlineExceeded, "", ""}, []string{"BODY_TIMEOUT"}},
		{"deep JSON", deepJSON, outcome{codes.InvalidArgument, "", ""}, []string{"INVALID_ARGUMENTS", "INVALID_BODY"}},
		{"huge numbers", hugeNumbers, outcome{codes.OK, "", ""}, nil},
	}
	doors := []limitDoor{
		{"grpc", func(t *testing.T, k limitKind) outcome { return grpcLimits(t, grpcCli, h2c, gw.GRPCAddr(), bomb, k) }, 1},
		{"rest", func(t *testing.T, k limitKind) outcome { return restLimits(t, base, gw.HTTPAddr(), bomb, k) }, 1},
		{"mcp", func(t *testing.T, k limitKind) outcome { return mcpLimits(t, base, gw.HTTPAddr(), bomb, k) }, 1},
		// A unary call and a stream: Content-Encoding, Connect-Content-Encoding.
		{"connect", func(t *testing.T, k limitKind) outcome { return connectLimits(t, base, gw.HTTPAddr(), bomb, k, false) }, 2},
		{"grpc-web", func(t *testing.T, k limitKind) outcome { return connectLimits(t, base, gw.HTTPAddr(), bomb, k, true) }, 1},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			for _, d := range doors {
				t.Run(d.name, func(t *testing.T) {
					const tries = 3
					n, before := 1, heapAllocs()
					if row.kind == compressionBomb {
						n = tries
					}
					var got outcome
					for range n {
						got = d.send(t, row.kind)
					}
					if row.kind == compressionBomb {
						per := (heapAllocs() - before) / uint64(tries*d.bombs)
						t.Logf("%.1f MiB allocated per refused bomb", float64(per)/(1<<20))
						if per > heapPerRefusal {
							t.Errorf("the gateway allocated %d bytes per refused bomb, want under %d", per, heapPerRefusal)
						}
					}
					got.reason = normReason(got.code, got.reason)
					reasonOK := got.reason == row.want.reason || (row.want.reason == "" && slices.Contains(row.reasons, got.reason))
					if got.code != row.want.code || !reasonOK {
						t.Errorf("%v, want %v (reason one of %q)", got, row.want, append([]string{row.want.reason}, row.reasons...))
					}
					if row.kind == hugeNumbers && got.code == codes.OK {
						checkHuge(t, d.name, got.output)
					}
				})
			}
		})
	}
}

// heapAllocs is the bytes the process (the gateway in it) has allocated
// on the heap so far (runtime/metrics): what a refused request costs is
// the difference, whatever the collector did meanwhile.
func heapAllocs() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// gzipBomb is bombInflated zero bytes, gzipped.
func gzipBomb(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	zeros := make([]byte, 1<<20)
	for range bombInflated >> 20 {
		if _, err := zw.Write(zeros); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// envelope is a gRPC (or Connect streaming, gRPC-Web) message frame.
func envelope(flags byte, msg []byte) []byte {
	out := make([]byte, 5, 5+len(msg))
	out[0] = flags
	binary.BigEndian.PutUint32(out[1:], uint32(len(msg)))
	return append(out, msg...)
}

// invokeProto is an InvokeToolRequest for echo with args as JSON text.
func invokeProto(t *testing.T, args string) []byte {
	t.Helper()
	b, err := proto.Marshal(&toolgatev1.InvokeToolRequest{Name: "echo", ArgumentsJson: args})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkHuge fails unless output holds hugeArgs' numbers as written.
func checkHuge(t *testing.T, door, output string) {
	t.Helper()
	compact := strings.ReplaceAll(hugeArgs, " ", "")
	for _, key := range []string{"big", "long", "small"} {
		i := strings.Index(compact, `"`+key+`":`)
		num := compact[i:]
		num = num[:strings.IndexAny(num, ",}")]
		if !strings.Contains(strings.ReplaceAll(output, " ", ""), num) {
			t.Errorf("%s: %s changed on its way: the service saw %.200s…", door, key, output)
		}
	}
}

// slowRequest writes a request's head (it must declare a body longer than
// first) and the first bytes of its body on a connection of its own, then
// nothing more; it returns the answer, its body, and whether the gateway
// closed the connection after it.
func slowRequest(t *testing.T, addr, head string, first []byte) (*http.Response, []byte, bool) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, head+"\r\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(first); err != nil {
		t.Fatal(err)
	}
	// A guard against a hang, far beyond the body timeout; not a timing
	// assertion.
	_ = conn.SetReadDeadline(time.Now().Add(20 * limitBodyTimeout))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer to a slow body: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	_, err = br.ReadByte()
	return resp, body, err != nil
}

// httpHead is a request head on addr with a body of length n (more than
// will be sent).
func httpHead(addr, path string, n int, header map[string]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n", path, addr, n)
	for k, v := range header {
		fmt.Fprintf(&b, "%s: %s\r\n", k, v)
	}
	return b.String()
}

// statusOutcome reads a google.rpc.Status JSON body.
func statusOutcome(t *testing.T, code int, raw []byte) outcome {
	t.Helper()
	var st statusBody
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatalf("HTTP %d %.300s: %v", code, raw, err)
	}
	return st.outcome()
}

func grpcLimits(t *testing.T, cli toolgatev1.ToolServiceClient, h2c *http.Client, addr string, bomb []byte, kind limitKind) outcome {
	t.Helper()
	fail := func(err error) outcome {
		st := status.Convert(err)
		o := outcome{code: st.Code()}
		if ei := errorInfo(st); ei != nil {
			o.reason = ei.GetReason()
		}
		return o
	}
	invoke := func(ctx context.Context, args string) outcome {
		resp, err := cli.InvokeTool(ctx, &toolgatev1.InvokeToolRequest{Name: "echo", ArgumentsJson: args})
		if err != nil {
			return fail(err)
		}
		return outcome{output: resp.GetOutput()}
	}
	switch kind {
	case oversizedBody:
		return invoke(t.Context(), bigArgs)
	case oversizedMetadata:
		return invoke(metadata.AppendToOutgoingContext(t.Context(), "x-pad", strings.Repeat("a", 100_000)), `{}`)
	case deepJSON:
		return invoke(t.Context(), deepArgs)
	case hugeNumbers:
		return invoke(t.Context(), hugeArgs)
	case compressionBomb:
		return rawGRPC(t, h2c, addr, map[string]string{"Grpc-Encoding": "gzip"}, bytes.NewReader(envelope(1, bomb)))
	case slowBody:
		pr, pw := io.Pipe()
		defer pw.Close()
		go func() { _, _ = pw.Write(envelope(0, invokeProto(t, `{}`))[:6]) }()
		return rawGRPC(t, h2c, addr, nil, pr)
	}
	t.Fatalf("kind %d", kind)
	return outcome{}
}

// rawGRPC calls InvokeTool over HTTP/2 with body as it is, and reads the
// status the gRPC server answers.
func rawGRPC(t *testing.T, h2c *http.Client, addr string, header map[string]string, body io.Reader) outcome {
	t.Helper()
	// A guard against a hang, far beyond the body timeout; not a timing
	// assertion.
	ctx, cancel := context.WithTimeout(t.Context(), 20*limitBodyTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/toolgate.v1.ToolService/InvokeTool", body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := h2c.Do(req)
	if err != nil {
		t.Fatalf("gRPC over HTTP/2: no answer: %v", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	code := resp.Header.Get("Grpc-Status")
	if code == "" {
		code = resp.Trailer.Get("Grpc-Status")
	}
	n, err := strconv.Atoi(code)
	if err != nil {
		t.Fatalf("gRPC answer without a status: HTTP %d %v %v", resp.StatusCode, resp.Header, resp.Trailer)
	}
	return outcome{code: codes.Code(n)}
}

func restLimits(t *testing.T, base, addr string, bomb []byte, kind limitKind) outcome {
	t.Helper()
	switch kind {
	case oversizedBody:
		return restParity(t, base, parityCall{tool: "echo", args: bigArgs})
	case oversizedMetadata:
		return restParity(t, base, parityCall{tool: "echo", args: `{}`, headers: map[string]string{"X-Pad": strings.Repeat("a", 100_000)}})
	case deepJSON:
		return restParity(t, base, parityCall{tool: "echo", args: deepArgs})
	case hugeNumbers:
		return restParity(t, base, parityCall{tool: "echo", args: hugeArgs})
	case compressionBomb:
		resp := postRaw(t, base+"/v1/tools/echo:invoke", map[string]string{"Content-Type": "application/json", "Content-Encoding": "gzip"}, bomb)
		return statusOutcome(t, resp.code, resp.body)
	case slowBody:
		resp, body, closed := slowRequest(t, addr, httpHead(addr, "/v1/tools/echo:invoke", 100, map[string]string{"Content-Type": "application/json"}), []byte(`{`))
		if !closed {
			t.Error("rest: the connection stayed open after a slow body")
		}
		if resp.StatusCode != http.StatusRequestTimeout {
			t.Errorf("rest: HTTP %d, want 408", resp.StatusCode)
		}
		return statusOutcome(t, resp.StatusCode, body)
	}
	t.Fatalf("kind %d", kind)
	return outcome{}
}

type answer struct {
	code   int
	body   []byte
	header http.Header
}

func postRaw(t *testing.T, url string, header map[string]string, body []byte) answer {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, raw, resp.Header}
}

// rpcOutcome reads a JSON-RPC error answer of the MCP endpoint.
func rpcOutcome(t *testing.T, code int, raw []byte) outcome {
	t.Helper()
	var m struct {
		Error *struct {
			Data struct {
				Code   string `json:"code"`
				Reason string `json:"reason"`
			} `json:"data"`
		} `json:"error"`
	}
	if err := json.Unmarshal(raw, &m); err != nil || m.Error == nil {
		t.Fatalf("MCP HTTP %d %.300s: not a JSON-RPC error (%v)", code, raw, err)
	}
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		if c.String() == m.Error.Data.Code {
			return outcome{code: c, reason: m.Error.Data.Reason}
		}
	}
	t.Fatalf("MCP HTTP %d %.300s: no code in the error's data", code, raw)
	return outcome{}
}

func mcpLimits(t *testing.T, base, addr string, bomb []byte, kind limitKind) outcome {
	t.Helper()
	mcpHeader := map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
	switch kind {
	case oversizedBody:
		return mcpParity(t, base, parityCall{tool: "echo", args: bigArgs})
	case oversizedMetadata:
		return mcpParity(t, base, parityCall{tool: "echo", args: `{}`, headers: map[string]string{"X-Pad": strings.Repeat("a", 100_000)}})
	case deepJSON:
		return mcpParity(t, base, parityCall{tool: "echo", args: deepArgs})
	case hugeNumbers:
		return mcpParity(t, base, parityCall{tool: "echo", args: hugeArgs})
	case compressionBomb:
		mcpHeader["Content-Encoding"] = "gzip"
		resp := postRaw(t, base+"/mcp", mcpHeader, bomb)
		return rpcOutcome(t, resp.code, resp.body)
	case slowBody:
		resp, body, closed := slowRequest(t, addr, httpHead(addr, "/mcp", 100, mcpHeader), []byte(`{`))
		if !closed {
			t.Error("mcp: the connection stayed open after a slow body")
		}
		if resp.StatusCode != http.StatusRequestTimeout {
			t.Errorf("mcp: HTTP %d, want 408", resp.StatusCode)
		}
		return rpcOutcome(t, resp.StatusCode, body)
	}
	t.Fatalf("kind %d", kind)
	return outcome{}
}

// connectLimits sends kind by the Connect protocol, or gRPC-Web.
func connectLimits(t *testing.T, base, addr string, bomb []byte, kind limitKind, grpcWeb bool) outcome {
	t.Helper()
	var opts []connect.ClientOption
	if grpcWeb {
		opts = append(opts, connect.WithGRPCWeb())
	}
	cli := toolgatev1connect.NewToolServiceClient(http.DefaultClient, base, opts...)
	invoke := func(args string, header map[string]string) outcome {
		req := connect.NewRequest(&toolgatev1.InvokeToolRequest{Name: "echo", ArgumentsJson: args})
		for k, v := range header {
			req.Header().Set(k, v)
		}
		resp, err := cli.InvokeTool(t.Context(), req)
		if err != nil {
			return connectOutcome(err)
		}
		return outcome{output: resp.Msg.GetOutput()}
	}
	const invokePath, streamPath = "/toolgate.v1.ToolService/InvokeTool", "/toolgate.v1.ToolService/StreamTool"
	switch kind {
	case oversizedBody:
		return invoke(bigArgs, nil)
	case oversizedMetadata:
		return invoke(`{}`, map[string]string{"X-Pad": strings.Repeat("a", 100_000)})
	case deepJSON:
		return invoke(deepArgs, nil)
	case hugeNumbers:
		return invoke(hugeArgs, nil)
	case compressionBomb:
		if grpcWeb {
			resp := postRaw(t, base+invokePath, map[string]string{"Content-Type": "application/grpc-web+proto", "Grpc-Encoding": "gzip", "X-Grpc-Web": "1"}, envelope(1, bomb))
			return grpcWebOutcome(t, resp)
		}
		// Unary: the body is the message, Content-Encoding its compression.
		unary := connectErrorOutcome(t, postRaw(t, base+invokePath,
			map[string]string{"Content-Type": "application/proto", "Connect-Protocol-Version": "1", "Content-Encoding": "gzip"}, bomb))
		// Streaming: each message compressed by Connect-Content-Encoding.
		resp := postRaw(t, base+streamPath, map[string]string{"Content-Type": "application/connect+proto", "Connect-Content-Encoding": "gzip"}, envelope(1, bomb))
		if stream := connectEndOutcome(t, resp); stream != unary {
			t.Errorf("connect: a bomb in a stream came to %v, in a unary call %v", stream, unary)
		}
		return unary
	case slowBody:
		if grpcWeb {
			resp, body, closed := slowRequest(t, addr, httpHead(addr, invokePath, 100, map[string]string{"Content-Type": "application/grpc-web+proto", "X-Grpc-Web": "1"}), envelope(0, invokeProto(t, `{}`))[:6])
			if !closed {
				t.Error("grpc-web: the connection stayed open after a slow body")
			}
			return grpcWebOutcome(t, answer{resp.StatusCode, body, resp.Header})
		}
		resp, body, closed := slowRequest(t, addr, httpHead(addr, invokePath, 100, map[string]string{"Content-Type": "application/json", "Connect-Protocol-Version": "1"}), []byte(`{`))
		if !closed {
			t.Error("connect: the connection stayed open after a slow body")
		}
		return connectErrorOutcome(t, answer{resp.StatusCode, body, resp.Header})
	}
	t.Fatalf("kind %d", kind)
	return outcome{}
}

// connectCode is a Connect error code's gRPC code.
func connectCode(t *testing.T, name string) codes.Code {
	t.Helper()
	var c connect.Code
	if err := c.UnmarshalText([]byte(name)); err != nil {
		t.Fatalf("Connect code %q: %v", name, err)
	}
	return codes.Code(c)
}

// connectErrorOutcome reads a Connect unary error answer.
func connectErrorOutcome(t *testing.T, a answer) outcome {
	t.Helper()
	var e struct {
		Code string `json:"code"`
	}
	if err := json.Unmarshal(a.body, &e); err != nil || e.Code == "" {
		t.Fatalf("Connect HTTP %d %.300s: not a Connect error (%v)", a.code, a.body, err)
	}
	return outcome{code: connectCode(t, e.Code)}
}

// connectEndOutcome reads the end-of-stream message of a Connect stream.
func connectEndOutcome(t *testing.T, a answer) outcome {
	t.Helper()
	for b := a.body; len(b) >= 5; {
		n := binary.BigEndian.Uint32(b[1:5])
		if int(n) > len(b)-5 {
			break
		}
		if b[0]&2 != 0 {
			msg := b[5 : 5+n]
			if b[0]&1 != 0 { // compressed as the request was
				zr, err := gzip.NewReader(bytes.NewReader(msg))
				if err != nil {
					t.Fatalf("Connect end of stream: %v", err)
				}
				if msg, err = io.ReadAll(zr); err != nil {
					t.Fatalf("Connect end of stream: %v", err)
				}
			}
			var end struct {
				Error *struct {
					Code string `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(msg, &end); err != nil {
				t.Fatalf("Connect end of stream %q: %v", msg, err)
			}
			if end.Error == nil {
				return outcome{}
			}
			return outcome{code: connectCode(t, end.Error.Code)}
		}
		b = b[5+n:]
	}
	t.Fatalf("Connect stream HTTP %d %.300q: no end of stream", a.code, a.body)
	return outcome{}
}

// grpcWebOutcome reads the status of a gRPC-Web answer: in its headers
// (trailers only) or in its trailers frame.
func grpcWebOutcome(t *testing.T, a answer) outcome {
	t.Helper()
	if s := a.header.Get("Grpc-Status"); s != "" {
		n, _ := strconv.Atoi(s)
		return outcome{code: codes.Code(n)}
	}
	for b := a.body; len(b) >= 5; {
		n := binary.BigEndian.Uint32(b[1:5])
		if int(n) > len(b)-5 {
			break
		}
		if b[0]&0x80 != 0 {
			for _, line := range strings.Split(string(b[5:5+n]), "\r\n") {
				if v, ok := strings.CutPrefix(strings.ToLower(line), "grpc-status:"); ok {
					n, _ := strconv.Atoi(strings.TrimSpace(v))
					return outcome{code: codes.Code(n)}
				}
			}
		}
		b = b[5+n:]
	}
	t.Fatalf("gRPC-Web HTTP %d %.300q: no status", a.code, a.body)
	return outcome{}
}
