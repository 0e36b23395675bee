package toolcall

import (
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/internal/registry"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/wire"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const schemaRegistry = `{
  "tool-service": {"plain": {"topic": "plain"}},
  "tool": {"book": {"type": "tool-service", "service": "plain", "input-schema": {
    "type": "object",
    "$defs": {"slot": {"type": "object", "properties": {"hour": {"type": "integer", "minimum": 8, "maximum": 18}}, "required": ["hour"]}},
    "properties": {
      "room": {"type": "string", "enum": ["north", "south"]},
      "slot": {"$ref": "#/$defs/slot"},
      "people": {"type": "integer"}
    },
    "required": ["room"],
    "additionalProperties": false
  }}}
}`

// Arguments that fail a tool's input schema are refused by the core, for
// every door alike, with INVALID_ARGUMENT naming where and which keyword;
// nothing is published. Arguments that pass reach the service as written.
func TestInputSchemaThroughTheCore(t *testing.T) {
	t.Parallel()
	snap, err := registry.Parse("schema.json", []byte(schemaRegistry), nil)
	if err != nil {
		t.Fatal(err)
	}
	var published atomic.Int64
	var lastArgs atomic.Value
	br := answering(wire.EncodeResponse(wire.Response{Response: "booked", EndOfStream: true}))
	answer := br.OnPublish
	br.OnPublish = func(topic string, m transport.Message) error {
		published.Add(1)
		var req wire.Request
		_ = json.Unmarshal(m.Payload, &req)
		lastArgs.Store(req.Arguments)
		return answer(topic, m)
	}
	b := bridge.New(br, bridge.Options{})
	t.Cleanup(b.Close)
	core := New(registry.New(snap), viaBridge(b), Options{})

	cases := []struct {
		name, args, want string
	}{
		{"missing required", `{}`, `tool "book": the arguments: missing property 'room' (schema keyword "required")`},
		{"not in enum", `{"room": "east"}`, `tool "book": argument /room: value must be one of 'north', 'south' (schema keyword "enum")`},
		{"through a ref", `{"room": "north", "slot": {"hour": 20}}`, `tool "book": argument /slot/hour: maximum: got 20, want 18 (schema keyword "maximum")`},
		{"wrong type", `{"room": "north", "people": "two"}`, `tool "book": argument /people: got string, want integer (schema keyword "type")`},
		{"unknown argument", `{"room": "north", "colour": "red"}`, `additional properties 'colour' not allowed (schema keyword "additionalProperties")`},
	}
	for _, c := range cases {
		_, err := core.Handle(t.Context(), &Call{Op: OpInvoke, Name: "book", Args: []byte(c.args)}, nil)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), c.want) {
			t.Errorf("%s: %v; want INVALID_ARGUMENT saying %q", c.name, err, c.want)
		}
	}
	if n := published.Load(); n != 0 {
		t.Fatalf("%d envelopes published for refused calls", n)
	}
	res, err := core.Handle(t.Context(), &Call{Op: OpInvoke, Name: "book", Args: []byte(`{"room": "south", "slot": {"hour": 9.0}, "people": 3}`)}, nil)
	if err != nil || res.Output != "booked" {
		t.Fatalf("valid arguments: %q, %v", res.Output, err)
	}
	if got := lastArgs.Load(); got != `{"room":"south","slot":{"hour":9.0},"people":3}` {
		t.Fatalf("envelope arguments %v, want the caller's text", got)
	}
}
