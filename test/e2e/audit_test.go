package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/gen/toolgate/v1/toolgatev1connect"
	"github.com/toolgate/toolgate/internal/app/apptest"
	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/eventually"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// auditLine is what the test reads of an audit log's line.
type auditLine struct {
	Event     string `json:"event"`
	Seq       int64  `json:"seq"`
	Door      string `json:"door"`
	Method    string `json:"method"`
	Tool      string `json:"tool"`
	Subject   string `json:"subject"`
	Code      string `json:"code"`
	Reason    string `json:"reason"`
	RequestID string `json:"request_id"`
	Args      string `json:"args_sha256"`
	BytesOut  int64  `json:"bytes_out"`
	Calls     int    `json:"calls"`
}

// wantLine is a call the audit log must have a line of: its door, its
// code, and its reason ("*": whichever the line has).
type wantLine struct{ door, code, reason string }

// TestAuditLog makes a mixed run of calls over every door — gRPC, REST,
// MCP, Connect, gRPC-Web, and gRPC on the HTTP listener — answered,
// refused by authentication (401), the policy (403), a quota (429) and
// the request limits (body too large, headers too large, body too slow),
// and requests that are no calls; then reads the audit log: exactly one
// line per call, with its door, code and reason, and none for the rest.
// gateway audit verify passes the log, and fails it after each kind of
// tampering, naming the line.
func TestAuditLog(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	reg := write("registry.yaml", fmt.Sprintf(`tool-service:
  echo-service: {topic: %s}
tool:
  echo: {type: tool-service, service: echo-service}
  hidden-echo: {type: tool-service, service: echo-service}
`, env.echoTopic))
	keys := write("keys.yaml", fmt.Sprintf("keys:\n  - {hash: %q, user: alice, roles: [user]}\n  - {hash: %q, user: lim, roles: [user]}\n",
		auth.HashKey(parityKey), auth.HashKey(parityLimKey)))
	policy := write("policy.yaml", "rules:\n  - {roles: [user], tools: [\"echo\"], actions: [list, invoke]}\n")
	quotas := write("quotas.yaml", "rules:\n  - {name: lim, users: [\"api-key:lim\"], tools: [\"*\"], calls: 1, per: day}\n")
	auditPath := filepath.Join(dir, "audit.log")
	var logs syncBuffer
	gw := apptest.Start(t, slog.New(slog.NewJSONHandler(&logs, nil)), "--registry", reg, "--announcements=false",
		"--pulsar-admin-url", brokertest.AdminURL(), "--api-keys", keys, "--policy", policy, "--quota-rules", quotas,
		"--body-timeout", limitBodyTimeout.String(), "--max-body-bytes", strconv.Itoa(limitBody), "--max-header-bytes", strconv.Itoa(limitHeader),
		"--audit", auditPath)
	base, adminBase := "http://"+gw.HTTPAddr(), "http://"+gw.AdminAddr()
	gw.WaitReady(t, 30*time.Second)
	conn, err := grpc.NewClient(gw.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	grpcCli := toolgatev1.NewToolServiceClient(conn)
	var h2 http.Protocols
	h2.SetUnencryptedHTTP2(true)
	h2c := &http.Client{Transport: &http.Transport{Protocols: &h2}}
	t.Cleanup(h2c.CloseIdleConnections)
	doors := []struct {
		name  string
		call  func(t *testing.T, c parityCall) outcome
		limit func(t *testing.T, k limitKind) outcome
	}{
		{"grpc", func(t *testing.T, c parityCall) outcome { return grpcParity(t, grpcCli, c) },
			func(t *testing.T, k limitKind) outcome { return grpcLimits(t, grpcCli, h2c, gw.GRPCAddr(), nil, k) }},
		{"rest", func(t *testing.T, c parityCall) outcome { return restParity(t, base, c) },
			func(t *testing.T, k limitKind) outcome { return restLimits(t, base, gw.HTTPAddr(), nil, k) }},
		{"mcp", func(t *testing.T, c parityCall) outcome { return mcpParity(t, base, c) },
			func(t *testing.T, k limitKind) outcome { return mcpLimits(t, base, gw.HTTPAddr(), nil, k) }},
		{"connect", func(t *testing.T, c parityCall) outcome {
			return connectParity(t, toolgatev1connect.NewToolServiceClient(http.DefaultClient, base), c)
		}, func(t *testing.T, k limitKind) outcome { return connectLimits(t, base, gw.HTTPAddr(), nil, k, false) }},
		{"grpc-web", func(t *testing.T, c parityCall) outcome {
			return connectParity(t, toolgatev1connect.NewToolServiceClient(http.DefaultClient, base, connect.WithGRPCWeb()), c)
		}, func(t *testing.T, k limitKind) outcome { return connectLimits(t, base, gw.HTTPAddr(), nil, k, true) }},
	}

	var want []wantLine
	expect := func(door string, got outcome, reason string) {
		want = append(want, wantLine{door, got.code.String(), reason})
	}
	// lim spends its one call of the day.
	if got := grpcParity(t, grpcCli, parityCall{key: parityLimKey, tool: "echo", args: `{"mode": "user"}`}); got.code != codes.OK {
		t.Fatalf("lim's one call: %v", got)
	}
	expect("grpc", outcome{}, "")
	calls := []struct {
		call   parityCall
		code   codes.Code
		reason string
	}{
		{parityCall{key: parityKey, tool: "echo", args: `{"mode": "user"}`}, codes.OK, ""},
		{parityCall{key: parityKey, tool: "echo", args: `{"mode": "stream", "n": 3}`, stream: true}, codes.OK, ""},
		{parityCall{key: parityKey, tool: "hidden-echo", args: `{}`}, codes.PermissionDenied, auth.ReasonNotAllowed},
		{parityCall{tool: "echo", args: `{}`}, codes.Unauthenticated, auth.ReasonMissingCredentials},
		{parityCall{key: "not-a-key-0123456789", tool: "echo", args: `{}`}, codes.Unauthenticated, auth.ReasonInvalidCredentials},
		{parityCall{key: parityLimKey, tool: "echo", args: `{}`}, codes.ResourceExhausted, "QUOTA_EXCEEDED"},
	}
	limitCalls := []struct {
		kind   limitKind
		code   codes.Code
		reason map[string]string // by door; "": none
	}{
		{oversizedBody, codes.ResourceExhausted, map[string]string{"grpc": "", "*": "BODY_TOO_LARGE"}},
		{oversizedMetadata, codes.ResourceExhausted, map[string]string{"*": "HEADERS_TOO_LARGE"}},
		{slowBody, codes.DeadlineExceeded, map[string]string{"grpc": "", "*": "BODY_TIMEOUT"}},
	}
	for _, d := range doors {
		for _, c := range calls {
			got := d.call(t, c.call)
			if got.code != c.code {
				t.Errorf("%s %+v: %v, want %v", d.name, c.call, got, c.code)
			}
			expect(d.name, got, c.reason)
		}
		for _, c := range limitCalls {
			got := d.limit(t, c.kind)
			if got.code != c.code {
				t.Errorf("%s, limit %d: %v, want %v", d.name, c.kind, got, c.code)
			}
			reason, ok := c.reason[d.name]
			if !ok {
				reason = c.reason["*"]
			}
			expect(d.name, got, reason)
		}
	}
	// Reserved metadata, refused by the gRPC server's tap.
	got := grpcParity(t, grpcCli, parityCall{key: parityKey, tool: "echo", args: `{}`, headers: map[string]string{"x-toolgate-user": "root"}})
	if got.code != codes.Unauthenticated {
		t.Errorf("reserved metadata: %v", got)
	}
	expect("grpc", got, "*")
	// gRPC on the HTTP listener (the Connect door's gRPC), with a request id.
	grpcOnHTTP := toolgatev1connect.NewToolServiceClient(h2c, base, connect.WithGRPC())
	req := connect.NewRequest(&toolgatev1.InvokeToolRequest{Name: "echo", ArgumentsJson: `{"mode": "user"}`})
	req.Header().Set("X-Api-Key", parityKey)
	req.Header().Set("X-Request-Id", "audit-e2e-1")
	if _, err := grpcOnHTTP.InvokeTool(t.Context(), req); err != nil {
		t.Fatalf("gRPC on the HTTP listener: %v", err)
	}
	expect("grpc", outcome{}, "")

	// Requests that are no calls: no line.
	for _, path := range []string{"/healthz", "/readyz", "/openapi.json", "/docs", "/v1/no-such-thing"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	initialize := postRaw(t, base+"/mcp", map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream", "X-Api-Key": parityKey},
		[]byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
	if initialize.code != http.StatusOK {
		t.Errorf("MCP initialize: %d %s", initialize.code, initialize.body)
	}
	if _, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("gRPC health: %v", err)
	}

	// Every line is written, and counted, before the gateway stops.
	if err := eventually.Within(10*time.Second, func() error {
		if n := metric(t, adminBase, "toolgate_audit_records_total"); n != float64(len(want)) {
			return fmt.Errorf("%v of %d", n, len(want))
		}
		return nil
	}); err != nil {
		t.Errorf("every call counted in toolgate_audit_records_total: %v", err)
	}
	if err := gw.Stop(); err != nil {
		t.Fatal(err)
	}

	lines := readAudit(t, auditPath)
	if first, last := lines[0], lines[len(lines)-1]; first.Event != "open" || last.Event != "close" || last.Calls != len(want) {
		t.Errorf("first line %+v, last %+v: want an open and a close line of %d calls", first, last, len(want))
	}
	var got2 []auditLine
	for _, l := range lines[1 : len(lines)-1] {
		if l.Event != "call" {
			t.Errorf("a line that is no call's: %+v", l)
			continue
		}
		got2 = append(got2, l)
		if l.Code == "OK" && (l.Subject != "api-key:alice" && l.Subject != "api-key:lim" || l.RequestID == "" || l.Args == "" || l.BytesOut == 0) {
			t.Errorf("an answered call's line lacks its subject, request id, arguments' digest or output: %+v", l)
		}
	}
	matchAudit(t, got2, want)
	if !slices.ContainsFunc(got2, func(l auditLine) bool { return l.RequestID == "audit-e2e-1" && l.Door == "grpc" }) {
		t.Error("no line has the request id the caller gave")
	}

	verifyAudit(t, auditPath, anchorOf(t, logs.String()))
}

// readAudit reads the audit log at path.
func readAudit(t *testing.T, path string) []auditLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []auditLine
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var l auditLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("%s line %d: %v", path, len(out)+1, err)
		}
		out = append(out, l)
	}
	return out
}

