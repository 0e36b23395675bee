package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/gen/toolgate/v1/toolgatev1connect"
	"github.com/toolgate/toolgate/internal/brokertest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// exactNumbers are JSON numbers a float64 would change: past 2^53, a
// negative zero, one below the smallest double, a trailing zero.
var exactNumbers = []string{"9007199254740993", "123456789012345678", "-0.0", "1e-400", "1.10"}

// exactArgs is a JSON object holding exactNumbers as "na", "nb", ….
func exactArgs() string {
	var args strings.Builder
	args.WriteString("{")
	for i, n := range exactNumbers {
		if i > 0 {
			args.WriteString(", ")
		}
		args.WriteString(`"n` + string(rune('a'+i)) + `": ` + n)
	}
	args.WriteString("}")
	return args.String()
}

// checkExact fails unless text holds every number of exactArgs as written
// (spaces between tokens aside: the gateway passes arguments on compacted).
func checkExact(t *testing.T, door, text string) {
	t.Helper()
	compact := strings.ReplaceAll(text, " ", "")
	for i, n := range exactNumbers {
		if want := `"n` + string(rune('a'+i)) + `":` + n; !strings.Contains(compact, want) {
			t.Errorf("%s: the service saw %s; want %s in it", door, text, want)
		}
	}
}

// numberDoors calls tool with exactArgs through every door of the gateway
// at base (HTTP) and grpcAddr and hands each answer's text to check. gRPC,
// Connect and gRPC-Web send the arguments as arguments_json: a
// google.protobuf.Struct would carry the numbers as doubles.
func numberDoors(t *testing.T, base, grpcAddr, tool string, check func(t *testing.T, door, output string)) {
	args := exactArgs()
	t.Run("rest", func(t *testing.T) {
		resp, err := http.Post(base+"/v1/tools/"+tool+":invoke", "application/json", strings.NewReader(`{"arguments": `+args+`}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var out struct{ Output string }
		if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &out) != nil {
			t.Fatalf("HTTP %d %s", resp.StatusCode, raw)
		}
		check(t, "REST", out.Output)
	})
	t.Run("mcp", func(t *testing.T) {
		body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"` + tool + `","arguments":` + args + `}}`
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		_, data, ok := bytes.Cut(raw, []byte("data: "))
		var msg struct {
			Result struct {
				Content []struct{ Text string } `json:"content"`
			} `json:"result"`
		}
		if !ok || json.Unmarshal(bytes.TrimSpace(data), &msg) != nil || len(msg.Result.Content) != 1 {
			t.Fatalf("MCP answer %s", raw)
		}
		check(t, "MCP", msg.Result.Content[0].Text)
	})
	t.Run("grpc", func(t *testing.T) {
		conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		res, err := toolgatev1.NewToolServiceClient(conn).InvokeTool(t.Context(), &toolgatev1.InvokeToolRequest{Name: tool, ArgumentsJson: args})
		if err != nil {
			t.Fatal(err)
		}
		check(t, "gRPC", res.GetOutput())
	})
	for _, door := range []struct {
		name string
		opts []connect.ClientOption
	}{{"connect", nil}, {"grpc-web", []connect.ClientOption{connect.WithGRPCWeb()}}} {
		t.Run(door.name, func(t *testing.T) {
			cli := toolgatev1connect.NewToolServiceClient(http.DefaultClient, base, door.opts...)
			stream, err := cli.StreamTool(t.Context(), connect.NewRequest(&toolgatev1.StreamToolRequest{Name: tool, ArgumentsJson: args}))
			if err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			for stream.Receive() {
				out.WriteString(stream.Msg().GetOutput())
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			check(t, door.name, out.String())
		})
	}
}

// TestNumbersExactly: JSON numbers reach the Go tool service exactly as
// the caller wrote them through every door, and the Go SDK hands them to
// the handler unchanged (the echo service answers with its arguments).
func TestNumbersExactly(t *testing.T) {
	t.Parallel()
	numberDoors(t, env.httpBase, env.gw.GRPCAddr(), "echo", checkExact)
}

// TestNumbersExactlyPython: the same numbers through every door reach a
// TrustGraph Python service (test/python/numbers_service.py) as the text
// the caller wrote, and its integers are exact after Python's json.loads.
func TestNumbersExactlyPython(t *testing.T) {
	t.Parallel()
	topic := brokertest.UniqueTopic("pynumbers")
	interopStartPython(t, "numbers-service", "non-persistent://tg/request/"+topic,
		"python", "test/python/numbers_service.py", "-p", brokertest.PulsarURL(),
		"--id", brokertest.UniqueTopic("toolgate-e2e-pynumbers"), "-t", topic, "--no-metrics", "--no-loki-enabled")
	reg := filepath.Join(t.TempDir(), "registry.yaml")
	yaml := fmt.Sprintf("tool-service:\n  py-numbers-service: {topic: %s}\ntool:\n  py-numbers: {type: tool-service, service: py-numbers-service}\n", topic)
	if err := os.WriteFile(reg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	gw := runGateway(t, nil, "--registry", reg, "--allow-anonymous")
	base := "http://" + gw.HTTPAddr()
	if err := waitReady(base, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	numberDoors(t, base, gw.GRPCAddr(), "py-numbers", func(t *testing.T, door, output string) {
		t.Helper()
		var seen struct {
			Raw  string            `json:"raw"`
			Ints map[string]string `json:"ints"`
		}
		if err := json.Unmarshal([]byte(output), &seen); err != nil {
			t.Fatalf("%s: the service answered %q: %v", door, output, err)
		}
		checkExact(t, door, seen.Raw)
		if seen.Ints["na"] != exactNumbers[0] || seen.Ints["nb"] != exactNumbers[1] {
			t.Errorf("%s: Python's integers %v; want na=%s nb=%s", door, seen.Ints, exactNumbers[0], exactNumbers[1])
		}
	})
}
