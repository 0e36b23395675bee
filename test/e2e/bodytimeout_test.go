package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSlowRequestBody: a client that sends its body 1 byte at a time more
// slowly than --body-timeout gets 408 with a JSON Status and the
// connection closed, with a Content-Length and chunked; a streamed
// response longer than the timeout is not cut. (MCP is served stateless:
// GET /mcp is 405, there is no GET stream to cut.)
func TestSlowRequestBody(t *testing.T) {
	t.Parallel()
	const limit = time.Second
	reg := filepath.Join(t.TempDir(), "registry.yaml")
	if err := os.WriteFile(reg, []byte(reloadRegistry("echo")), 0o644); err != nil {
		t.Fatal(err)
	}
	gw := runGateway(t, nil, "--registry", reg, "--announcements=false", "--allow-anonymous", "--body-timeout", limit.String())
	base := "http://" + gw.HTTPAddr()
	if err := waitReady(base, 60*time.Second); err != nil {
		t.Fatal(err)
	}

	body := `{"arguments": {"msg": "slow"}}`
	for _, framing := range []string{"Content-Length: " + fmt.Sprint(len(body)), "Transfer-Encoding: chunked"} {
		t.Run(framing, func(t *testing.T) {
			conn, err := net.Dial("tcp", gw.HTTPAddr())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			start := time.Now()
			fmt.Fprintf(conn, "POST /v1/tools/echo:invoke HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%s\r\n\r\n", framing)
			// One byte now, the next only once the server answered (it
			// answers at the limit; that write may fail, which is fine).
			if strings.HasPrefix(framing, "Transfer") {
				fmt.Fprintf(conn, "1\r\n%s\r\n", body[:1])
			} else {
				fmt.Fprint(conn, body[:1])
			}
			_ = conn.SetReadDeadline(time.Now().Add(8 * time.Second))
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("no answer %v after the slow body started: %v", time.Since(start), err)
			}
			answered := time.Now()
			_, _ = conn.Write([]byte(body[1:2])) // the next byte, after the answer
			raw, _ := io.ReadAll(resp.Body)
			var st struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			}
			if resp.StatusCode != http.StatusRequestTimeout || json.Unmarshal(raw, &st) != nil || st.Code != 4 {
				t.Fatalf("HTTP %d %q, want 408 with a JSON Status code 4", resp.StatusCode, raw)
			}
			if answered.Before(start.Add(limit)) {
				t.Errorf("answered %v after the body started, before its limit %v", answered.Sub(start), limit)
			}
			// The connection is closed: nothing more can be read.
			if _, err := br.ReadByte(); err == nil {
				t.Error("the connection stayed open after the 408")
			}
			t.Logf("408 after %v: %s", answered.Sub(start).Round(time.Millisecond), st.Message)
		})
	}

	t.Run("long stream", func(t *testing.T) {
		// 30 chunks 100 ms apart: three times the body timeout.
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/tools/echo:stream", strings.NewReader(`{"arguments": {"mode": "stream", "n": 30, "gap_ms": 100}}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		n := 0
		for sc.Scan() {
			var l streamLine
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil || l.Code != nil {
				t.Fatalf("line %d: %s (%v)", n, sc.Text(), err)
			}
			n++
		}
		if n != 30 || sc.Err() != nil {
			t.Fatalf("%d chunks (%v), want 30", n, sc.Err())
		}
	})

}
