package scale

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/internal/transport/pulsarbroker"
)

// TestPythonServiceAnnouncedAgain: a Python service that streams without
// numbering its replies (test/python/streaming_service.py) is announced,
// withdrawn and announced again, ten times in a row. Each withdrawal
// releases the gateway's subscription to its response topic and each
// announcement makes it again, while the topic lives on; the first
// multi-chunk call after each announcement must end whole — over REST,
// and over MCP with one progress notification per chunk, each door first
// in turn. The broker's counters of a subscription made again start
// afresh: read against the last lifetime's, they once ended these calls
// REPLY_LOST.
func TestPythonServiceAnnouncedAgain(t *testing.T) {
	if err := brokertest.CheckPulsar(); err != nil {
		t.Fatalf("the Pulsar broker is required: %v (start it with `make pulsar-up`, or run `make test`)", err)
	}
	topic := brokertest.UniqueTopic("reannounce-py")
	announceTopic := "persistent://tg/config/" + brokertest.UniqueTopic("announce")
	regPath := filepath.Join(t.TempDir(), "registry.yaml")
	if err := os.WriteFile(regPath, []byte("tool-service: {}\ntool: {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	startPythonStreams(t, topic)
	p, err := pulsarbroker.New(pulsarbroker.Options{URL: brokertest.PulsarURL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	id := topic
	announce := func() {
		t.Helper()
		payload, _ := json.Marshal(map[string]any{
			"tool-service": map[string]any{id: map[string]any{"id": id, "topic": topic}},
			"tool":         map[string]any{"echo": map[string]any{"type": "tool-service", "name": "echo", "description": "a streaming Python service", "service": id}},
		})
		if err := p.Publish(t.Context(), announceTopic, transport.Message{Key: id, Payload: payload}); err != nil {
			t.Fatal(err)
		}
	}
	withdraw := func() {
		t.Helper()
		if err := p.Publish(t.Context(), announceTopic, transport.Message{Key: id, Properties: map[string]string{"toolgate-withdrawn": "true"}}); err != nil {
			t.Fatal(err)
		}
	}
	g := startGateway(t, regPath, brokertest.UniqueTopic("gw-reannounce"), "--announce-topic", announceTopic)
	base := "http://" + g.gw.HTTPAddr()
	listed := func() bool {
		resp, err := http.Get(base + "/v1/tools/echo")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	responseTopic := "non-persistent://tg/response/" + topic
	subscribed := func() bool {
		return brokertest.Subscriptions(responseTopic) > 0
	}
	rest := func() string {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		return chunkedUnary(ctx, g, true, 3, 20*time.Second)
	}
	mcp := func() string {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		return orWhole(mcpLongStream(ctx, base, 3, 0).err)
	}
	for round := range 10 {
		announce()
		eventually.True(t, 30*time.Second, "the tool announced", listed)
		first, second := rest, mcp
		firstName, secondName := "REST", "MCP"
		if round%2 == 1 {
			first, second, firstName, secondName = mcp, rest, "MCP", "REST"
		}
		if got := first(); got != "whole" {
			t.Fatalf("round %d: the first call after the announcement (%s): %s; want whole", round+1, firstName, got)
		}
		if got := second(); got != "whole" {
			t.Fatalf("round %d: the next call (%s): %s; want whole", round+1, secondName, got)
		}
		withdraw()
		eventually.True(t, 30*time.Second, "the tool withdrawn", func() bool { return !listed() })
		eventually.True(t, 30*time.Second, "the response subscription released", func() bool { return !subscribed() })
	}
	t.Log("ten rounds: every first call after an announcement whole, over REST and MCP")
}
