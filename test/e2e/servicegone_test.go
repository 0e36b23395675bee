package e2e

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/brokertest"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

// callTimeout is the calls' deadline: a call in flight whose service is
// killed ends UNAVAILABLE well before it, not DEADLINE_EXCEEDED at it.
const callTimeout = "10s"

// callEnd is how a call in flight ended: its gRPC code and ErrorInfo
// reason, and when.
type callEnd struct {
	via    string
	code   codes.Code
	reason string
	msg    string
	at     time.Time
	// retry: the status has a RetryInfo; retryAfter: the Retry-After
	// header of a REST answer.
	retry      bool
	retryAfter string
}

// TestServiceKilledMidCall kills tool service processes with SIGKILL while
// calls to them are in flight — the Go echo service in the middle of
// streams (REST NDJSON, SSE, gRPC) and of a unary call, and TrustGraph's
// Python joke-service holding unanswered calls (REST, gRPC) — and expects
// every such call to end with UNAVAILABLE within 3 s: INSTANCE_LOST for
// the Go service's streams (their instance named itself on their chunks:
// it is known to have taken them, and they may have run in part),
// SERVICE_GONE for the calls no instance has spoken for — the Go unary
// call (no receipt is asked for while hedging is off) and the Python
// service's; not
// at its 30 s deadline.
func TestServiceKilledMidCall(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "echo-service")
	build := exec.Command("go", "build", "-o", bin, "./cmd/echo-service")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	echoTopic, pyTopic := brokertest.UniqueTopic("killed-echo"), brokertest.UniqueTopic("killed-pyjoke")
	reg := filepath.Join(dir, "registry.yaml")
	if err := os.WriteFile(reg, fmt.Appendf(nil, `tool-service:
  killed-echo: {topic: %s}
  killed-py: {topic: %s, config-params: [{name: style}]}
tool:
  killed-echo: {type: tool-service, service: killed-echo}
  killed-py: {type: tool-service, service: killed-py, style: pun, arguments: [{name: topic, type: string}]}
`, echoTopic, pyTopic), 0o644); err != nil {
		t.Fatal(err)
	}
	gw := runGateway(t, nil, "--pulsar-admin-url", brokertest.AdminURL(), "--registry", reg, "--announcements=false",
		"--allow-anonymous", "--default-timeout", callTimeout)
	base := "http://" + gw.HTTPAddr()
	if err := waitReady(base, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(gw.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := toolgatev1.NewToolServiceClient(conn)

	t.Run("go echo service, mid-stream", func(t *testing.T) {
		svc := exec.Command(bin, "--pulsar-url", brokertest.PulsarURL(), "--topic", echoTopic, "--announce=false")
		var logs strings.Builder
		svc.Stdout, svc.Stderr = &logs, &logs
		if err := svc.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { _ = svc.Wait(); close(exited) }()
		t.Cleanup(func() {
			_ = svc.Process.Kill()
			<-exited
			if t.Failed() {
				t.Logf("echo service log:\n%s", logs.String())
			}
		})
		if err := waitSubscribed("non-persistent://tg/request/"+echoTopic, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		stream := `{"arguments": {"mode": "stream", "n": 100000, "gap_ms": 50}}`
		calls := []func(chunked chan<- string) callEnd{
			func(chunked chan<- string) callEnd {
				return restStreamUntilEnd(t, base, "killed-echo", stream, "", chunked)
			},
			func(chunked chan<- string) callEnd {
				return restStreamUntilEnd(t, base, "killed-echo", stream, "text/event-stream", chunked)
			},
			func(chunked chan<- string) callEnd { return grpcStreamUntilEnd(t, client, "killed-echo", chunked) },
			func(chunked chan<- string) callEnd {
				chunked <- "gRPC unary (sent)"
				return grpcInvokeUntilEnd(t, client, "killed-echo", map[string]any{"mode": "sleep", "ms": 60000.0})
			},
		}
		want := map[string]string{"gRPC unary": "SERVICE_GONE"}
		killMidCalls(t, calls, func(via string) string { return cmp.Or(want[via], "INSTANCE_LOST") }, func() { _ = svc.Process.Signal(syscall.SIGKILL) })
	})

	t.Run("python joke service, calls unanswered", func(t *testing.T) {
		p := interopStartPython(t, "joke-service", "non-persistent://tg/request/"+pyTopic,
			"joke-service", "-p", brokertest.PulsarURL(), "--id", brokertest.UniqueTopic("toolgate-e2e-killed"),
			"-t", pyTopic, "--no-metrics", "--no-loki-enabled")
		// Stopped, the process keeps its broker connection, so its
		// consumer stays and takes the requests; it answers none of them
		// before it is killed.
		if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		calls := []func(chunked chan<- string) callEnd{
			func(chunked chan<- string) callEnd {
				chunked <- "REST unary (sent)"
				return restInvokeUntilEnd(t, base, "killed-py", `{"arguments": {"topic": "pulsar"}}`)
			},
			func(chunked chan<- string) callEnd {
				chunked <- "gRPC unary (sent)"
				return grpcInvokeUntilEnd(t, client, "killed-py", map[string]any{"topic": "pulsar"})
			},
		}
		killMidCalls(t, calls, func(string) string { return "SERVICE_GONE" }, func() { _ = p.cmd.Process.Signal(syscall.SIGKILL) })
	})
}

// killMidCalls starts the calls, waits until each has sent word that it is
// under way (a first chunk, or its request sent) and the watch has seen
// them, kills the service, and checks every call ends UNAVAILABLE with
// the reason want gives for it, before their deadline (callTimeout).
func killMidCalls(t *testing.T, calls []func(chunked chan<- string) callEnd, want func(via string) string, kill func()) {
	t.Helper()
	chunked := make(chan string, len(calls))
	ends := make(chan callEnd, len(calls))
	for _, c := range calls {
		go func() { ends <- c(chunked) }()
	}
	for range calls {
		select {
		case via := <-chunked:
			t.Logf("%s: under way", via)
		case e := <-ends:
			t.Fatalf("%s ended before the kill: %v %s %q", e.via, e.code, e.reason, e.msg)
		case <-time.After(20 * time.Second):
			t.Fatal("the calls were not under way after 20 s")
		}
	}
	time.Sleep(1500 * time.Millisecond) //nolint:forbidigo // the watch (every 1 s; its questions not observable here) sees the service's consumer before the kill
	killed := time.Now()
	kill()
	for range calls {
		select {
		case e := <-ends:
			took := e.at.Sub(killed)
			t.Logf("%s: %v %s %v after the kill: %s", e.via, e.code, e.reason, took.Round(time.Millisecond), e.msg)
			if w := want(e.via); e.code != codes.Unavailable || e.reason != w {
				t.Errorf("%s ended with %v %s %q, want UNAVAILABLE %s", e.via, e.code, e.reason, e.msg, w)
			}
		case <-time.After(25 * time.Second):
			t.Fatal("calls still running 25 s after their service was killed")
		}
	}
}

// restStreamUntilEnd reads a REST stream (NDJSON, or SSE when accept says
// so) to its end, telling chunked about the first chunk.
func restStreamUntilEnd(t *testing.T, base, tool, body, accept string, chunked chan<- string) callEnd {
	via := "REST NDJSON stream"
	if accept != "" {
		via = "REST SSE stream"
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/v1/tools/"+tool+":stream", strings.NewReader(body))
	if err != nil {
		return callEnd{via: via, code: codes.Internal, msg: err.Error(), at: time.Now()}
	}
	req.Header.Set("Content-Type", "application/json")
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return callEnd{via: via, code: codes.Internal, msg: err.Error(), at: time.Now()}
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	first := true
	for sc.Scan() {
		line := sc.Text()
		if accept != "" {
			data, ok := strings.CutPrefix(line, "data: ")
			if !ok {
				continue
			}
			line = data
		}
		var l streamLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			return callEnd{via: via, code: codes.Internal, msg: "bad line " + line, at: time.Now()}
		}
		if l.Code != nil {
			return callEnd{via: via, code: codes.Code(*l.Code), reason: detailReason(l.Details), msg: l.Message, at: time.Now(),
				retry: hasRetryInfo(l.Details)}
		}
		if first {
			first = false
			chunked <- via
		}
	}
	return callEnd{via: via, code: codes.Internal, msg: fmt.Sprintf("stream ended without a status (%v)", sc.Err()), at: time.Now()}
}

// restInvokeUntilEnd makes a REST unary call.
func restInvokeUntilEnd(t *testing.T, base, tool, body string) callEnd {
	const via = "REST unary"
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/v1/tools/"+tool+":invoke", strings.NewReader(body))
	if err != nil {
		return callEnd{via: via, code: codes.Internal, msg: err.Error(), at: time.Now()}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return callEnd{via: via, code: codes.Internal, msg: err.Error(), at: time.Now()}
	}
	defer resp.Body.Close()
	var st streamLine
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || st.Code == nil {
		return callEnd{via: via, code: codes.OK, msg: fmt.Sprintf("HTTP %d (%v)", resp.StatusCode, err), at: time.Now()}
	}
	return callEnd{via: via, code: codes.Code(*st.Code), reason: detailReason(st.Details), msg: st.Message, at: time.Now(),
		retry: hasRetryInfo(st.Details), retryAfter: resp.Header.Get("Retry-After")}
}

func detailReason(details []map[string]any) string {
	for _, d := range details {
		if r, ok := d["reason"].(string); ok {
			return r
		}
	}
	return ""
}

func hasRetryInfo(details []map[string]any) bool {
	for _, d := range details {
		if d["@type"] == "type.googleapis.com/google.rpc.RetryInfo" {
			return true
		}
	}
	return false
}

func grpcStreamUntilEnd(t *testing.T, client toolgatev1.ToolServiceClient, tool string, chunked chan<- string) callEnd {
	const via = "gRPC stream"
	args, _ := structpb.NewStruct(map[string]any{"mode": "stream", "n": 100000.0, "gap_ms": 50.0})
	s, err := client.StreamTool(t.Context(), &toolgatev1.StreamToolRequest{Name: tool, Arguments: args})
	var once sync.Once
	for err == nil {
		if _, err = s.Recv(); err == nil {
			once.Do(func() { chunked <- via })
		}
	}
	return grpcEnd(via, err)
}

func grpcInvokeUntilEnd(t *testing.T, client toolgatev1.ToolServiceClient, tool string, a map[string]any) callEnd {
	args, _ := structpb.NewStruct(a)
	_, err := client.InvokeTool(t.Context(), &toolgatev1.InvokeToolRequest{Name: tool, Arguments: args})
	return grpcEnd("gRPC unary", err)
}

func grpcEnd(via string, err error) callEnd {
	st := status.Convert(err)
	e := callEnd{via: via, code: st.Code(), msg: st.Message(), at: time.Now()}
	if info := errorInfo(st); info != nil {
		e.reason = info.GetReason()
	}
	for _, d := range st.Details() {
		if _, ok := d.(*errdetails.RetryInfo); ok {
			e.retry = true
		}
	}
	return e
}
