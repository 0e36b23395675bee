package e2e

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestBufCurl calls the running gateway with buf curl, a client that knows
// only the protos, over the Connect protocol, gRPC-Web and gRPC: list,
// invoke and stream through the Connect door on the HTTP listener. The
// listener has no TLS, so gRPC goes over HTTP/2 with prior knowledge (h2c).
func TestBufCurl(t *testing.T) {
	root := repoRoot(t)
	// buf curl reads the schema from the workspace: the google/api protos
	// must be beside ours (scripts/googleapis.sh is idempotent).
	prep := exec.CommandContext(t.Context(), "scripts/googleapis.sh")
	prep.Dir = root
	if out, err := prep.CombinedOutput(); err != nil {
		t.Fatalf("scripts/googleapis.sh: %v\n%s", err, out)
	}
	curl := func(t *testing.T, protocol, method, body string) []byte {
		t.Helper()
		args := []string{"tool", "-modfile=tools/buf/go.mod", "buf", "curl",
			"--protocol", protocol, "--schema", ".", "--timeout", (30 * time.Second).String()}
		if protocol == "grpc" {
			args = append(args, "--http2-prior-knowledge")
		}
		cmd := exec.CommandContext(t.Context(), "go", append(args, env.httpBase+"/toolgate.v1.ToolService/"+method, "-d", body)...)
		cmd.Dir = root
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("buf curl --protocol %s %s: %v\n%s", protocol, method, err, stderr.String())
		}
		return out
	}
	for _, protocol := range []string{"connect", "grpcweb", "grpc"} {
		t.Run(protocol, func(t *testing.T) {
			var list struct {
				Tools []struct{ Name string } `json:"tools"`
			}
			if out := curl(t, protocol, "ListTools", `{}`); json.Unmarshal(out, &list) != nil || len(list.Tools) == 0 {
				t.Fatalf("ListTools: %s", out)
			}
			found := false
			for _, tl := range list.Tools {
				found = found || tl.Name == "echo"
			}
			if !found {
				t.Fatalf("echo not listed: %+v", list.Tools)
			}
			var inv struct{ Output string }
			out := curl(t, protocol, "InvokeTool", `{"name": "echo", "arguments": {"msg": "hello over `+protocol+`"}}`)
			if json.Unmarshal(out, &inv) != nil || !strings.Contains(inv.Output, "hello over "+protocol) {
				t.Fatalf("InvokeTool: %s", out)
			}
			// A stream: buf curl prints each message as a JSON document.
			out = curl(t, protocol, "StreamTool", `{"name": "echo", "arguments": {"mode": "stream", "n": 4}}`)
			dec := json.NewDecoder(bytes.NewReader(out))
			var chunks []string
			for dec.More() {
				var m struct{ Output string }
				if err := dec.Decode(&m); err != nil {
					t.Fatalf("StreamTool output %s: %v", out, err)
				}
				chunks = append(chunks, m.Output)
			}
			if strings.Join(chunks, "") != "0,1,2,3" || len(chunks) != 4 {
				t.Fatalf("StreamTool chunks %q", chunks)
			}
		})
	}
}
