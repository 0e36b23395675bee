package toolservice_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/transport/pulsarbroker"
	"github.com/toolgate/toolgate/toolservice"
	"github.com/toolgate/toolgate/wire"
)

// The examples run against the real broker `make test` starts
// (TOOLGATE_PULSAR_URL, default pulsar://127.0.0.1:6650); each on a topic
// of its own, so that concurrent runs on one broker do not meet.

var pulsarURL = brokertest.PulsarURL()

func uniqueTopic(prefix string) string { return brokertest.UniqueTopic(prefix) }

// quiet keeps the services' own log lines out of the examples' output.
var quiet = slog.New(slog.DiscardHandler)

func ExampleNew() {
	svc, err := toolservice.New(toolservice.Config{
		ID:        "greeter",
		Topic:     uniqueTopic("greeter"),
		PulsarURL: pulsarURL,
		Logger:    quiet,
	}, func(ctx context.Context, req *toolservice.Request) (any, error) {
		name, _ := req.Arguments["name"].(string)
		return "Hello, " + name, nil
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	select {
	case <-svc.Ready(): // subscribed: calls reach it from now on
	case err := <-done:
		log.Fatal(err)
	}

	call(svc, map[string]any{"name": "gopher"})

	stop() // Run finishes the calls in flight and returns
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	// Output: Hello, gopher
}

func ExampleRequest_Send() {
	svc, err := toolservice.New(toolservice.Config{ID: "counter", Topic: uniqueTopic("counter"), PulsarURL: pulsarURL, Logger: quiet},
		func(ctx context.Context, req *toolservice.Request) (any, error) {
			for _, n := range []string{"one", "two", "three"} {
				if err := req.Send(n); err != nil {
					return nil, err
				}
			}
			return "done", nil // the last chunk of the stream
		})
	if err != nil {
		log.Fatal(err)
	}
	defer serve(svc)()

	call(svc, nil)
	// Output:
	// one
	// two
	// three
	// done
}

func ExampleErrorf() {
	svc, err := toolservice.New(toolservice.Config{ID: "jokes", Topic: uniqueTopic("jokes"), PulsarURL: pulsarURL, Logger: quiet},
		func(ctx context.Context, req *toolservice.Request) (any, error) {
			topic, _ := req.Arguments["topic"].(string)
			if topic != "gophers" {
				// The gateway answers NOT_FOUND (HTTP 404).
				return nil, toolservice.Errorf("not-found", "no joke about %q", topic)
			}
			return map[string]any{"joke": "They dig it.", "topic": topic}, nil // sent as JSON
		})
	if err != nil {
		log.Fatal(err)
	}
	defer serve(svc)()

	call(svc, map[string]any{"topic": "cheese"})
	call(svc, map[string]any{"topic": "gophers"})
	// Output:
	// error not-found: no joke about "cheese"
	// {"joke": "They dig it.", "topic": "gophers"}
}

// A tool whose descriptor says result: mcp-content answers with MCP
// content blocks; a gateway's MCP door returns them as the tool result's
// content, and its other doors the JSON text.
func ExampleContent() {
	tool := toolservice.Tool{Name: "red-dot", Description: "Draws a red dot", Result: toolservice.ResultMCPContent}
	handler := func(ctx context.Context, req *toolservice.Request) (any, error) {
		png := []byte{0x89, 'P', 'N', 'G'} // an image's bytes, sent base64-encoded
		return toolservice.Content(
			toolservice.TextContent("A red dot:"),
			toolservice.ImageContent(png, "image/png"),
			toolservice.ResourceLinkContent("file:///dots/red.png", "red.png", "image/png"),
		)
	}
	out, err := handler(context.Background(), &toolservice.Request{})
	fmt.Println(tool.Result, out, err)
	// Output: mcp-content [{"type":"text","text":"A red dot:"},{"type":"image","data":"iVBORw==","mimeType":"image/png"},{"type":"resource_link","uri":"file:///dots/red.png","name":"red.png","mimeType":"image/png"}] <nil>
}

// A tool of MCP content sends log records while it runs; MCP clients that
// asked for records of their level receive them as notifications/message.
func ExampleRequest_Log() {
	svc, err := toolservice.New(toolservice.Config{ID: "indexer", Topic: uniqueTopic("indexer"), PulsarURL: pulsarURL, Logger: quiet},
		func(ctx context.Context, req *toolservice.Request) (any, error) {
			if err := req.Log(toolservice.LogInfo, "indexing started"); err != nil {
				return nil, err
			}
			if err := req.Log(toolservice.LogDebug, map[string]any{"files": 3}); err != nil {
				return nil, err
			}
			return toolservice.Content(toolservice.TextContent("3 files indexed"))
		})
	if err != nil {
		log.Fatal(err)
	}
	defer serve(svc)()

	call(svc, nil) // what the gateway receives: each record a chunk, then the content
	// Output:
	// {"log":{"level":"info","data":"indexing started"}}
	// {"log":{"level":"debug","data":{"files":3}}}
	// [{"type":"text","text":"3 files indexed"}]
}

func ExampleWithPulsarClient() {
	// A client the program already has, configured as it needs
	// (authentication, TLS, timeouts). The service leaves it open.
	client, err := pulsar.NewClient(pulsar.ClientOptions{URL: pulsarURL})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	svc, err := toolservice.New(toolservice.Config{ID: "upper", Topic: uniqueTopic("upper"), Logger: quiet},
		func(ctx context.Context, req *toolservice.Request) (any, error) {
			s, _ := req.Arguments["text"].(string)
			return strings.ToUpper(s), nil
		}, toolservice.WithPulsarClient(client))
	if err != nil {
		log.Fatal(err)
	}
	defer serve(svc)()

	call(svc, map[string]any{"text": "shout"})
	// Output: SHOUT
}

// A service on a broker with token authentication and TLS.
func ExampleWithTokenFile() {
	svc, err := toolservice.New(toolservice.Config{
		ID: "joke-service", Topic: "joke", PulsarURL: "pulsar+ssl://pulsar.example.com:6651",
	}, func(ctx context.Context, req *toolservice.Request) (any, error) {
		return "Why did the gopher cross the road?", nil
	},
		toolservice.WithTokenFile("/run/secrets/pulsar-token"), // read again on every connection
		toolservice.WithTLSTrustCerts("/etc/ssl/pulsar-ca.pem"),
	)
	if err != nil {
		log.Fatal(err)
	}
	_ = svc.Run(context.Background())
}

// serve runs svc until the returned function is called.
func serve(svc *toolservice.Service) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	select {
	case <-svc.Ready():
	case err := <-done:
		cancel()
		fmt.Fprintln(os.Stderr, "service did not start:", err)
		os.Exit(1)
	case <-time.After(30 * time.Second):
		fmt.Fprintln(os.Stderr, "service not subscribed after 30 s")
		os.Exit(1)
	}
	return func() {
		cancel()
		if err := <-done; err != nil {
			fmt.Fprintln(os.Stderr, "service:", err)
		}
	}
}

// call sends one call to svc over the broker, as the gateway does, and
// prints each reply chunk on a line, or the error.
func call(svc *toolservice.Service, args map[string]any) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	br, err := pulsarbroker.New(pulsarbroker.Options{URL: pulsarURL})
	if err != nil {
		fmt.Println("broker:", err)
		return
	}
	defer br.Close()
	b := bridge.New(br, bridge.Options{})
	defer b.Close()
	a, _ := json.Marshal(args)
	c, err := b.Call(ctx, bridge.Target{RequestTopic: svc.RequestTopic(), ResponseTopic: svc.ResponseTopic()},
		wire.Request{User: "example", Config: "{}", Arguments: string(a)}, bridge.CallOptions{})
	if err != nil {
		fmt.Println("call:", err)
		return
	}
	defer c.Close()
	for {
		ch, err := c.Recv(ctx)
		var we *wire.Error
		switch {
		case errors.Is(err, io.EOF):
			return
		case errors.As(err, &we):
			fmt.Println("error", we.Type+":", we.Message)
			return
		case err != nil:
			fmt.Println("call:", err)
			return
		}
		fmt.Println(ch.Text)
	}
}

