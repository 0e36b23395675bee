package audit

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// sampleLog writes a log of two runs (open, 4 calls, close each: 12
// lines) and returns its lines and the anchor the gateway logged at its
// close.
func sampleLog(t *testing.T) ([]string, Anchor) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "audit.log")
	var l *Log
	for range 2 {
		var err error
		if l, err = Open(path, Options{}); err != nil {
			t.Fatal(err)
		}
		calls(t, l, "echo", 4)
		closeLog(t, l)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	lines = lines[:len(lines)-1]
	if len(lines) != 12 {
		t.Fatalf("%d lines", len(lines))
	}
	return lines, Anchor{Seq: l.seq, Digest: l.head}
}

func verifyText(text string, anchors ...Anchor) (Result, error) {
	return Verify([]Input{{Name: "audit.log", R: strings.NewReader(text)}}, anchors)
}

// TestVerifyFindsTampering: each kind of tampering is found, at the line
// it touched, saying what it was.
func TestVerifyFindsTampering(t *testing.T) {
	lines, anchor := sampleLog(t)
	join := func(ls []string) string { return strings.Join(ls, "") }
	if res, err := verifyText(join(lines), anchor); err != nil || res.Lines != 12 || res.Calls != 8 || !res.Closed {
		t.Fatalf("the log as written: %+v, %v", res, err)
	}
	edit := func(i int, f func(string) string) []string {
		ls := slices.Clone(lines)
		ls[i] = f(ls[i])
		return ls
	}
	removed := func(i int) []string { return slices.Delete(slices.Clone(lines), i, i+1) }
	swapped := func(i, j int) []string {
		ls := slices.Clone(lines)
		ls[i], ls[j] = ls[j], ls[i]
		return ls
	}
	for _, c := range []struct {
		name    string
		lines   []string
		anchors []Anchor
		line    int // the line reported
		what    string
	}{
		{"a call's code changed", edit(3, func(s string) string { return strings.Replace(s, `"code":"PermissionDenied"`, `"code":"OK"`, 1) }), nil,
			4, "changed: its digest is not the one line 5 names"},
		{"a call's tool changed", edit(1, func(s string) string { return strings.Replace(s, `"tool":"echo"`, `"tool":"ech0"`, 1) }), nil,
			2, "changed"},
		{"a line's prev changed", edit(2, func(s string) string { return s[:9] + other(s[9]) + s[10:] }), nil,
			3, "changed: its prev is not the digest of line 2"},
		{"a seq changed", edit(4, func(s string) string { return strings.Replace(s, `"seq":5,`, `"seq":6,`, 1) }), nil,
			5, "changed: its seq is 6"},
		{"a call removed", removed(3), nil, 4, "a line was removed before it (seq 4)"},
		{"two calls removed", slices.Delete(slices.Clone(lines), 2, 4), nil, 3, "2 lines were removed before it (seq 3 to 4)"},
		{"two calls swapped", swapped(2, 3), nil, 3, "out of order: seq 4 comes before seq 3 (audit.log line 4)"},
		{"a line moved back", append(slices.Clone(lines[:5]), append([]string{lines[8]}, lines[5:8]...)...), nil, 6, "out of order"},
		{"a call repeated", slices.Insert(slices.Clone(lines), 3, lines[2]), nil, 4, "out of order: seq 3 after seq 3"},
		{"the first line removed", removed(0), nil, 1, "does not begin with an open line"},
		{"a restart's open line removed", removed(6), nil, 7, "a line was removed before it"},
		{"a line replaced by other text", edit(5, func(string) string { return "hello\n" }), nil, 6, "not an audit line"},
		{"the last line changed, an anchor at it", edit(11, func(s string) string { return strings.Replace(s, `"calls":4`, `"calls":3`, 1) }), []Anchor{anchor},
			12, "changed: seq 12's digest is"},
		{"the last line removed, an anchor at it", lines[:11], []Anchor{anchor}, 0, "no line 12"},
		{"the last line removed, an anchor's digest alone", lines[:11], []Anchor{{Digest: anchor.Digest}}, 0, "is not the digest of any line"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := verifyText(join(c.lines), c.anchors...)
			var p *Problem
			if !errors.As(err, &p) {
				t.Fatalf("verify: %v, want a problem at line %d", err, c.line)
			}
			if p.Line != c.line || !strings.Contains(p.What, c.what) {
				t.Errorf("problem %v, want line %d: %q", p, c.line, c.what)
			}
		})
	}
	// Without an anchor, what was cut from the end cannot be told from a
	// log still being written: the chain is intact, and says it is not
	// closed.
	if res, err := verifyText(join(lines[:10])); err != nil || res.Closed || res.Last != 10 {
		t.Errorf("the last two lines cut: %+v, %v", res, err)
	}
}

