package server

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/internal/registry"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/wire"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The deadline a call gets: the caller's when within --max-timeout, capped
// by it otherwise; the body's timeout capped the same way; the service's
// timeout or the default when the caller sets none.
func TestCallDeadlines(t *testing.T) {
	snap, err := registry.Parse("t.yaml", []byte(`
tool-service:
  slow: {id: slow, topic: slow, config-params: [], timeout: 3}
  plain: {id: plain, topic: plain, config-params: []}
tool:
  slow: {type: tool-service, name: slow, description: d, service: slow, arguments: []}
  plain: {type: tool-service, name: plain, description: d, service: plain, arguments: []}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	reply := wire.EncodeResponse(wire.Response{Response: "ok", EndOfStream: true})
	// Answers at once and records each request's deadline property.
	var mu sync.Mutex
	var deadlines []time.Time
	br := answering(reply)
	answer := br.OnPublish
	br.OnPublish = func(topic string, m transport.Message) error {
		ms, err := strconv.ParseInt(m.Properties[wire.PropDeadline], 10, 64)
		mu.Lock()
		if err == nil {
			deadlines = append(deadlines, time.UnixMilli(ms))
		} else {
			deadlines = append(deadlines, time.Time{})
		}
		mu.Unlock()
		return answer(topic, m)
	}
	b := bridge.New(br, bridge.Options{})
	defer b.Close()
	srv := New(registry.New(snap), b, Options{DefaultTimeout: 7 * time.Second, MaxTimeout: 60 * time.Second})

	cases := []struct {
		name     string
		tool     string
		callerDL time.Duration // 0: none
		body     time.Duration // 0: none
		want     time.Duration
	}{
		{"caller's deadline within the cap", "plain", 2 * time.Second, 0, 2 * time.Second},
		{"caller's deadline capped", "plain", time.Hour, 0, 60 * time.Second},
		{"body timeout", "plain", 0, 5 * time.Second, 5 * time.Second},
		{"body timeout capped", "plain", 0, time.Hour, 60 * time.Second},
		{"service timeout", "slow", 0, 0, 3 * time.Second},
		{"default timeout", "plain", 0, 0, 7 * time.Second},
	}
	for i, c := range cases {
		ctx := t.Context()
		if c.callerDL > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, c.callerDL)
			defer cancel()
		}
		req := &toolgatev1.InvokeToolRequest{Name: c.tool}
		if c.body > 0 {
			req.Timeout = durationpb.New(c.body)
		}
		start := time.Now()
		if _, err := srv.InvokeTool(ctx, req); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		mu.Lock()
		got := deadlines[i].Sub(start)
		mu.Unlock()
		if got < c.want-time.Second || got > c.want+time.Second {
			t.Errorf("%s: deadline %v after the call, want about %v", c.name, got.Round(time.Millisecond), c.want)
		}
	}
}
