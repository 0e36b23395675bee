package audit

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Input is one file of a log, read in order: a log rotated into several
// files is verified across them, oldest first.
type Input struct {
	Name string
	R    io.Reader
}

// Anchor is a line known from outside the file: the head the gateway
// logs when it opens and closes the log, and once a minute (seq and
// digest), or a digest alone.
type Anchor struct {
	Seq    int64 // 0: any line
	Digest Digest
}

// ParseAnchor reads an anchor written as "SEQ:DIGEST" or "DIGEST" (hex).
func ParseAnchor(s string) (Anchor, error) {
	var a Anchor
	d := s
	if seq, rest, ok := strings.Cut(s, ":"); ok {
		n, err := strconv.ParseInt(seq, 10, 64)
		if err != nil || n < 1 {
			return a, fmt.Errorf("anchor %q: want SEQ:DIGEST or DIGEST, SEQ a line's seq", s)
		}
		a.Seq, d = n, rest
	}
	b, err := hex.DecodeString(d)
	if err != nil || len(b) != sha256.Size {
		return a, fmt.Errorf("anchor %q: the digest must be 64 hex digits", s)
	}
	copy(a.Digest[:], b)
	return a, nil
}

// Result is what Verify read of an intact chain.
type Result struct {
	Lines int   // the chain's lines
	Calls int   // its call lines
	First int64 // the first line's seq
	Last  int64 // the last line's seq
	// Start is the first line's prev: Genesis when the chain starts
	// there, else the digest of the last line of the file before it.
	Start Digest
	// Head is the last line's digest.
	Head Digest
	// Closed says the last line is a close line: the gateway stopped or
	// rotated the file, and nothing was cut from its end since (an
	// anchor proves it; the chain alone cannot).
	Closed bool
	// TornEnd is the length of a line cut short at the end (a gateway
	// that stopped while writing it), 0 when none.
	TornEnd int
	// Dropped is the records the dropped lines say were not written.
	Dropped int64
	// Chains is how many chains the inputs hold: more than one where a
	// gateway writing to its standard output started again, each start
	// an open line chained to nothing (Genesis).
	Chains int
}

// Problem is the first line found wrong.
type Problem struct {
	File string
	Line int // 1-based; 0: not one line's (an anchor)
	What string
}

func (p *Problem) Error() string {
	if p.Line == 0 {
		return p.File + ": " + p.What
	}
	return fmt.Sprintf("%s: line %d: %s", p.File, p.Line, p.What)
}

// head is what a line says of its place in the chain.
type head struct {
	Prev  string `json:"prev"`
	Seq   *int64 `json:"seq"`
	Event string `json:"event"`
	Torn  int    `json:"torn"`
	Count int64  `json:"count"`
}

// line is one line read, and what it says.
type line struct {
	file   string
	no     int
	digest Digest
	prev   Digest
	seq    int64
	event  string
	torn   int
	count  int64
	good   bool // an audit line; else bytes it holds (newline included)
	size   int
	ended  bool // the file's last line
	nl     bool // ends with a newline
}

// lines reads the lines of inputs in order.
type lines struct {
	in   []Input
	cur  *bufio.Reader
	no   int
	next *line // read ahead
}

func (ls *lines) read() (*line, error) {
	if ls.next != nil {
		l := ls.next
		ls.next = nil
		return l, nil
	}
	for {
		if ls.cur == nil {
			if len(ls.in) == 0 {
				return nil, io.EOF
			}
			ls.cur, ls.no = bufio.NewReaderSize(ls.in[0].R, 64<<10), 0
		}
		b, err := ls.cur.ReadBytes('\n')
		if len(b) == 0 && errors.Is(err, io.EOF) {
			ls.cur, ls.in = nil, ls.in[1:]
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: %w", ls.in[0].Name, err)
		}
		ls.no++
		l := &line{file: ls.in[0].Name, no: ls.no, size: len(b)}
		if l.nl = b[len(b)-1] == '\n'; l.nl {
			b = b[:len(b)-1]
		}
		if _, err := ls.cur.Peek(1); err != nil {
			l.ended = true
		}
		parse(l, b)
		return l, nil
	}
}

// peek is the next line without taking it; nil at the end.
func (ls *lines) peek() *line {
	if ls.next == nil {
		ls.next, _ = ls.read()
	}
	return ls.next
}

// parse reads what b, a line without its newline, says.
func parse(l *line, b []byte) {
	var h head
	if json.Unmarshal(b, &h) != nil || h.Seq == nil || len(h.Prev) != 2*sha256.Size || h.Event == "" {
		return
	}
	if _, err := hex.Decode(l.prev[:], []byte(h.Prev)); err != nil {
		return
	}
	l.good, l.seq, l.event, l.torn, l.count = true, *h.Seq, h.Event, h.Torn, h.Count
	l.digest = sha256.Sum256(b)
}

