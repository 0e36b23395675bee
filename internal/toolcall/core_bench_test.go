package toolcall

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/wire"
)

// The argument shapes benchmarked: the benchmark's echo call, a typical
// tool call, and a large nested one.
func benchArgs() map[string][]byte {
	var big strings.Builder
	big.WriteString("{")
	for i := range 100 {
		if i > 0 {
			big.WriteString(",")
		}
		fmt.Fprintf(&big, `"field%03d": {"name": "value with \"quotes\" and ünïcode", "n": %d, "ok": %v, "list": [1.5, "x", null]}`, i, i, i%2 == 0)
	}
	big.WriteString("}")
	return map[string][]byte{
		"echo-msg":   []byte(`{"msg": "abcdefghijklmnopqrstuvwxyz012345"}`),
		"typical":    []byte(`{"query": "What is the capital of France?", "limit": 10, "threshold": 0.75, "verbose": true, "filters": {"lang": "en", "tags": ["geo", "europe"]}}`),
		"nested-100": []byte(big.String()),
	}
}

// BenchmarkCheckArguments is argument validation against the tool's
// declared arguments plus compacting the text for the envelope.
func BenchmarkCheckArguments(b *testing.B) {
	args := benchArgs()
	for _, name := range []string{"echo-msg", "typical", "nested-100"} {
		for _, strict := range []bool{false, true} {
			if strict && name == "nested-100" {
				continue // undeclared fields: rejected at once
			}
			b.Run(fmt.Sprintf("%s/strict=%v", name, strict), func(b *testing.B) {
				t := tool(strict)
				t.Arguments = append(t.Arguments[:0:0], t.Arguments[1:]...) // nothing required
				a := args[name]
				b.ReportAllocs()
				for b.Loop() {
					if _, err := checkArguments(t, t.Name, a, false); err != nil && !strict {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkInvoke is the core's whole path for one unary call, without a
// door and without Pulsar: registry lookup, argument checks, deadline,
// envelope, bridge call, reply routing.
func BenchmarkInvoke(b *testing.B) {
	reply := wire.EncodeResponse(wire.Response{Response: "abcdefghijklmnopqrstuvwxyz012345", EndOfStream: true})
	core := newCore(b, answering(reply), Options{})
	args := []byte(`{"s":"abcdefghijklmnopqrstuvwxyz012345"}`)
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			res, err := core.Handle(ctx, &Call{Op: OpInvoke, Name: "typed", Args: args, Header: NoHeader}, nil)
			if err != nil {
				b.Error(err)
				return
			}
			if res.Output != "abcdefghijklmnopqrstuvwxyz012345" {
				b.Error("wrong output")
				return
			}
		}
	})
}
