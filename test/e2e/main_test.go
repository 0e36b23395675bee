// Package e2e runs the gateway, in process, against the real Pulsar broker
// that `make test` starts, with real tool services behind it.
package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/app"
	"github.com/toolgate/toolgate/internal/app/apptest"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/echo"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/internal/jokes"
	"github.com/toolgate/toolgate/toolservice"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// env is what every test here shares: one gateway, its clients, and the
// topics of the services behind it.
var env struct {
	httpBase  string
	adminBase string // the admin listener: /metrics, detailed /readyz
	grpc      toolgatev1.ToolServiceClient
	jokeTopic string
	echoTopic string
	// Topics for TrustGraph's Python services, which the interop tests
	// start themselves: py-tell-joke → pyJokeTopic, py-fail → pyFailTopic.
	pyJokeTopic string
	pyFailTopic string
	gw          *app.Gateway
}

func TestMain(m *testing.M) {
	if spec := os.Getenv(attackerEnv); spec != "" {
		os.Exit(runAttacker(spec)) // TestHTTP2Abuse's attacker
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if err := brokertest.CheckPulsar(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: the Pulsar broker is required and not ready: %v\n(start it with `make pulsar-up`, or run `make test`)\n", err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	env.jokeTopic = brokertest.UniqueTopic("joke")
	svc, err := toolservice.New(toolservice.Config{ID: "joke-service", Topic: env.jokeTopic, PulsarURL: brokertest.PulsarURL(), Logger: log}, jokes.Handle)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	env.echoTopic = brokertest.UniqueTopic("echo")
	env.pyJokeTopic = brokertest.UniqueTopic("pyjoke")
	env.pyFailTopic = brokertest.UniqueTopic("pyfail")
	echoSvc, err := toolservice.New(toolservice.Config{ID: "echo-service", Topic: env.echoTopic, PulsarURL: brokertest.PulsarURL(), MaxConcurrency: 512, Logger: log}, echo.Handle)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	svcDone := make(chan error, 2)
	go func() { svcDone <- svc.Run(ctx) }()
	go func() { svcDone <- echoSvc.Run(ctx) }()

	dir, err := os.MkdirTemp("", "toolgate-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	regPath := filepath.Join(dir, "registry.yaml")
	if err := os.WriteFile(regPath, []byte(registryYAML(env.jokeTopic, env.echoTopic, env.pyJokeTopic, env.pyFailTopic)), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	// Durable operations of this run's own: a key made afresh, topics
	// no other run's gateways read.
	ops, err := brokertest.NewOperations(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	gw, gwDone, err := startGateway(ctx, regPath, log, ops.Flags()...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	env.gw = gw
	env.httpBase = "http://" + gw.HTTPAddr()
	env.adminBase = "http://" + gw.AdminAddr()
	conn, err := grpc.NewClient(gw.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer conn.Close()
	env.grpc = toolgatev1.NewToolServiceClient(conn)

	if err := waitReady(env.httpBase, 60*time.Second); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: gateway not ready:", err)
		return 1
	}
	for _, topic := range []string{env.jokeTopic, env.echoTopic} {
		if err := waitSubscribed("non-persistent://tg/request/"+topic, 30*time.Second); err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			return 1
		}
	}
	code := m.Run()
	cancel()
	if err := <-gwDone; err != nil {
		fmt.Fprintln(os.Stderr, "e2e: gateway:", err)
		code = 1
	}
	for range 2 {
		if err := <-svcDone; err != nil {
			fmt.Fprintln(os.Stderr, "e2e: tool service:", err)
			code = 1
		}
	}
	return code
}

// startGateway runs a gateway in process on ephemeral ports with the
// registry file at regPath, until ctx ends; its Run result arrives on the
// channel.
func startGateway(ctx context.Context, regPath string, log *slog.Logger, extra ...string) (*app.Gateway, <-chan error, error) {
	return apptest.Run(ctx, log, append([]string{"--pulsar-admin-url", brokertest.AdminURL(),
		"--registry", regPath, "--announcements=false", "--default-timeout", "10s", "--stream-idle-timeout", "1s", "--allow-anonymous",
		"--cors-origins", "http://allowed.example", "--sse-heartbeat", "200ms"}, extra...)...)
}

func registryYAML(jokeTopic, echoTopic, pyJokeTopic, pyFailTopic string) string {
	return fmt.Sprintf(`tool-service:
  py-joke-service:
    request-queue: request:tg:%s
    response-queue: non-persistent://tg/response/%s
    config-params: [{name: style}]
  py-fail-service:
    topic: %s
  nobody-service:
    topic: nobody-listens-here
  echo-service:
    topic: %s
    config-params: [mode-hint]
  joke-service:
    id: joke-service
    topic: %s
    config-params:
      - name: style
        required: false
tool:
  nobody-home:
    type: tool-service
    description: A tool whose service never runs
    service: nobody-service
  py-tell-joke:
    type: tool-service
    description: TrustGraph's own Python joke service
    service: py-joke-service
    style: pun
    arguments: [{name: topic, type: string}]
  py-fail:
    type: tool-service
    description: A Python DynamicToolService that always raises
    service: py-fail-service
  echo:
    type: tool-service
    description: Echoes its arguments; see internal/echo
    service: echo-service
    mode-hint: none
  tell-joke:
    type: tool-service
    name: tell-joke
    description: Tell a joke on a given topic
    service: joke-service
    style: pun
    arguments:
      - name: topic
        type: string
        description: The topic for the joke
  tell-dad-joke:
    type: tool-service
    name: tell-dad-joke
    description: Tell a dad joke
    service: joke-service
    style: dad-joke
    arguments:
      - name: topic
        type: string
        description: The topic for the joke
        required: true
  knowledge:
    type: knowledge-query
    name: knowledge
    collection: docs
`, pyJokeTopic, pyJokeTopic, pyFailTopic, echoTopic, jokeTopic)
}

// waitReady waits until the gateway at base answers /readyz with 200
// (TestMain has no t: eventually.Within).
func waitReady(base string, d time.Duration) error {
	return eventually.Within(d, func() error {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz %d", resp.StatusCode)
		}
		return nil
	})
}

// waitSubscribed waits until a tool service subscribed to topic.
func waitSubscribed(topic string, d time.Duration) error {
	return eventually.Within(d, func() error {
		if brokertest.Subscriptions(topic) == 0 {
			return fmt.Errorf("no tool service subscribed to %s", topic)
		}
		return nil
	})
}
