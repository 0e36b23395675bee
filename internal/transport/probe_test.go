package transport

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/eventually"
)

// deaf is a broker that can stop acknowledging: its publishes then wait
// until their context ends, as a client's do while it reconnects.
type deaf struct {
	*Mem
	gone  atomic.Bool
	asked atomic.Int64 // publishes (probes)
}

func (d *deaf) Publish(ctx context.Context, topic string, msg Message) error {
	d.asked.Add(1)
	if d.gone.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	return d.Mem.Publish(ctx, topic, msg)
}

// The probe turns not-OK when the broker stops acknowledging, within its
// period plus its timeout, says why, and turns OK again when it answers;
// each change is told once.
func TestProbe(t *testing.T) {
	b := &deaf{Mem: NewMem()}
	defer b.Close()
	changes := make(chan bool, 10)
	p := NewProbe(b, "non-persistent://tg/request/probe", 20*time.Millisecond, 30*time.Millisecond, func(ok bool) { changes <- ok })
	if p.State().OK {
		t.Fatal("OK before the first probe")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	want := func(ok bool) {
		t.Helper()
		select {
		case got := <-changes:
			if got != ok {
				t.Fatalf("change to %v, want %v", got, ok)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no change to %v within 5 s", ok)
		}
	}
	want(true)
	if st := p.State(); !st.OK || st.LastOK.IsZero() || st.Error != "" {
		t.Fatalf("state after a probe: %+v", st)
	}
	b.gone.Store(true)
	want(false)
	if st := p.State(); st.OK || st.Error == "" {
		t.Fatalf("state while the broker is deaf: %+v", st)
	}
	b.gone.Store(false)
	want(true)
	n := b.asked.Load()
	eventually.True(t, 5*time.Second, "five more probes", func() bool { return b.asked.Load() >= n+5 })
	select {
	case ok := <-changes:
		t.Fatalf("a change to %v without a change of the broker", ok)
	default:
	}
}
