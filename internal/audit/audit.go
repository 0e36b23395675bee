// Package audit writes the gateway's audit log: one JSON line per call,
// whichever door it came by and however it ended — refusals (401, 403,
// 429, the request limits) included — each line carrying the SHA-256 of
// the line before it, so that a line changed, removed or moved is found
// by Verify.
//
// The calls hand records to a queue; one goroutine formats, chains and
// writes them, so that no call waits for the disk or for another call's
// write. When the queue is full a record is dropped, never waited for:
// the drops are counted (Stats, the metrics), logged, and written into
// the chain itself as a "dropped" line with their count, so the log
// proves its own gaps.
//
// The records come from the call chain (Middleware) and, for requests
// refused before they became calls, from the HTTP listener (HTTP: the
// request limits, through limits.WithRefusals, and MCP's
// authentication, Authenticate) and the gRPC server (Tap, Registrar).
package audit

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultQueue is how many records may wait for the writer by default.
const DefaultQueue = 16384

// DefaultArgumentsBudget bounds the bytes of arguments the queue holds
// with Options.Arguments; a record past it is queued without its
// arguments (its digest stays).
const DefaultArgumentsBudget = 64 << 20

// anchorEvery is how often the writer logs the chain's head (its last
// line's digest and seq) when lines were written since: the anchors
// Verify checks a file against, kept outside the file.
const anchorEvery = time.Minute

// maintainEvery is how often the writer syncs the file to disk and looks
// for a rotation.
const maintainEvery = time.Second

// batchLines bounds the lines the writer gathers before it writes.
const batchLines = 512

// linger is the least time between two of the writer's writes under
// load: calls arriving faster are written together, a write (and a
// wake-up of the writer) per linger rather than per call. A call's line
// reaches the file at most that much later; the queue holds what comes
// meanwhile (DefaultQueue: 1.6 million calls a second).
const linger = 10 * time.Millisecond

// Options configure a Log.
type Options struct {
	// Instance and Version name the gateway in the open lines.
	Instance, Version string
	// Arguments writes each call's arguments (their compact JSON text) as
	// well as their digest.
	Arguments bool
	// Queue bounds the records waiting for the writer (DefaultQueue when
	// <= 0); more are dropped and counted.
	Queue int
	// ArgumentsBudget bounds the arguments' bytes queued
	// (DefaultArgumentsBudget when <= 0).
	ArgumentsBudget int64
	// Logger logs the chain's anchors and the writer's trouble (default:
	// discard). Give it rate-limited: a failing disk fails every write.
	Logger *slog.Logger
	// For tests: the clock, the writer's maintenance interval
	// (maintainEvery), and a wrapper of the file's writer.
	now  func() time.Time
	tick time.Duration
	wrap func(io.Writer) io.Writer
}

// Log is an audit log being written. Its methods are safe for concurrent
// use; a nil *Log writes nothing.
type Log struct {
	opts    Options
	path    string // "" for a writer that is not a file (stdout)
	log     *slog.Logger
	queue   chan *record
	pool    sync.Pool
	started atomic.Bool
	closed  atomic.Bool
	stop    chan struct{}
	done    chan struct{}
	// argBytes are the arguments' bytes queued.
	argBytes atomic.Int64

	// Counters (Stats).
	written, dropped, writeErrors atomic.Int64
	// droppedSince are the drops not yet written in a dropped line.
	droppedSince atomic.Int64

	// The writer goroutine's own (and Open's, before it starts).
	out   *output
	head  Digest // digest of the last line written whole
	seq   int64  // its seq
	calls int64  // call lines written to the current file
	lost  int64  // records dropped while the current file was written
	// gap is the bytes written after the last line written whole (what a
	// failed write, or a crash before Open, cut short), and open says
	// whether they still want their newline: the next line names them
	// (torn), and Verify takes them as a cut-short line.
	gap  int
	open bool
	// The batch being written: its lines, and the head before it.
	buf                []byte
	ends               []lineEnd
	batchHead          Digest
	batchSeq           int64
	anchorSeq          int64 // the seq last logged as the anchor
	anchorAt           time.Time
	followErr, syncErr bool // logged once until it works again
	unsynced           bool // written since the last sync

	closeOnce sync.Once
	closeErr  error
}