// A tool may describe its arguments with a JSON Schema of its own instead
// of a list of arguments. Gateways list the schema as it is and refuse,
// with INVALID_ARGUMENT on every door, a call whose arguments fail it: the
// handler sees only arguments that passed.
func ExampleTool_inputSchema() {
	tool := toolservice.Tool{
		Name:        "book-room",
		Description: "Books a meeting room",
		InputSchema: json.RawMessage(`{
			"type": "object",
			"properties": {
				"room": {"type": "string", "enum": ["north", "south"]},
				"people": {"type": "integer", "minimum": 1},
				"region": {"type": "string", "x-mcp-header": "Region"}
			},
			"required": ["room", "people"],
			"additionalProperties": false
		}`),
	}
	b, err := toolservice.AnnouncementPayload("rooms", "request:tg:rooms", "response:tg:rooms",
		&toolservice.Announcement{Tools: []toolservice.Tool{tool}})
	if err != nil {
		log.Fatal(err)
	}
	var unit struct {
		Tool map[string]struct {
			InputSchema struct {
				Required []string `json:"required"`
			} `json:"input-schema"`
		} `json:"tool"`
	}
	if err := json.Unmarshal(b, &unit); err != nil {
		log.Fatal(err)
	}
	fmt.Println(unit.Tool["book-room"].InputSchema.Required)
	// Output: [room people]
}
