package audit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/grpc/codes"
)

// calls runs n calls of tool through l's middleware: invokes answering
// "out", every third refused.
func calls(t testing.TB, l *Log, tool string, n int) {
	t.Helper()
	h := toolcall.Chain(func(_ context.Context, c *toolcall.Call, _ toolcall.Emit) (toolcall.Result, error) {
		if c.RequestID == "" {
			c.RequestID = "r"
		}
		if strings.HasSuffix(c.Name, "-refused") {
			return toolcall.Result{}, toolcall.GatewayError(codes.PermissionDenied, "TOOL_DENIED", "no", nil)
		}
		return toolcall.Result{Output: "out"}, nil
	}, l.Middleware())
	for i := range n {
		name := tool
		if i%3 == 2 {
			name += "-refused"
		}
		c := &toolcall.Call{Op: toolcall.OpInvoke, Name: name, Args: []byte(`{"i": ` + fmt.Sprint(i) + `}`), Header: toolcall.NoHeader}
		if _, err := h(context.Background(), c, nil); err != nil && !strings.HasSuffix(name, "-refused") {
			t.Fatal(err)
		}
	}
}

// readLog is the lines of the file at path, decoded.
func readLog(t testing.TB, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for i, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("%s line %d: %v: %q", path, i+1, err, line)
		}
		out = append(out, m)
	}
	return out
}

// events is the event of each line.
func events(lines []map[string]any) string {
	var ev []string
	for _, l := range lines {
		ev = append(ev, l["event"].(string))
	}
	return strings.Join(ev, " ")
}

func verifyFiles(t testing.TB, anchors []Anchor, paths ...string) (Result, error) {
	t.Helper()
	var in []Input
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		in = append(in, Input{Name: filepath.Base(p), R: f})
	}
	return Verify(in, anchors)
}

func closeLog(t testing.TB, l *Log) {
	t.Helper()
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestChainAcrossRestarts: a gateway started again appends to its file,
// and the chain goes on from the last line: one chain, two runs.
func TestChainAcrossRestarts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	for run := range 2 {
		l, err := Open(path, Options{Instance: fmt.Sprint("gw-", run), Version: "test"})
		if err != nil {
			t.Fatal(err)
		}
		calls(t, l, "echo", 5)
		closeLog(t, l)
	}
	lines := readLog(t, path)
	if got, want := events(lines), "open call call call call call close open call call call call call close"; got != want {
		t.Fatalf("events %q, want %q", got, want)
	}
	res, err := verifyFiles(t, nil, path)
	if err != nil {
		t.Fatal(err)
	}
	if res.Lines != 14 || res.Calls != 10 || res.First != 1 || res.Last != 14 || res.Start != Genesis || !res.Closed {
		t.Errorf("verify: %+v", res)
	}
	if lines[0]["prev"] != Genesis.String() || lines[7]["instance"] != "gw-1" || lines[6]["calls"] != 5.0 {
		t.Errorf("open and close lines: %v, %v, %v", lines[0], lines[7], lines[6])
	}
	if lines[3]["code"] != "PermissionDenied" || lines[3]["reason"] != "TOOL_DENIED" || lines[3]["tool"] != "echo-refused" {
		t.Errorf("a refused call's line: %v", lines[3])
	}
}

// TestTornTail: a last line cut short (a crash while writing it) is
// ended and named by the next open line; the chain goes on from the last
// whole line.
func TestTornTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	calls(t, l, "echo", 2)
	closeLog(t, l)
	appendTo(t, path, `{"prev":"12`)
	l, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	calls(t, l, "echo", 1)
	closeLog(t, l)
	res, err := verifyFiles(t, nil, path)
	if err != nil {
		t.Fatal(err)
	}
	if res.Calls != 3 || res.Lines != 7 {
		t.Errorf("verify: %+v", res)
	}
	// The cut-short line alone at the end: intact, and said.
	appendTo(t, path, `{"prev":"34`)
	if res, err = verifyFiles(t, nil, path); err != nil || res.TornEnd != len(`{"prev":"34`) {
		t.Errorf("a line cut short at the end: %+v, %v", res, err)
	}
}