// Verify reads the inputs, oldest first, as one chain, and returns what
// it holds, or the first line found wrong: changed (its digest is not
// the one the next line names, or its seq not the next), removed (a seq
// missing), moved (a seq out of order), a file that does not begin with
// an open line or does not continue the file before it, a line that is
// not an audit line, or an anchor that is not in the chain.
func Verify(inputs []Input, anchors []Anchor) (Result, error) {
	var res Result
	ls := &lines{in: inputs}
	var last *line // the last audit line
	var junk *line // the first of the lines that are not audit lines since
	junkBytes := 0 // their bytes, newlines included
	file := ""     // the file of last
	found := make([]bool, len(anchors))
	for {
		l, err := ls.read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return res, err
		}
		if !l.good {
			if junk == nil {
				junk = l
			}
			junkBytes += l.size
			continue
		}
		if p := check(ls, l, last, file, junk, junkBytes); p != nil {
			return res, p
		}
		junk, junkBytes = nil, 0
		if last == nil {
			res.Start, res.First = l.prev, l.seq
		}
		if last == nil || l.event == EventOpen && l.prev == Genesis {
			res.Chains++
		}
		for i, a := range anchors {
			if a.Digest == l.digest && (a.Seq == 0 || a.Seq == l.seq) {
				found[i] = true
			} else if a.Seq == l.seq {
				return res, &Problem{File: l.file, Line: l.no, What: fmt.Sprintf("changed: seq %d's digest is %s, the anchor says %s", l.seq, l.digest, a.Digest)}
			}
		}
		res.Lines++
		switch l.event {
		case EventCall:
			res.Calls++
		case EventDropped:
			res.Dropped += l.count
		}
		last, file = l, l.file
	}
	if last == nil {
		name := ""
		if len(inputs) > 0 {
			name = inputs[0].Name
		}
		return res, &Problem{File: name, What: "no audit line in it"}
	}
	res.Last, res.Head, res.Closed = last.seq, last.digest, last.event == EventClose
	if junk != nil {
		if junk.no != last.no+1 || junk.nl || !junk.ended || junk.file != last.file {
			return res, &Problem{File: junk.file, Line: junk.no, What: "not an audit line (changed, or not written by a gateway)"}
		}
		res.TornEnd = junk.size
	}
	for i, a := range anchors {
		if !found[i] {
			what := fmt.Sprintf("anchor %s is not the digest of any line: lines logged before it were changed or removed from the end", a.Digest)
			if a.Seq > 0 {
				what = fmt.Sprintf("no line %d (anchor %d:%s): lines were removed from the end (the last is %d)", a.Seq, a.Seq, a.Digest, last.seq)
			}
			return res, &Problem{File: last.file, What: what}
		}
	}
	return res, nil
}

// check checks audit line l against the audit line before it (nil for
// the first), and the lines between them that are not audit lines.
func check(ls *lines, l, last *line, lastFile string, junk *line, junkBytes int) *Problem {
	bad := func(at *line, format string, a ...any) *Problem {
		return &Problem{File: at.file, Line: at.no, What: fmt.Sprintf(format, a...)}
	}
	if junk != nil && (l.torn != junkBytes || l.event != EventOpen && l.event != EventDropped) {
		return bad(junk, "not an audit line (changed, or cut short without the next line saying so)")
	}
	if junk == nil && l.torn > 0 {
		return bad(l, "names %d bytes of a line cut short before it, which are not there: lines before it were removed", l.torn)
	}
	if last == nil || l.file != lastFile {
		// A file's first line opens it.
		if l.event != EventOpen {
			return bad(l, "the file does not begin with an open line: lines before it were removed, or it is not the start of the log (give the files before it first)")
		}
		if last != nil && l.prev != last.digest {
			return bad(l, "does not continue %s: its prev is not the digest of that file's last line (a file between them is missing, or lines were lost or changed at the rotation)", lastFile)
		}
		if last != nil && l.seq != last.seq+1 {
			return bad(l, "does not continue %s: seq %d follows seq %d", lastFile, l.seq, last.seq)
		}
		return nil
	}
	if l.event == EventOpen && l.prev == Genesis && l.seq == 1 {
		// A chain of its own begins: a gateway writing to the standard
		// output (which it cannot read back) starting again.
		return nil
	}
	link, next := l.prev == last.digest, l.seq == last.seq+1
	switch {
	case link && next:
		return nil
	case link:
		return bad(l, "changed: its seq is %d, where %d follows %d", l.seq, last.seq+1, last.seq)
	case next:
		// One of the two was changed: the last, unless this line's
		// own digest is not the one the line after it names either.
		if n := ls.peek(); n != nil && n.good && n.prev != l.digest && n.seq == l.seq+1 {
			return bad(l, "changed: its prev is not the digest of line %d", last.no)
		}
		return bad(last, "changed: its digest is not the one line %d names", l.no)
	case l.seq > last.seq+1:
		want := last.seq + 1
		for {
			n := ls.peek()
			if n == nil {
				break
			}
			ls.next = nil
			if n.good && n.seq == want {
				return bad(l, "out of order: seq %d comes before seq %d (%s line %d)", l.seq, want, n.file, n.no)
			}
		}
		if missing := l.seq - last.seq - 1; missing > 1 {
			return bad(l, "%d lines were removed before it (seq %d to %d)", missing, want, l.seq-1)
		}
		return bad(l, "a line was removed before it (seq %d)", want)
	default:
		return bad(l, "out of order: seq %d after seq %d (moved, or repeated)", l.seq, last.seq)
	}
}