// TestVerifyAcrossFiles: files verify in order as one chain; a missing
// file is found.
func TestVerifyAcrossFiles(t *testing.T) {
	lines, _ := sampleLog(t)
	a, b := strings.Join(lines[:6], ""), strings.Join(lines[6:], "")
	in := func(texts ...string) []Input {
		var out []Input
		for i, s := range texts {
			out = append(out, Input{Name: string(rune('a' + i)), R: strings.NewReader(s)})
		}
		return out
	}
	if res, err := Verify(in(a, b), nil); err != nil || res.Lines != 12 {
		t.Errorf("a, b: %+v, %v", res, err)
	}
	if res, err := Verify(in(b), nil); err != nil || res.Start == Genesis {
		t.Errorf("b alone: %+v, %v; want it to continue a chain", res, err)
	}
	var p *Problem
	if _, err := Verify(in(b, a), nil); !errors.As(err, &p) || p.File != "b" {
		t.Errorf("b, a: %v", err)
	}
	if _, err := Verify(in(a, a), nil); !errors.As(err, &p) || p.File != "b" || !strings.Contains(p.What, "does not continue a") {
		t.Errorf("a, a: %v", err)
	}
	if _, err := Verify(in(""), nil); !errors.As(err, &p) {
		t.Errorf("an empty file: %v", err)
	}
}

// TestVerifyRestartsOnStdout: a gateway writing to its standard output
// starts a chain of its own at each start; the chains verify one after
// the other, and are counted.
func TestVerifyRestartsOnStdout(t *testing.T) {
	lines, _ := sampleLog(t)
	// Two runs, the second unable to read where the first ended: the
	// same lines again make a fine second chain.
	run := strings.Join(lines[:6], "")
	res, err := verifyText(run + run)
	if err != nil || res.Chains != 2 || res.Lines != 12 {
		t.Errorf("two runs on the standard output: %+v, %v", res, err)
	}
	// Within a chain, a line removed is found as ever.
	second := run
	var p *Problem
	if _, err := verifyText(strings.Join(lines[:2], "") + strings.Join(lines[3:6], "") + second); !errors.As(err, &p) || p.Line != 3 {
		t.Errorf("a line removed in the first chain: %v", err)
	}
}

// TestParseAnchor reads anchors as the gateway logs them.
func TestParseAnchor(t *testing.T) {
	d := strings.Repeat("ab", 32)
	if a, err := ParseAnchor("12:" + d); err != nil || a.Seq != 12 || a.Digest.String() != d {
		t.Errorf("SEQ:DIGEST: %+v, %v", a, err)
	}
	if a, err := ParseAnchor(d); err != nil || a.Seq != 0 {
		t.Errorf("DIGEST: %+v, %v", a, err)
	}
	for _, bad := range []string{"", "12", "x:" + d, "0:" + d, d[:10], "12:" + d + "00"} {
		if _, err := ParseAnchor(bad); err == nil {
			t.Errorf("ParseAnchor(%q) took it", bad)
		}
	}
}

// other is a hex digit other than c.
func other(c byte) string {
	if c == '0' {
		return "f"
	}
	return "0"
}
