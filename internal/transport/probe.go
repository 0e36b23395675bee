package transport

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Defaults of a Probe.
const (
	DefaultProbeEvery   = time.Second
	DefaultProbeTimeout = time.Second
)

// Probe tells whether the broker takes messages now. Every period it
// publishes a small message on its topic — a non-persistent topic nobody
// subscribes to, so the broker drops it once it has acknowledged it — and
// waits at most its timeout for the receipt. A client whose connection is
// gone does not fail a publish at once: it holds it while it reconnects,
// so the receipt is what tells.
type Probe struct {
	broker  Broker
	topic   string
	every   time.Duration
	timeout time.Duration
	// onChange, when set, is told each time the answer changes.
	onChange func(ok bool)
	// Each, when set before Run, is given the state after every probe.
	Each func(ProbeState)

	mu    sync.Mutex
	state ProbeState
}

// ProbeState is the last probe's outcome.
type ProbeState struct {
	// OK: the last probe's message was acknowledged in time.
	OK bool `json:"ok"`
	// Topic is where the probes go.
	Topic string `json:"topic"`
	// Sent is when the last probe's message was sent, Checked when that
	// probe ended (zero before the first).
	Sent    time.Time `json:"sent"`
	Checked time.Time `json:"checked"`
	// LastOK is when a probe last succeeded (zero: never).
	LastOK time.Time `json:"last_ok"`
	// RoundTripMs is the last successful probe's time to its receipt.
	RoundTripMs float64 `json:"round_trip_ms"`
	// Error is the last failure, "" while OK.
	Error string `json:"error,omitempty"`
}

// NewProbe returns a probe publishing on topic every period, each waiting
// at most timeout (zero or less: the defaults). onChange may be nil.
func NewProbe(b Broker, topic string, every, timeout time.Duration, onChange func(ok bool)) *Probe {
	if every <= 0 {
		every = DefaultProbeEvery
	}
	if timeout <= 0 {
		timeout = DefaultProbeTimeout
	}
	return &Probe{broker: b, topic: topic, every: every, timeout: timeout, onChange: onChange, state: ProbeState{Topic: topic}}
}

// Run probes at once and then every period until ctx ends.
func (p *Probe) Run(ctx context.Context) {
	t := time.NewTicker(p.every)
	defer t.Stop()
	for {
		p.once(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (p *Probe) once(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, p.timeout)
	start := time.Now()
	err := p.broker.Publish(pctx, p.topic, Message{Payload: []byte("probe")})
	cancel()
	if ctx.Err() != nil {
		return // stopping: not the broker's fault
	}
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("the broker did not acknowledge a probe message within %s", p.timeout)
	}
	now := time.Now()
	p.mu.Lock()
	was := p.state.OK
	p.state.Sent, p.state.Checked = start, now
	if err == nil {
		p.state.OK, p.state.LastOK, p.state.Error = true, now, ""
		p.state.RoundTripMs = float64(now.Sub(start).Microseconds()) / 1000
	} else {
		p.state.OK, p.state.Error = false, err.Error()
	}
	ok, st := p.state.OK, p.state
	p.mu.Unlock()
	if p.Each != nil {
		p.Each(st)
	}
	if ok != was && p.onChange != nil {
		p.onChange(ok)
	}
}

// State is the last probe's outcome.
func (p *Probe) State() ProbeState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state
}
