package bridge_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/internal/echo"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/wire"
)

// budgetBroker is the in-memory broker that follows what a service
// publishes on the response side: the reply messages of each call
// published beyond those the call's reader has taken — the credit in use
// — counted over all calls at once.
type budgetBroker struct {
	*transport.Mem
	mu       sync.Mutex
	sent     map[string]int // reply messages published, by call id
	taken    map[string]int // reply messages read, by call id
	peak     int            // the most published ahead of the readers at once
	inFlight int
}

func (bb *budgetBroker) PublishAsync(ctx context.Context, topic string, m transport.Message, done func(error)) error {
	bb.count(topic, m)
	return bb.Mem.PublishAsync(ctx, topic, m, done)
}

func (bb *budgetBroker) Publish(ctx context.Context, topic string, m transport.Message) error {
	bb.count(topic, m)
	return bb.Mem.Publish(ctx, topic, m)
}

func (bb *budgetBroker) count(topic string, m transport.Message) {
	if !strings.Contains(topic, "/response/") || m.Properties[wire.PropFlow] == "" {
		return // only the chunks under flow control
	}
	bb.mu.Lock()
	defer bb.mu.Unlock()
	bb.sent[m.Properties[wire.PropID]]++
	bb.inFlight++
	bb.peak = max(bb.peak, bb.inFlight)
}

func (bb *budgetBroker) read(id string) {
	bb.mu.Lock()
	defer bb.mu.Unlock()
	bb.taken[id]++
	bb.inFlight--
}

// Many unary calls answered in chunks at once share the flow-control
// budget from their start: what the service may send ahead of the
// readers, all calls together, stays within it (but for the 8 messages
// each call starts with, or the one a stream always has), every answer
// arrives whole, and the budget is whole
// again once they ended.
func TestCallsShareTheCreditBudget(t *testing.T) {
	m := transport.NewMem()
	m.QueueSize = 100000
	t.Cleanup(m.Close)
	bb := &budgetBroker{Mem: m, sent: map[string]int{}, taken: map[string]int{}}
	f := start(t, bb, echo.Handle)
	const calls, chunks, budget = 50, 2000, 300
	b := bridge.New(bb, bridge.Options{StreamBudget: budget, MaxBufferedChunks: 10000})
	t.Cleanup(b.Close)
	want := make([]string, chunks)
	for i := range chunks {
		want[i] = strconv.Itoa(i)
	}
	// Every call made before any is read from: the burst.
	cs := make([]*bridge.Call, calls)
	for i := range cs {
		c, err := b.Call(t.Context(), f.target, wire.Request{Arguments: `{"mode":"stream","n":` + strconv.Itoa(chunks) + `}`}, bridge.CallOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cs[i] = c
	}
	eventually.True(t, 10*time.Second, "the service has sent what the credit allows", func() bool {
		bb.mu.Lock()
		defer bb.mu.Unlock()
		return bb.inFlight >= 8*calls
	})
	var wg sync.WaitGroup
	out := make([]string, calls)
	for i, c := range cs {
		wg.Go(func() {
			var sb strings.Builder
			for {
				ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
				ch, err := c.Recv(ctx)
				cancel()
				if err != nil {
					out[i] = sb.String() + " (" + err.Error() + ")"
					return
				}
				if !ch.Last {
					bb.read(c.ID())
				}
				sb.WriteString(ch.Text)
				if ch.Last {
					out[i] = sb.String()
					return
				}
			}
		})
	}
	wg.Wait()
	whole := strings.Join(want, ",")
	for i, o := range out {
		if o != whole {
			t.Fatalf("call %d: %.80q…, want the whole answer", i, o)
		}
	}
	bb.mu.Lock()
	peak := bb.peak
	bb.mu.Unlock()
	if peak > budget+8*calls {
		t.Errorf("%d chunks were sent ahead of their readers at once, want at most the budget %d and the 8 messages each call starts with", peak, budget)
	}
	t.Logf("at most %d chunks ahead of the readers (budget %d, %d calls)", peak, budget, calls)
	if s := b.Stats(); s.CreditBytes != 0 || s.InFlight != 0 {
		t.Errorf("after the calls: %d bytes of credit held, %d calls in flight; want none", s.CreditBytes, s.InFlight)
	}
}

// A stream's call (CallOptions.Stream) carries a stream's share of the
// budgets with its request, taken from them: its service sends that much
// before the first chunk is read, without waiting for a grant; a plain
// call starts with the 8 messages any call has and takes nothing from the
// budgets. The budgets are whole again once the calls ended.
func TestStreamStartsWithItsShare(t *testing.T) {
	m := transport.NewMem()
	t.Cleanup(m.Close)
	f := start(t, m, echo.Handle)
	b := bridge.New(m, bridge.Options{})
	t.Cleanup(b.Close)
	const chunks = 2000
	req := wire.Request{Arguments: `{"mode":"stream","n":` + strconv.Itoa(chunks) + `}`}
	plain, err := b.Call(t.Context(), f.target, req, bridge.CallOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s := b.Stats(); s.CreditBytes != 0 {
		t.Errorf("a plain call holds %d bytes of the budget before its first chunk, want none", s.CreditBytes)
	}
	if _, err := plain.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	plain.Close()
	before := b.Stats().Replies
	c, err := b.Call(t.Context(), f.target, req, bridge.CallOptions{Stream: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if s := b.Stats(); s.CreditBytes <= 8*256 || s.CreditBytes > bridge.DefaultStreamBudgetBytes {
		t.Errorf("a stream's call holds %d bytes of the budget from its start, want more than 8 messages' and at most the budget", s.CreditBytes)
	}
	// Nothing read yet: the service sends its first credit.
	eventually.True(t, 10*time.Second, "the service has sent a stream's first credit, unread", func() bool {
		return b.Stats().Replies-before >= 100
	})
	out, err := c.Wait(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out, ",") + 1; n != chunks {
		t.Fatalf("%d chunks, want %d", n, chunks)
	}
	c.Close()
	if s := b.Stats(); s.CreditBytes != 0 || s.InFlight != 0 {
		t.Errorf("after the calls: %d bytes of credit held, %d calls in flight; want none", s.CreditBytes, s.InFlight)
	}
}