// matchAudit holds the call lines to the calls made: one line each, of
// its door and code, with its reason where one is wanted.
func matchAudit(t *testing.T, got []auditLine, want []wantLine) {
	t.Helper()
	left := slices.Clone(got)
	var missing []wantLine
	// Exact reasons first, then those that take any.
	order := slices.Clone(want)
	slices.SortStableFunc(order, func(a, b wantLine) int { return boolInt(a.reason == "*") - boolInt(b.reason == "*") })
	for _, w := range order {
		i := slices.IndexFunc(left, func(l auditLine) bool {
			return l.Door == w.door && l.Code == w.code && (w.reason == "*" || l.Reason == w.reason)
		})
		if i < 0 {
			missing = append(missing, w)
			continue
		}
		left = slices.Delete(left, i, i+1)
	}
	for _, w := range missing {
		t.Errorf("no line for a call on %s: %s %q", w.door, w.code, w.reason)
	}
	for _, l := range left {
		t.Errorf("a line no call made: %+v", l)
	}
	if len(got) != len(want) {
		t.Errorf("%d call lines for %d calls", len(got), len(want))
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// anchorOf is the anchor the gateway logged when it closed the audit
// log: SEQ:DIGEST.
func anchorOf(t *testing.T, logs string) string {
	t.Helper()
	for _, line := range strings.Split(logs, "\n") {
		var m struct {
			Msg  string `json:"msg"`
			Seq  int64  `json:"seq"`
			Head string `json:"head"`
		}
		if json.Unmarshal([]byte(line), &m) == nil && m.Msg == "audit log closed" {
			return fmt.Sprintf("%d:%s", m.Seq, m.Head)
		}
	}
	t.Fatalf("the gateway logged no \"audit log closed\" line:\n%s", logs)
	return ""
}

// verifyAudit runs gateway audit verify on the log as written, and on
// copies tampered with each way: changed, removed, reordered, and the
// last line changed (found by the anchor the gateway logged).
func verifyAudit(t *testing.T, path, anchor string) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "gateway")
	build := exec.Command("go", "build", "-o", bin, "./cmd/gateway")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	verify := func(file string, args ...string) (int, string) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, bin, append(append([]string{"audit", "verify"}, args...), file)...).CombinedOutput()
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			return ee.ExitCode(), string(out)
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0, string(out)
	}
	if code, out := verify(path, "--anchor", anchor); code != 0 || !strings.Contains(out, "intact") {
		t.Fatalf("the log as written: status %d\n%s", code, out)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(raw), "\n")
	lines = lines[:len(lines)-1]
	n := len(lines)
	tampered := func(ls []string) string {
		p := filepath.Join(t.TempDir(), "tampered.log")
		if err := os.WriteFile(p, []byte(strings.Join(ls, "")), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// A refusal made to look answered.
	changed := slices.Clone(lines)
	i := slices.IndexFunc(changed, func(s string) bool { return strings.Contains(s, `"code":"PermissionDenied"`) })
	changed[i] = strings.Replace(changed[i], `"code":"PermissionDenied"`, `"code":"OK"`, 1)
	swapped := slices.Clone(lines)
	swapped[10], swapped[11] = swapped[11], swapped[10]
	lastChanged := slices.Clone(lines)
	lastChanged[n-1] = strings.Replace(lastChanged[n-1], `"reason":"shutdown"`, `"reason":"rotated"`, 1)
	for _, c := range []struct {
		name  string
		lines []string
		want  string
	}{
		{"a line changed", changed, fmt.Sprintf("line %d: changed", i+1)},
		{"a line removed", slices.Delete(slices.Clone(lines), 20, 21), "line 21: a line was removed before it"},
		{"two lines reordered", swapped, "line 11: out of order"},
		{"the last line changed", lastChanged, fmt.Sprintf("line %d: changed", n)},
	} {
		code, out := verify(tampered(c.lines), "--anchor", anchor)
		if code != 1 || !strings.Contains(out, c.want) {
			t.Errorf("%s: status %d, %q; want 1 and %q", c.name, code, strings.TrimSpace(out), c.want)
		}
	}
}
