package corebackend

import (
	"errors"
	"io"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/internal/operations"
	"github.com/toolgate/toolgate/internal/toolcall"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/wire"
)

// record: a running operation has no end; an ended one its end, state and
// failure, as the core presents them.
func TestRecord(t *testing.T) {
	t.Parallel()
	running := record(operations.Record{ID: "a", Owner: "o", Tool: "t", State: operations.Running, CreateMS: 1000, DeadlineMS: 2000})
	if want := (toolcall.OperationRecord{ID: "a", Tool: "t", State: "running", Created: time.UnixMilli(1000), Deadline: time.UnixMilli(2000)}); running != want {
		t.Errorf("running: %+v, want %+v", running, want)
	}
	failed := record(operations.Record{ID: "b", State: operations.Failed, CreateMS: 1, DeadlineMS: 2, EndMS: 3,
		Failure: &operations.Failure{Reason: operations.ReasonLost, Message: "m", Type: "x"}})
	if !failed.Done || failed.State != "failed" || !failed.Ended.Equal(time.UnixMilli(3)) ||
		failed.Failure == nil || failed.Failure.Type != "x" || failed.Failure.Message != "m" || failed.Failure.Reason != operations.ReasonLost ||
		!errors.Is(failed.Failure.Cause, toolcall.FailRepliesLost) {
		t.Errorf("failed: %+v %+v", failed, failed.Failure)
	}
	for s, want := range map[operations.State]string{operations.Running: toolcall.OperationRunning, operations.Done: toolcall.OperationDone,
		operations.Failed: toolcall.OperationFailed, operations.Cancelled: toolcall.OperationCancelled} {
		if got := record(operations.Record{State: s}).State; got != want {
			t.Errorf("state %s: %s, want %s", s, got, want)
		}
	}
}

// Bridge: a call through the adapter reaches the request topic with the
// call's own deadline, and its chunks come back in order, then io.EOF.
func TestBridgeStream(t *testing.T) {
	t.Parallel()
	m := transport.NewMem()
	t.Cleanup(m.Close)
	b := bridge.New(m, bridge.Options{})
	t.Cleanup(b.Close)
	target := toolcall.Target{RequestTopic: "req", ResponseTopic: "resp"}
	sub, err := m.Subscribe(t.Context(), target.RequestTopic, "svc", transport.Shared, func(msg transport.Message) {
		if wire.ExpandCall(msg.Properties)[wire.PropDeadline] == "" {
			t.Error("the request carries no deadline")
		}
		for _, last := range []bool{false, true} {
			_ = m.Publish(t.Context(), target.ResponseTopic, transport.Message{
				Payload:    wire.EncodeResponse(wire.Response{Response: "c", EndOfStream: last}),
				Properties: map[string]string{wire.PropID: msg.Properties[wire.PropID]}})
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	r, err := Bridge(b).Call(t.Context(), target, wire.Request{Arguments: "{}"}, time.Now().Add(time.Minute), false, toolcall.Assertion{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for i, wantLast := range []bool{false, true} {
		text, last, err := r.Recv(t.Context(), time.Minute, errors.New("idle"))
		if err != nil || text != "c" || last != wantLast {
			t.Fatalf("chunk %d: %q last=%v %v", i, text, last, err)
		}
	}
	if _, _, err := r.Recv(t.Context(), 0, nil); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last chunk: %v, want io.EOF", err)
	}
}
