package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestUnsupportedContentEncoding: a body in an encoding the gateway does
// not decode is 415 on REST and MCP, naming the encodings it does
// (RFC 9110 §15.5.16), with the door's own error body; gzip and identity
// are taken.
func TestUnsupportedContentEncoding(t *testing.T) {
	reg := filepath.Join(t.TempDir(), "registry.yaml")
	if err := os.WriteFile(reg, []byte(fmt.Sprintf("tool-service:\n  echo-service: {topic: %s}\ntool:\n  echo: {type: tool-service, service: echo-service}\n", env.echoTopic)), 0o600); err != nil {
		t.Fatal(err)
	}
	gw := runGateway(t, nil, "--registry", reg, "--allow-anonymous", "--announcements=false")
	base := "http://" + gw.HTTPAddr()
	if err := waitReady(base, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	doors := []struct {
		name, path, body string
		header           map[string]string
		// reason finds the refusal's reason in the door's error body.
		reason func(body map[string]any) string
	}{
		{"rest", "/v1/tools/echo:invoke", `{"arguments": {"text": "hi"}}`, nil, func(b map[string]any) string {
			ds, _ := b["details"].([]any)
			for _, d := range ds {
				if m, _ := d.(map[string]any); m["reason"] != nil {
					return fmt.Sprint(m["reason"])
				}
			}
			return ""
		}},
		{"mcp", "/mcp", `{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}`,
			map[string]string{"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}, func(b map[string]any) string {
				e, _ := b["error"].(map[string]any)
				d, _ := e["data"].(map[string]any)
				return fmt.Sprint(d["reason"])
			}},
	}
	for _, d := range doors {
		for _, enc := range []string{"br", "zstd", "deflate", "compress"} {
			t.Run(d.name+"/"+enc, func(t *testing.T) {
				req, _ := http.NewRequest(http.MethodPost, base+d.path, strings.NewReader(d.body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Content-Encoding", enc)
				for k, v := range d.header {
					req.Header.Set(k, v)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				var body map[string]any
				_ = json.NewDecoder(resp.Body).Decode(&body)
				if resp.StatusCode != http.StatusUnsupportedMediaType || resp.Header.Get("Accept-Encoding") != "gzip, identity" {
					t.Fatalf("HTTP %d, Accept-Encoding %q, %v; want 415 naming gzip, identity", resp.StatusCode, resp.Header.Get("Accept-Encoding"), body)
				}
				if r := d.reason(body); r != "UNSUPPORTED_CONTENT_ENCODING" {
					t.Fatalf("reason %q in %v, want UNSUPPORTED_CONTENT_ENCODING", r, body)
				}
			})
		}
		t.Run(d.name+"/identity", func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, base+d.path, strings.NewReader(d.body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Content-Encoding", "identity")
			for k, v := range d.header {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("Content-Encoding: identity: HTTP %d, want 200", resp.StatusCode)
			}
		})
	}
}