// lineEnd is where a line of the writer's buffer ends, and what it is.
type lineEnd struct {
	end    int
	digest Digest
	seq    int64
	call   bool
}

// Stats are a Log's counters.
type Stats struct {
	Written     int64 // call lines written
	Dropped     int64 // records not written: the queue was full, a write failed, or the log was closed
	WriteErrors int64 // writes that failed
	Queued      int   // records waiting now
}

// New is an audit log, not open yet: its middleware and hooks can be
// built into the gateway before Open opens the file. Records handed
// over before Open wait in the queue (and are dropped when it is full).
func New(opts Options) *Log {
	if opts.Queue <= 0 {
		opts.Queue = DefaultQueue
	}
	if opts.ArgumentsBudget <= 0 {
		opts.ArgumentsBudget = DefaultArgumentsBudget
	}
	if opts.now == nil {
		opts.now = time.Now
	}
	if opts.tick <= 0 {
		opts.tick = maintainEvery
	}
	l := &Log{opts: opts, log: opts.Logger, queue: make(chan *record, opts.Queue),
		stop: make(chan struct{}), done: make(chan struct{})}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	l.pool.New = func() any { return new(record) }
	return l
}

// Open opens the log at path ("-": the standard output), writes its open
// line and starts the writer. A file that exists is appended to: the
// chain goes on from its last line (a last line cut short by a crash is
// ended, and named by the open line). A file another process writes is
// refused, as is one whose last line is not an audit line.
func (l *Log) Open(path string) error {
	if l.started.Load() {
		return errors.New("audit log: already open")
	}
	if path == "-" {
		l.out = &output{w: os.Stdout}
	} else {
		out, tail, err := openFile(path)
		if err != nil {
			return fmt.Errorf("audit log %s: %w", path, err)
		}
		l.path = path
		l.out, l.head, l.seq, l.gap, l.open = out, tail.digest, tail.seq, tail.gap, tail.gap > 0
	}
	l.wrapOutput()
	if err := l.writeOwn(kindOpen, "start"); err != nil {
		_ = l.out.close()
		return fmt.Errorf("audit log %s: %w", path, err)
	}
	l.logAnchor("audit log opened")
	l.started.Store(true)
	go l.run()
	return nil
}

// Open is New and Open.
func Open(path string, opts Options) (*Log, error) {
	l := New(opts)
	if err := l.Open(path); err != nil {
		return nil, err
	}
	return l, nil
}

// record hands r to the writer, or drops it when the queue is full or
// the log closed. It never waits.
func (l *Log) record(r *record) {
	if l.closed.Load() {
		l.drop(r)
		return
	}
	select {
	case l.queue <- r:
	default:
		l.drop(r)
	}
}

// drop counts r as dropped and gives it back.
func (l *Log) drop(r *record) {
	l.dropped.Add(1)
	l.droppedSince.Add(1)
	l.release(r)
}

// get is a record to fill.
func (l *Log) get() *record { return l.pool.Get().(*record) }

// release gives r back to the pool.
func (l *Log) release(r *record) {
	if r.args != nil {
		l.argBytes.Add(-int64(len(r.args)))
	}
	if cap(r.args) > 64<<10 {
		r.args = nil // the pool keeps no large buffer
	}
	r.reset()
	l.pool.Put(r)
}

// takeArguments gives r a copy of args when the budget allows, else
// marks them omitted.
func (l *Log) takeArguments(r *record, args []byte) {
	if len(args) == 0 {
		args = noArguments
	}
	if l.argBytes.Add(int64(len(args))) > l.opts.ArgumentsBudget {
		l.argBytes.Add(-int64(len(args)))
		r.argsOmitted = true
		return
	}
	r.args = append(r.args[:0], args...)
}

// Stats are l's counters now.
func (l *Log) Stats() Stats {
	return Stats{Written: l.written.Load(), Dropped: l.dropped.Load(), WriteErrors: l.writeErrors.Load(), Queued: len(l.queue)}
}