func appendTo(t testing.TB, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestOpenRefuses: a file another gateway writes, and one whose last line
// is not an audit line, are refused, saying why.
func TestOpenRefuses(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	l, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path, Options{}); err == nil || !strings.Contains(err.Error(), "another process is writing it") {
		t.Errorf("a second writer: %v", err)
	}
	closeLog(t, l)
	other := filepath.Join(dir, "other.log")
	if err := os.WriteFile(other, []byte("hello\nworld\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(other, Options{}); err == nil || !strings.Contains(err.Error(), "not an audit log's line") {
		t.Errorf("not an audit log: %v", err)
	}
}

// gate is a writer that blocks while closed, and fails writes after a
// given number of bytes once.
type gate struct {
	w       io.Writer
	mu      sync.Mutex
	open    chan struct{}
	failAt  int // fail once this many bytes into the next write (-1: never)
	writing chan struct{}
}

func newGate(w io.Writer) *gate {
	g := &gate{w: w, open: make(chan struct{}), failAt: -1, writing: make(chan struct{}, 1)}
	close(g.open)
	return g
}

func (g *gate) Write(b []byte) (int, error) {
	select {
	case g.writing <- struct{}{}:
	default:
	}
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	<-open
	g.mu.Lock()
	failAt := g.failAt
	g.failAt = -1
	g.mu.Unlock()
	if failAt >= 0 {
		n, _ := g.w.Write(b[:min(failAt, len(b))])
		return n, errors.New("disk full")
	}
	return g.w.Write(b)
}

func (g *gate) shut() {
	g.mu.Lock()
	g.open = make(chan struct{})
	g.mu.Unlock()
}

func (g *gate) release() {
	g.mu.Lock()
	close(g.open)
	g.mu.Unlock()
}

// TestQueueFull: with the writer stalled, a full queue drops records
// rather than waiting; the drops are counted and written into the chain
// as a dropped line once the writer goes on.
func TestQueueFull(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	var g *gate
	l, err := Open(path, Options{Queue: 4, wrap: func(w io.Writer) io.Writer { g = newGate(w); return g }})
	if err != nil {
		t.Fatal(err)
	}
	g.shut()
	<-g.writing // drained by the open line's write
	calls(t, l, "echo", 1)
	<-g.writing // the writer is stalled on that call's line
	calls(t, l, "echo", 10)
	st := l.Stats()
	if st.Dropped != 6 || st.Queued != 4 {
		t.Errorf("stats with the writer stalled: %+v, want 6 dropped, 4 queued", st)
	}
	g.release()
	closeLog(t, l)
	lines := readLog(t, path)
	if got, want := events(lines), "open call dropped call call call call close"; got != want {
		t.Errorf("events %q, want %q", got, want)
	}
	if lines[2]["count"] != 6.0 || lines[len(lines)-1]["dropped"] != 6.0 || lines[len(lines)-1]["calls"] != 5.0 {
		t.Errorf("the dropped line %v, the close line %v", lines[2], lines[len(lines)-1])
	}
	res, err := verifyFiles(t, nil, path)
	if err != nil || res.Dropped != 6 || res.Calls != 5 {
		t.Errorf("verify: %+v, %v", res, err)
	}
	if st := l.Stats(); st.Written != 5 || st.Dropped != 6 {
		t.Errorf("stats: %+v", st)
	}
}

// TestWriteFails: a write that fails part way drops what it did not
// write whole; the chain goes on from the last whole line, and the next
// line names the drops and the bytes cut short.
func TestWriteFails(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	var g *gate
	l, err := Open(path, Options{wrap: func(w io.Writer) io.Writer { g = newGate(w); return g }})
	if err != nil {
		t.Fatal(err)
	}
	g.shut()
	<-g.writing
	calls(t, l, "echo", 1)
	<-g.writing // stalled on the first call's line, the next three queue
	calls(t, l, "echo", 3)
	g.mu.Lock()
	g.failAt = 10 // the stalled write cut 10 bytes in: its call lost
	g.mu.Unlock()
	g.release()
	eventually.True(t, 5*time.Second, "the write failed", func() bool { return l.Stats().WriteErrors == 1 })
	calls(t, l, "echo", 2)
	closeLog(t, l)
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != 9 || len(lines[1]) != 10 {
		t.Fatalf("lines:\n%s", b)
	}
	var dropped map[string]any
	if err := json.Unmarshal([]byte(lines[2]), &dropped); err != nil || dropped["event"] != EventDropped || dropped["count"] != 1.0 || dropped["torn"] != 11.0 {
		t.Errorf("the line after the cut: %s (%v)", lines[2], err)
	}
	res, err := verifyFiles(t, nil, path)
	if err != nil || res.Calls != 5 || res.Dropped != 1 {
		t.Errorf("verify: %+v, %v", res, err)
	}
	if st := l.Stats(); st.Written != 5 || st.Dropped != 1 || st.WriteErrors != 1 {
		t.Errorf("stats: %+v", st)
	}
}

// TestRotation: a file renamed away (logrotate's create) is closed and
// the path opened anew, the new file's open line chained to the old
// file's close line: verified apart, and together.
func TestRotation(t *testing.T) {
	dir := t.TempDir()
	path, rotated := filepath.Join(dir, "audit.log"), filepath.Join(dir, "audit.log.1")
	l, err := Open(path, Options{tick: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	calls(t, l, "echo", 3)
	if err := os.Rename(path, rotated); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 5*time.Second, "the path opened anew", func() bool {
		_, err := os.Stat(path)
		return err == nil
	})
	calls(t, l, "echo", 2)
	closeLog(t, l)
	if got, want := events(readLog(t, rotated)), "open call call call close"; got != want {
		t.Errorf("the rotated file: %q, want %q", got, want)
	}
	if got, want := events(readLog(t, path)), "open call call close"; got != want {
		t.Errorf("the new file: %q, want %q", got, want)
	}
	old, err := verifyFiles(t, nil, rotated)
	if err != nil {
		t.Fatal(err)
	}
	cur, err := verifyFiles(t, nil, path)
	if err != nil || cur.Start != old.Head {
		t.Errorf("the new file alone: %+v, %v; want it to start from %s", cur, err, old.Head)
	}
	if both, err := verifyFiles(t, nil, rotated, path); err != nil || both.Calls != 5 {
		t.Errorf("both: %+v, %v", both, err)
	}
	if _, err := verifyFiles(t, nil, path, rotated); err == nil {
		t.Error("the files in the wrong order verified")
	}
}

// TestCopyTruncate: logrotate's copytruncate loses the lines written
// between its copy and its truncation; the gateway opens the truncated
// file with a line saying so, and the copy and the file together do not
// verify.
func TestCopyTruncate(t *testing.T) {
	dir := t.TempDir()
	path, copied := filepath.Join(dir, "audit.log"), filepath.Join(dir, "audit.log.1")
	var g *gate
	l, err := Open(path, Options{tick: 10 * time.Millisecond, wrap: func(w io.Writer) io.Writer { g = newGate(w); return g }})
	if err != nil {
		t.Fatal(err)
	}
	calls(t, l, "echo", 2)
	eventually.True(t, 5*time.Second, "the calls written", func() bool { return l.Stats().Written == 2 })
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(copied, b, 0o600); err != nil {
		t.Fatal(err)
	}
	calls(t, l, "echo", 1) // after the copy, before the truncation: lost
	eventually.True(t, 5*time.Second, "the call written", func() bool { return l.Stats().Written == 3 })
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 5*time.Second, "the truncation noticed", func() bool {
		b, _ := os.ReadFile(path)
		return bytes.Contains(b, []byte(`"reason":"truncated"`))
	})
	closeLog(t, l)
	if _, err := verifyFiles(t, nil, path); err != nil {
		t.Errorf("the truncated file alone: %v", err)
	}
	var p *Problem
	if _, err := verifyFiles(t, nil, copied, path); !errors.As(err, &p) || p.Line != 1 || !strings.Contains(p.What, "does not continue") {
		t.Errorf("the copy and the file: %v", err)
	}
}

// TestLinesAreWhole: calls from many goroutines at once, their
// arguments written too, make one whole line each, in one chain.
func TestLinesAreWhole(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := Open(path, Options{Arguments: true})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { calls(t, l, "echo", 200) })
	}
	wg.Wait()
	closeLog(t, l)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	for sc := bufio.NewScanner(f); sc.Scan(); n++ {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %d: %v", n+1, err)
		}
		if m["event"] == EventCall {
			if _, ok := m["arguments"].(map[string]any); !ok {
				t.Fatalf("line %d: no arguments: %v", n+1, m)
			}
		}
	}
	if n != 8*200+2 {
		t.Errorf("%d lines, want %d", n, 8*200+2)
	}
	if res, err := verifyFiles(t, nil, path); err != nil || res.Calls != 1600 {
		t.Errorf("verify: %+v, %v", res, err)
	}
}
