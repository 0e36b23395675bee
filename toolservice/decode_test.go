package toolservice

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/transport"
)

// Numbers reach the handler exactly as the caller wrote them, and go back
// out the same way when the handler returns them.
func TestDecodeObjectKeepsNumbers(t *testing.T) {
	m, err := decodeObject(`{"big": 123456789012345678, "p": 9007199254740993, "z": -0.0, "t": 1e-400, "f": 1.10, "o": {"n": 5}}`)
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{"big": "123456789012345678", "p": "9007199254740993", "z": "-0.0", "t": "1e-400", "f": "1.10"} {
		if n, ok := m[k].(json.Number); !ok || n.String() != want {
			t.Errorf("%s = %#v, want json.Number %s", k, m[k], want)
		}
	}
	if n, _ := m["big"].(json.Number).Int64(); n != 123456789012345678 {
		t.Errorf("Int64 = %d", n)
	}
	out, err := Text(map[string]any{"big": m["big"], "t": m["t"]})
	if err != nil || out != `{"big": 123456789012345678, "t": 1e-400}` {
		t.Errorf("Text = %s, %v", out, err)
	}
	for _, bad := range []string{`[1]`, `{"a": 1} {"b": 2}`, `{"a":`} {
		if _, err := decodeObject(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if m, err := decodeObject(" "); err != nil || len(m) != 0 {
		t.Errorf("empty: %v, %v", m, err)
	}
}

// The last reply waits for room in a full producer queue instead of being
// dropped; other errors, and the end of its time, are not retried.
func TestRetryQueueFull(t *testing.T) {
	n := 0
	err := retryQueueFull(t.Context(), func(context.Context) error {
		n++
		if n < 4 {
			return fmt.Errorf("%w: topic", transport.ErrQueueFull)
		}
		return nil
	})
	if err != nil || n != 4 {
		t.Fatalf("%d tries, %v; want success on the 4th", n, err)
	}
	n = 0
	other := errors.New("broker gone")
	if err := retryQueueFull(t.Context(), func(context.Context) error { n++; return other }); !errors.Is(err, other) || n != 1 {
		t.Fatalf("other error: %d tries, %v", n, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Millisecond)
	defer cancel()
	err = retryQueueFull(ctx, func(context.Context) error { return transport.ErrQueueFull })
	if !errors.Is(err, transport.ErrQueueFull) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("gave up with %v", err)
	}
}
