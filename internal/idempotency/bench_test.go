package idempotency

import (
	"strconv"
	"testing"

	"github.com/toolgate/toolgate/internal/redistest"
	"github.com/toolgate/toolgate/internal/toolcall"
)

// BenchmarkKeys is what a key costs a call, against a real Redis on
// loopback: none (the header looked up), a new key each call (the key
// taken, the answer kept: two exchanges), and a call sent again (the kept
// answer read: one exchange, the service not called).
func BenchmarkKeys(b *testing.B) {
	srv := redistest.Start(b)
	store, err := NewRedis(srv.URL, 0)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = store.Close() })
	h, _, _ := chain(b, store, Options{})
	run := func(b *testing.B, key func(i int) string) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if _, err := h(b.Context(), call(toolcall.OpInvoke, "alice", "say", `{"say": "hi"}`, key(i)), nil); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("none", func(b *testing.B) { run(b, func(int) string { return "" }) })
	b.Run("new", func(b *testing.B) { run(b, func(i int) string { return "new-" + strconv.Itoa(i) + "-" + b.Name() }) })
	b.Run("again", func(b *testing.B) { run(b, func(int) string { return "again" }) })
}
