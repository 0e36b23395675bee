// Command tracelegs splits the latency a forwarder (the gateway, or the
// floor) adds at one call in flight into its legs, from a Go execution
// trace of it taken under that load:
//
//	loadgen -mode grpc -concurrency 1 -duration 10s … &
//	curl -o gw.trace 'http://ADMIN-ADDR/debug/pprof/trace?seconds=2'
//	tracelegs gw.trace floor.trace
//
// With one call in flight the syscalls follow each other call by call: the
// door reads the request (gRPC or HTTP), the Pulsar connection writes it,
// reads the reply, the door writes the answer. For each call it takes the
// time from the door's first read to the Pulsar write (in: what the
// forwarder does before publishing), from that write to the last Pulsar
// read before the door's write (service: the broker, the tool service and
// back), and from that read to the door's write (out: what it does with
// the reply), and prints their p50 and p90, and the goroutine wake-ups
// and syscalls per request published. Tracing slows every leg alike;
// compare traces taken the same way, one after the other.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"golang.org/x/exp/trace"
)

func main() {
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: tracelegs TRACE [TRACE …]  (Go execution traces, e.g. from /debug/pprof/trace, taken at one call in flight)")
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	fmt.Printf("%-28s %9s %17s %17s %17s %13s %13s\n", "trace", "published", "in p50/p90 µs", "service p50/p90", "out p50/p90 µs", "wakes / req", "syscalls / req")
	for _, name := range flag.Args() {
		s, err := read(name)
		if err != nil {
			fmt.Fprintf(os.Stderr, "tracelegs: %s: %v\n", name, err)
			os.Exit(1)
		}
		l := legs(s.events)
		req := float64(max(s.published, 1))
		fmt.Printf("%-28s %9d %8.1f /%7.1f %8.1f /%7.1f %8.1f /%7.1f %13.2f %13.2f\n", name, s.published,
			pct(l.in, .5), pct(l.in, .9), pct(l.service, .5), pct(l.service, .9), pct(l.out, .5), pct(l.out, .9),
			float64(s.wakes)/req, float64(s.syscalls)/req)
	}
}

// kind is what a syscall does for a call.
type kind int

const (
	other     kind = iota
	doorRead       // the gRPC or HTTP server reads
	doorWrite      // … writes
	busRead        // the Pulsar connection reads
	busWrite       // … writes
)

// event is one syscall of a kind that matters, at a time in nanoseconds.
type event struct {
	t int64
	k kind
}

// summary is what read finds in a trace.
type summary struct {
	events          []event
	published       int // Pulsar writes
	wakes, syscalls int
}

func read(name string) (summary, error) {
	var s summary
	f, err := os.Open(name)
	if err != nil {
		return s, err
	}
	defer f.Close()
	r, err := trace.NewReader(f)
	if err != nil {
		return s, err
	}
	for {
		ev, err := r.ReadEvent()
		if errors.Is(err, io.EOF) {
			return s, nil
		}
		if err != nil {
			return s, err
		}
		if ev.Kind() != trace.EventStateTransition {
			continue
		}
		st := ev.StateTransition()
		if st.Resource.Kind != trace.ResourceGoroutine {
			continue
		}
		from, to := st.Goroutine()
		switch {
		case from == trace.GoWaiting && to == trace.GoRunnable:
			s.wakes++
		case to == trace.GoSyscall:
			s.syscalls++
			if k := classify(ev.Stack()); k != other {
				s.events = append(s.events, event{int64(ev.Time()), k})
				if k == busWrite {
					s.published++
				}
			}
		}
	}
}

// classify tells a syscall's kind by the functions on its stack.
func classify(st trace.Stack) kind {
	var b strings.Builder
	for f := range st.Frames() {
		b.WriteString(f.Func)
		b.WriteByte(';')
	}
	return classifyStack(b.String())
}

func classifyStack(s string) kind {
	read := strings.Contains(s, "syscall.read") || strings.Contains(s, "syscall.Read")
	write := strings.Contains(s, "syscall.write") || strings.Contains(s, "syscall.Write")
	switch {
	case strings.Contains(s, "pulsar-client-go") && read:
		return busRead
	case strings.Contains(s, "pulsar-client-go") && write:
		return busWrite
	case (strings.Contains(s, "google.golang.org/grpc") || strings.Contains(s, "net/http")) && read:
		return doorRead
	case (strings.Contains(s, "google.golang.org/grpc") || strings.Contains(s, "net/http")) && write:
		return doorWrite
	}
	return other
}

// legsOf are the legs' durations in microseconds, a sample per call.
type legsOf struct{ in, service, out []float64 }

// legs walks the syscalls in time order, one call after the other: in from
// the door's first read since its last write to the next Pulsar write;
// service from that write to the last Pulsar read before the door's next
// write; out from that read to the write. A door write between the
// publish and the reply is a frame of its own, not the answer.
func legs(evs []event) legsOf {
	var l legsOf
	firstRead, lastPub, lastBusRead := int64(-1), int64(-1), int64(-1)
	for _, e := range evs {
		switch e.k {
		case doorRead:
			if firstRead < 0 {
				firstRead = e.t
			}
		case busWrite:
			if firstRead >= 0 {
				l.in = append(l.in, float64(e.t-firstRead)/1e3)
				firstRead = -1
				lastPub = e.t
			}
		case busRead:
			lastBusRead = e.t
		case doorWrite:
			switch {
			case lastPub >= 0 && lastBusRead > lastPub: // the answer
				l.service = append(l.service, float64(lastBusRead-lastPub)/1e3)
				l.out = append(l.out, float64(e.t-lastBusRead)/1e3)
				lastPub, lastBusRead, firstRead = -1, -1, -1
			case lastPub < 0: // nothing published: what was read was not a call (a window update, a ping)
				firstRead = -1
			} // published, no reply yet: a frame of the door's own (headers, window update)
		}
	}
	return l
}

// pct is the nearest-rank percentile q of v (0 when empty).
func pct(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	v = slices.Clone(v)
	slices.Sort(v)
	i := max(0, min(len(v)-1, int(float64(len(v))*q+0.999999)-1))
	return v[i]
}
