package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// output is where the lines go: a file the log owns, or a writer it does
// not (the standard output).
type output struct {
	w    io.Writer
	f    *os.File // nil: not a file of the log's own
	size int64    // the file's size as the log wrote it
}

func (o *output) write(b []byte) (int, error) {
	n, err := o.w.Write(b)
	o.size += int64(n)
	return n, err
}

// sync flushes the file to disk (nothing for other writers).
func (o *output) sync() error {
	if o.f == nil {
		return nil
	}
	return o.f.Sync()
}

func (o *output) close() error {
	if o.f == nil {
		return nil
	}
	return o.f.Close()
}

// tail is where a file's chain stands: its last line's digest and seq,
// and the bytes after it (a line a crash cut short).
type tail struct {
	digest Digest
	seq    int64
	gap    int
}

// maxTail bounds how far back openFile looks for a file's last line.
const maxTail = 64 << 20

// openFile opens path to append to, creating it (mode 0600: the log says
// who called what), locked against other writers, and reads where its
// chain stands.
func openFile(path string) (*output, tail, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, tail{}, err
	}
	if err := lock(f); err != nil {
		_ = f.Close()
		return nil, tail{}, err
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, tail{}, err
	}
	if !st.Mode().IsRegular() {
		_ = f.Close()
		return nil, tail{}, errors.New("not a regular file")
	}
	t, err := readTail(path, st.Size())
	if err != nil {
		_ = f.Close()
		return nil, tail{}, err
	}
	return &output{w: f, f: f, size: st.Size()}, t, nil
}

// readTail reads the last line of the file at path, size bytes long.
func readTail(path string, size int64) (tail, error) {
	if size == 0 {
		return tail{}, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return tail{}, err
	}
	defer f.Close()
	// Read back from the end in growing chunks until the last whole
	// line is in hand.
	for n := int64(64 << 10); ; n *= 4 {
		n = min(n, size, maxTail)
		buf := make([]byte, n)
		if _, err := f.ReadAt(buf, size-n); err != nil {
			return tail{}, err
		}
		end := bytes.LastIndexByte(buf, '\n')
		if end < 0 && n == size {
			// No newline at all: one line cut short, nothing before it.
			return tail{gap: int(size)}, nil
		}
		if end >= 0 {
			start := bytes.LastIndexByte(buf[:end], '\n') + 1
			if start > 0 || n == size {
				return lastLine(buf[start:end], len(buf)-end-1)
			}
		}
		if n == maxTail {
			return tail{}, fmt.Errorf("its last line is longer than %d bytes: not an audit log; move it aside", maxTail)
		}
	}
}

// lastLine is the tail of a file whose last whole line is line, followed
// by gap bytes of a line cut short.
func lastLine(line []byte, gap int) (tail, error) {
	var head struct {
		Prev string `json:"prev"`
		Seq  *int64 `json:"seq"`
	}
	if err := json.Unmarshal(line, &head); err != nil || head.Seq == nil || len(head.Prev) != 2*sha256.Size {
		return tail{}, errors.New("its last line is not an audit log's line: move the file aside, or give --audit another")
	}
	return tail{digest: sha256.Sum256(line), seq: *head.Seq, gap: gap}, nil
}

// follow notices a rotation: when path names another file than the one
// written (renamed away by logrotate's create mode, or removed), the
// current one gets a close line and path is opened anew, its open line
// chained to that close line. A file truncated under the log (logrotate's
// copytruncate) gets an open line saying so; the lines written between
// the copy and the truncation are lost, and Verify of the copy and the
// file finds the gap.
func (l *Log) follow() {
	cur, err := l.out.f.Stat()
	if err != nil {
		return
	}
	now, err := os.Stat(l.path)
	switch {
	case err == nil && os.SameFile(cur, now):
		if cur.Size() < l.out.size {
			l.log.Warn("audit log truncated under the gateway (copytruncate?): lines written since the copy are lost; rotate with create (rename) instead", "path", l.path)
			l.out.size = cur.Size()
			l.gap, l.open = 0, false
			_ = l.writeOwn(kindOpen, "truncated")
		}
		return
	case err != nil && !errors.Is(err, os.ErrNotExist):
		if !l.followErr {
			l.log.Warn("audit log: cannot look for a rotation", "err", err, "path", l.path)
		}
		l.followErr = true
		return
	}
	// Rotated away (or removed): open the path anew, then close this
	// file with what is queued and a close line.
	out, t, err := openFile(l.path)
	if err != nil {
		if !l.followErr {
			l.log.Error("audit log: cannot open the file after a rotation; still writing the rotated one", "err", err, "path", l.path)
		}
		l.followErr = true
		return
	}
	l.followErr = false
	l.drain()
	_ = l.writeOwn(kindClose, "rotated")
	_ = l.out.sync()
	_ = l.out.close()
	l.out = out
	l.wrapOutput()
	if t.seq > 0 || t.gap > 0 {
		// Not empty: the chain goes on from what it holds.
		l.head, l.seq = t.digest, t.seq
	}
	l.gap, l.open = t.gap, t.gap > 0
	if err := l.writeOwn(kindOpen, "rotated"); err == nil {
		l.logAnchor("audit log reopened after a rotation")
	}
}
