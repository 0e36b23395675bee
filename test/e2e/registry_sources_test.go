package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/app"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/echo"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/toolservice"
	"github.com/toolgate/toolgate/wire"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

// srcGateway is a gateway of a test's own, with the registry sources the
// test chose.
type srcGateway struct {
	gw     *app.Gateway
	base   string
	admin  string // the admin listener
	client toolgatev1.ToolServiceClient
}

func startSourceGateway(t *testing.T, args ...string) *srcGateway {
	t.Helper()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	gw := runGateway(t, log, append([]string{"--pulsar-admin-url", brokertest.AdminURL(), "--default-timeout", "5s", "--allow-anonymous"}, args...)...)
	conn, err := grpc.NewClient(gw.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	g := &srcGateway{gw: gw, base: "http://" + gw.HTTPAddr(), admin: "http://" + gw.AdminAddr(), client: toolgatev1.NewToolServiceClient(conn)}
	if err := waitReady(g.base, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	return g
}

func (g *srcGateway) invoke(ctx context.Context, tool string, args map[string]any) (string, error) {
	s, _ := structpb.NewStruct(args)
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	r, err := g.client.InvokeTool(ctx, &toolgatev1.InvokeToolRequest{Name: tool, Arguments: s})
	return r.GetOutput(), err
}

func (g *srcGateway) readyDetails(t *testing.T) map[string]any {
	t.Helper()
	resp, err := http.Get(g.admin + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Details map[string]any `json:"details"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	return body.Details
}

func (g *srcGateway) metric(t *testing.T, series string) string {
	t.Helper()
	resp, err := http.Get(g.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	return ""
}

// sourceStatus returns readyz's status of one registry source.
func sourceStatus(t *testing.T, d map[string]any, origin string) map[string]any {
	t.Helper()
	list, _ := d["registry_sources"].([]any)
	for _, s := range list {
		if m, _ := s.(map[string]any); m["origin"] == origin {
			return m
		}
	}
	t.Fatalf("readyz lists no registry source %q: %v", origin, d["registry_sources"])
	return nil
}

// runService runs an echo tool service until the test ends or stop is
// called; it returns once the service is subscribed.
func runService(t *testing.T, cfg toolservice.Config) (svc *toolservice.Service, stop func()) {
	t.Helper()
	cfg.PulsarURL = brokertest.PulsarURL()
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	svc, err := toolservice.New(cfg, echo.Handle)
	if err != nil {
		t.Fatal(err)
	}
	return svc, brokertest.RunService(t, cfg.ID, svc, 30*time.Second)
}

func pulsarClient(t *testing.T) pulsar.Client {
	t.Helper()
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: brokertest.PulsarURL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func publishKeyed(t *testing.T, c pulsar.Client, topic, key string, payload []byte) {
	t.Helper()
	p, err := c.CreateProducer(pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Key: key, Payload: payload}); err != nil {
		t.Fatal(err)
	}
}

// Services announce themselves: one announced before the gateway started
// is served at once, one announced later soon after; a malformed
// announcement changes nothing and is reported; a tombstone (or a graceful
// stop) makes the tools NOT_FOUND.
func TestAnnouncedServices(t *testing.T) {
	t.Parallel()
	topic := "persistent://tg/config/" + brokertest.UniqueTopic("announce")
	early := brokertest.UniqueTopic("early")
	late := brokertest.UniqueTopic("late")

	// Announced before any gateway runs, with the explicit API.
	earlySvc, _ := runService(t, toolservice.Config{ID: early, Topic: brokertest.UniqueTopic("early")})
	ann := &toolservice.Announcement{Topic: topic, Tools: []toolservice.Tool{{Name: early + "-echo", Description: "echo, announced early"}}}
	if err := earlySvc.Announce(t.Context(), ann); err != nil {
		t.Fatal(err)
	}

	g := startSourceGateway(t, "--announce-topic", topic)
	// At once: no waiting for the first read.
	r, err := g.client.GetTool(t.Context(), &toolgatev1.GetToolRequest{Name: early + "-echo"})
	if err != nil {
		t.Fatalf("a service announced before the gateway started is not listed at start: %v", err)
	}
	if r.GetTool().GetSource() != "announcement" || r.GetTool().GetRegistryVersion() < 1 || r.GetTool().GetService() != early {
		t.Fatalf("GetTool = %v; want source announcement, a registry version and service %s", r.GetTool(), early)
	}
	if out, err := g.invoke(t.Context(), early+"-echo", map[string]any{"msg": "hi"}); err != nil || out != "hi" {
		t.Fatalf("calling the early tool: %q, %v", out, err)
	}

	// Announced after the gateway started, by Config.Announce.
	_, stopLate := runService(t, toolservice.Config{ID: late, Topic: brokertest.UniqueTopic("late"),
		Announce: &toolservice.Announcement{Topic: topic, Tools: []toolservice.Tool{{Name: late + "-echo",
			Arguments: []toolservice.Argument{{Name: "msg", Type: "string", Required: true}}}}}})
	err = eventually.Within(5*time.Second, func() error {
		out, err := g.invoke(t.Context(), late+"-echo", map[string]any{"msg": "later"})
		if err == nil && out != "later" {
			err = fmt.Errorf("got %q", out)
		}
		return err
	})
	if err != nil {
		t.Fatalf("a service announced after the gateway started: not callable: %v", err)
	}
	// Its declared argument is checked by the gateway.
	if _, err := g.invoke(t.Context(), late+"-echo", map[string]any{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a call without the required argument: %v, want INVALID_ARGUMENT", err)
	}
	list, err := g.client.ListTools(t.Context(), &toolgatev1.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range list.GetTools() {
		names = append(names, tl.GetName()+"="+tl.GetSource())
	}
	if strings.Join(names, ",") != fmt.Sprintf("%s-echo=announcement,%s-echo=announcement", early, late) {
		t.Fatalf("ListTools = %v", names)
	}

	// A malformed announcement for the early service changes nothing.
	c := pulsarClient(t)
	before := g.readyDetails(t)["registry_version"]
	publishKeyed(t, c, topic, early, []byte(`{"tool-service": {"`+early+`": {"topic": "x"}}, "tool": {"bad": {"type": "tool-service", "service": "`+early+`", "arguments": [{"name": "a", "type": "date"}]}}}`))
	err = eventually.Within(5*time.Second, func() error {
		st := sourceStatus(t, g.readyDetails(t), "announcement")
		if st["rejected"] != 1.0 || !strings.Contains(fmt.Sprint(st["last_rejection"]), `unknown type "date"`) {
			return fmt.Errorf("announcement status %v", st)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("the rejection is not reported: %v", err)
	}
	if got := g.metric(t, `toolgate_registry_rejected_total{source="announcement"}`); got != "1" {
		t.Fatalf("toolgate_registry_rejected_total{source=\"announcement\"} = %q, want 1", got)
	}
	if after := g.readyDetails(t)["registry_version"]; after != before {
		t.Fatalf("a rejected announcement changed the registry version: %v → %v", before, after)
	}
	if out, err := g.invoke(t.Context(), early+"-echo", map[string]any{"msg": "still"}); err != nil || out != "still" {
		t.Fatalf("after a malformed announcement the early tool answers %q, %v", out, err)
	}

	// A tombstone of its instance's key withdraws the early service; a
	// graceful stop the late one.
	publishKeyed(t, c, topic, wire.AnnounceKey(early, earlySvc.Instance()), nil)
	stopLate()
	for _, tool := range []string{early + "-echo", late + "-echo"} {
		err := eventually.Within(5*time.Second, func() error {
			if _, err := g.invoke(t.Context(), tool, map[string]any{"msg": "x"}); status.Code(err) != codes.NotFound {
				return fmt.Errorf("%s: code %s (%s), want NOT_FOUND", tool, status.Code(err), status.Convert(err).Message())
			}
			return nil
		})
		if err != nil {
			t.Fatalf("withdrawn: %v", err)
		}
	}

	// A gateway started now sees neither (compacted view, tombstones).
	g2 := startSourceGateway(t, "--announce-topic", topic)
	if list, err := g2.client.ListTools(t.Context(), &toolgatev1.ListToolsRequest{}); err != nil || len(list.GetTools()) != 0 {
		t.Fatalf("a new gateway lists %v (err %v), want no tools", list.GetTools(), err)
	}
}

// File entries win over announcements; the conflict shows in /readyz and
// in the metric.
func TestFileWinsOverAnnouncement(t *testing.T) {
	t.Parallel()
	topic := "persistent://tg/config/" + brokertest.UniqueTopic("announce")
	tool := brokertest.UniqueTopic("shared-name")
	fileSvc := brokertest.UniqueTopic("file-svc")
	path := filepath.Join(t.TempDir(), "registry.yaml")
	// The file's tool goes to the shared echo service of this package.
	reg := fmt.Sprintf("tool-service:\n  %s: {topic: %s}\ntool:\n  %s: {type: tool-service, description: from the file, service: %s}\n",
		fileSvc, env.echoTopic, tool, fileSvc)
	if err := os.WriteFile(path, []byte(reg), 0o644); err != nil {
		t.Fatal(err)
	}
	annSvc := brokertest.UniqueTopic("ann-svc")
	runService(t, toolservice.Config{ID: annSvc, Topic: brokertest.UniqueTopic("ann"),
		Announce: &toolservice.Announcement{Topic: topic, Tools: []toolservice.Tool{
			{Name: tool, Description: "from the announcement"},
			{Name: annSvc + "-own", Description: "no conflict"}}}})

	g := startSourceGateway(t, "--registry", path, "--announce-topic", topic)
	err := eventually.Within(5*time.Second, func() error {
		if _, err := g.client.GetTool(t.Context(), &toolgatev1.GetToolRequest{Name: annSvc + "-own"}); err != nil {
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatalf("the announced tool without a conflict is not listed: %v", err)
	}
	r, err := g.client.GetTool(t.Context(), &toolgatev1.GetToolRequest{Name: tool})
	if err != nil {
		t.Fatal(err)
	}
	if r.GetTool().GetSource() != "file" || r.GetTool().GetDescription() != "from the file" || r.GetTool().GetService() != fileSvc {
		t.Fatalf("GetTool(%s) = %v; want the file's", tool, r.GetTool())
	}
	d := g.readyDetails(t)
	if d["registry_conflicts"] != 1.0 {
		t.Fatalf("readyz registry_conflicts = %v, want 1 (details %v)", d["registry_conflicts"], d)
	}
	cs, _ := d["registry_conflict_details"].([]any)
	c0, _ := cs[0].(map[string]any)
	if c0["kind"] != "tool" || c0["name"] != tool || !strings.HasPrefix(fmt.Sprint(c0["winner"]), "file ") || c0["loser"] != "announcement "+annSvc {
		t.Fatalf("conflict details %v", cs)
	}
	if got := g.metric(t, "toolgate_registry_conflicts"); got != "1" {
		t.Fatalf("toolgate_registry_conflicts = %q, want 1", got)
	}
	if out, err := g.invoke(t.Context(), tool, map[string]any{"mode": "config"}); err != nil || out != "{}" {
		t.Fatalf("the file's tool answers %q, %v", out, err)
	}
}
