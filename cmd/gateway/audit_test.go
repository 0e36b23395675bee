package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/audit"
	"github.com/toolgate/toolgate/internal/toolcall"
)

// writeLog writes an audit log of three calls and returns its path and
// its lines.
func writeLog(t *testing.T) (string, []string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := audit.Open(path, audit.Options{Instance: "gw"})
	if err != nil {
		t.Fatal(err)
	}
	h := toolcall.Chain(func(context.Context, *toolcall.Call, toolcall.Emit) (toolcall.Result, error) {
		return toolcall.Result{Output: "ok"}, nil
	}, l.Middleware())
	for range 3 {
		if _, err := h(context.Background(), &toolcall.Call{Op: toolcall.OpInvoke, Name: "echo", Header: toolcall.NoHeader}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, strings.SplitAfter(strings.TrimSuffix(string(b), "\n"), "\n")
}

func runVerify(args ...string) (int, string, string) {
	var out, errs bytes.Buffer
	code := runAudit(append([]string{"verify"}, args...), strings.NewReader(""), &out, &errs)
	return code, out.String(), errs.String()
}

// TestAuditVerify: gateway audit verify passes a log as written, and
// fails one tampered with, naming the line and what is wrong.
func TestAuditVerify(t *testing.T) {
	path, lines := writeLog(t)
	code, out, _ := runVerify(path)
	if code != auditIntact || !strings.Contains(out, "intact: 5 lines (seq 1 to 5), 3 calls") || !strings.Contains(out, "ends with a close line") {
		t.Fatalf("as written: %d %q", code, out)
	}
	tampered := func(ls []string) string {
		p := filepath.Join(t.TempDir(), "tampered.log")
		if err := os.WriteFile(p, []byte(strings.Join(ls, "")), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		name  string
		lines []string
		want  string
	}{
		{"changed", []string{lines[0], lines[1], strings.Replace(lines[2], `"tool":"echo"`, `"tool":"rm"`, 1), lines[3], lines[4]}, "line 3: changed"},
		{"removed", []string{lines[0], lines[1], lines[3], lines[4]}, "line 3: a line was removed before it"},
		{"reordered", []string{lines[0], lines[2], lines[1], lines[3], lines[4]}, "line 2: out of order"},
	} {
		code, out, _ := runVerify(tampered(c.lines))
		if code != auditTampered || !strings.Contains(out, "TAMPERED: ") || !strings.Contains(out, c.want) {
			t.Errorf("%s: %d %q, want %q", c.name, code, out, c.want)
		}
	}
	// The last line changed: found with the anchor the gateway logged.
	last := []string{lines[0], lines[1], lines[2], lines[3], strings.Replace(lines[4], `"calls":3`, `"calls":2`, 1)}
	res, err := audit.Verify([]audit.Input{{Name: path, R: strings.NewReader(strings.Join(lines, ""))}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	anchor := "5:" + res.Head.String()
	if code, out, _ := runVerify(tampered(last)); code != auditIntact {
		t.Errorf("the last line changed, no anchor: %d %q (the chain alone cannot tell)", code, out)
	}
	if code, out, _ := runVerify("--anchor", anchor, tampered(last)); code != auditTampered || !strings.Contains(out, "line 5: changed") {
		t.Errorf("the last line changed, with its anchor: %d %q", code, out)
	}
	if code, out, _ := runVerify("--anchor", anchor, path); code != auditIntact || !strings.Contains(out, "1 anchors found") {
		t.Errorf("as written, with its anchor: %d %q", code, out)
	}
}

// TestAuditUsage: bad arguments and unreadable files are status 2,
// saying why.
func TestAuditUsage(t *testing.T) {
	for _, args := range [][]string{nil, {"check"}, {"verify"}, {"verify", "--anchor", "nope", "x"}, {"verify", filepath.Join(t.TempDir(), "none")}} {
		var out, errs bytes.Buffer
		if code := runAudit(args, strings.NewReader(""), &out, &errs); code != auditUsage || errs.Len() == 0 {
			t.Errorf("gateway audit %q: %d, stderr %q", args, code, errs.String())
		}
	}
	path, _ := writeLog(t)
	b, _ := os.ReadFile(path)
	var out bytes.Buffer
	if code := runAudit([]string{"verify", "-"}, bytes.NewReader(b), &out, &out); code != auditIntact {
		t.Errorf("from the standard input: %d %q", code, out.String())
	}
}