// Collectors are l's metrics: toolgate_audit_records_total,
// toolgate_audit_dropped_total, toolgate_audit_write_errors_total and
// toolgate_audit_queue.
func (l *Log) Collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "toolgate_audit_records_total",
			Help: "Calls written to the audit log."}, func() float64 { return float64(l.written.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "toolgate_audit_dropped_total",
			Help: "Calls not written to the audit log: its queue was full, or a write failed (each gap is a dropped line in the log)."},
			func() float64 { return float64(l.dropped.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "toolgate_audit_write_errors_total",
			Help: "Writes to the audit log that failed."}, func() float64 { return float64(l.writeErrors.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "toolgate_audit_queue",
			Help: "Calls waiting to be written to the audit log."}, func() float64 { return float64(len(l.queue)) }),
	}
}

// Close writes what is queued and a close line, syncs and closes the
// file; records handed over later are dropped. It returns once the
// writer stopped, or when ctx ends (a stalled disk: the writer then
// finishes on its own).
func (l *Log) Close(ctx context.Context) error {
	if l == nil {
		return nil
	}
	l.closeOnce.Do(func() {
		l.closed.Store(true)
		close(l.stop)
	})
	if !l.started.Load() {
		return nil // never opened: nothing to write
	}
	select {
	case <-l.done:
		return l.closeErr
	case <-ctx.Done():
		return fmt.Errorf("audit log: not closed in time: %w", context.Cause(ctx))
	}
}

// run is the writer: it takes the queued records in batches, writes
// them, and keeps the file (sync, rotation, anchors) between batches.
func (l *Log) run() {
	defer close(l.done)
	tick := time.NewTicker(l.opts.tick)
	defer tick.Stop()
	pace := time.NewTimer(linger)
	pace.Stop()
	var last time.Time // the last batch's write
	for {
		select {
		case r := <-l.queue:
			emptied := l.batch(r)
			// Batches closer together than linger: the next waits out
			// the rest of it, so that the calls queue without waking
			// the writer, and go in one write (unless they are already
			// more than a batch).
			now := time.Now()
			if wait := linger - now.Sub(last); wait > 0 && emptied {
				pace.Reset(wait)
				select {
				case <-pace.C:
				case <-l.stop:
					pace.Stop()
				}
			}
			last = now
		case <-tick.C:
			l.maintain()
		case <-l.stop:
			l.finish()
			return
		}
	}
}

// batch writes r and whatever else is queued, up to batchLines, after a
// dropped line when records were dropped since the last batch, and
// reports whether it emptied the queue.
func (l *Log) batch(r *record) (emptied bool) {
	l.begin()
	l.addDropped()
	l.add(r)
	for range batchLines - 1 {
		select {
		case r = <-l.queue:
			l.add(r)
			continue
		default:
			emptied = true
		}
		break
	}
	l.flush()
	return emptied
}

// finish writes what is queued and the close line, and closes the file.
func (l *Log) finish() {
	l.drain()
	err := l.writeOwn(kindClose, "shutdown")
	if serr := l.out.sync(); err == nil {
		err = serr
	}
	if cerr := l.out.close(); err == nil {
		err = cerr
	}
	l.closeErr = err
	l.logAnchor("audit log closed")
	// Records handed over while the writer finished are dropped.
	for {
		select {
		case r := <-l.queue:
			l.drop(r)
			continue
		default:
		}
		return
	}
}

// drain writes what is queued now.
func (l *Log) drain() {
	for {
		select {
		case r := <-l.queue:
			l.batch(r)
			continue
		default:
		}
		return
	}
}

// begin starts a batch: a line cut short before it gets its newline.
func (l *Log) begin() {
	l.buf, l.ends = l.buf[:0], l.ends[:0]
	l.batchHead, l.batchSeq = l.head, l.seq
	if l.open {
		l.buf = append(l.buf, '\n')
	}
}

// torn is what the batch's first line names of the bytes before it: a
// line cut short, with the newline begin gave it.
func (l *Log) torn() int {
	if l.gap == 0 {
		return 0
	}
	if l.open {
		return l.gap + 1
	}
	return l.gap
}

// addDropped adds a dropped line when records were dropped since the
// last one, or a line was cut short.
func (l *Log) addDropped() {
	n := l.droppedSince.Swap(0)
	if n == 0 && l.gap == 0 {
		return
	}
	r := l.get()
	r.kind, r.count, r.torn, r.start = kindDropped, n, l.torn(), l.opts.now()
	l.lost += n
	l.add(r)
}

// add formats r into the batch, chained to the line before, and gives
// it back.
func (l *Log) add(r *record) {
	start := len(l.buf)
	l.buf = appendLine(l.buf, r, l.head, l.seq+1)
	l.seq++
	l.head = sha256.Sum256(l.buf[start:])
	l.buf = append(l.buf, '\n')
	l.ends = append(l.ends, lineEnd{end: len(l.buf), digest: l.head, seq: l.seq, call: r.kind == kindCall})
	l.release(r)
}

// flush writes the batch. What a failed write did not write whole is
// dropped: the chain goes on from the last line written whole, and the
// next batch names the drops (and the bytes of a line cut short) in a
// dropped line.
func (l *Log) flush() {
	if len(l.buf) == 0 {
		return
	}
	n, err := l.out.write(l.buf)
	l.unsynced = l.unsynced || n > 0
	if err == nil {
		l.gap, l.open = 0, false
		l.countCalls(l.ends)
		return
	}
	l.writeErrors.Add(1)
	whole := 0
	for whole < len(l.ends) && l.ends[whole].end <= n {
		whole++
	}
	l.countCalls(l.ends[:whole])
	var lostCalls int64
	for _, e := range l.ends[whole:] {
		if e.call {
			lostCalls++
		}
	}
	l.dropped.Add(lostCalls)
	l.droppedSince.Add(lostCalls)
	if whole > 0 {
		last := l.ends[whole-1]
		l.head, l.seq, l.gap = last.digest, last.seq, n-last.end
	} else {
		l.head, l.seq = l.batchHead, l.batchSeq
		l.gap += n
	}
	if n > 0 {
		l.open = l.buf[n-1] != '\n'
	}
	l.log.Error("audit log: a write failed; the calls it held are counted as dropped", "err", err, "dropped", lostCalls, "path", l.pathName())
}

// countCalls counts the call lines among ends as written.
func (l *Log) countCalls(ends []lineEnd) {
	var n int64
	for _, e := range ends {
		if e.call {
			n++
		}
	}
	l.written.Add(n)
	l.calls += n
}

// writeOwn writes an open or a close line now (after a dropped line
// before a close, when records were dropped), and reports a failed
// write.
func (l *Log) writeOwn(k kind, reason string) error {
	l.begin()
	r := l.get()
	r.kind, r.reason, r.start = k, reason, l.opts.now()
	switch k {
	case kindOpen:
		r.torn = l.torn()
		r.instance, r.version, r.pid = l.opts.Instance, l.opts.Version, os.Getpid()
		l.calls, l.lost = 0, 0
	case kindClose:
		l.addDropped()
		r.count, r.dropped = l.calls, l.lost
	}
	l.add(r)
	errs := l.writeErrors.Load()
	l.flush()
	if l.writeErrors.Load() != errs {
		return errors.New("the write failed")
	}
	return nil
}

// maintain syncs what was written to disk, follows a rotation, and logs
// the chain's head once in a while.
func (l *Log) maintain() {
	if l.unsynced {
		l.unsynced = false
		if err := l.out.sync(); err != nil {
			if !l.syncErr {
				l.log.Warn("audit log: sync failed", "err", err, "path", l.pathName())
			}
			l.syncErr = true
		} else {
			l.syncErr = false
		}
	}
	if l.path != "" {
		l.follow()
	}
	if l.seq != l.anchorSeq && l.opts.now().Sub(l.anchorAt) >= anchorEvery {
		l.logAnchor("audit log head")
	}
}

// logAnchor logs the chain's head. Kept outside the file, it is what
// Verify's anchors check the file's last lines against.
func (l *Log) logAnchor(msg string) {
	l.anchorSeq, l.anchorAt = l.seq, l.opts.now()
	l.log.Info(msg, "path", l.pathName(), "seq", l.seq, "head", l.head.String(),
		"calls", l.written.Load(), "dropped", l.dropped.Load())
}

func (l *Log) pathName() string {
	if l.path == "" {
		return "-"
	}
	return l.path
}

// wrapOutput puts the tests' wrapper around the output's writer.
func (l *Log) wrapOutput() {
	if l.opts.wrap != nil {
		l.out.w = l.opts.wrap(l.out.w)
	}
}
