// Package conformance runs the wire conformance suite (internal/wirecheck)
// over the real broker against every implementation of the contract here —
// the Go SDK's echo service, the Python SDK's example echo service, and
// TrustGraph's joke service converted with the Python SDK's adapter — each
// rule a subtest; and checks the suite itself against a deliberately broken
// service on the raw transport, whose flaws the rules must report.
package conformance

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/echo"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/internal/transport/pulsarbroker"
	"github.com/toolgate/toolgate/internal/wirecheck"
	"github.com/toolgate/toolgate/toolservice"
	"github.com/toolgate/toolgate/wire"
)

// echoCalls are the calls both echo services answer alike.
func echoCalls(t *wirecheck.Target) {
	t.Quick = map[string]any{"msg": "hi"}
	t.Stream = map[string]any{"mode": "stream", "n": 20}
	t.Slow = map[string]any{"mode": "sleep", "ms": 2500, "msg": "slow"}
	t.SlowFor = 2500 * time.Millisecond
}

// broker is the gateway side's client, closed when the test ends.
func broker(t *testing.T) *pulsarbroker.Pulsar {
	t.Helper()
	br, err := pulsarbroker.New(pulsarbroker.Options{URL: brokertest.PulsarURL(),
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(br.Close)
	return br
}

// conform runs every rule against target as a subtest.
func conform(t *testing.T, br transport.Broker, target wirecheck.Target) {
	t.Helper()
	s, err := wirecheck.New(t.Context(), br, target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	for _, c := range wirecheck.Checks() {
		t.Run(c.Name, func(t *testing.T) {
			err := c.Run(t.Context(), s)
			switch {
			case wirecheck.Skipped(err):
				t.Skip(err)
			case err != nil:
				t.Errorf("%s\n  rule: %s", err, c.Rule)
			}
		})
	}
}

func TestGoEcho(t *testing.T) {
	brokertest.RequirePulsar(t)
	t.Parallel()
	uniq := brokertest.UniqueTopic("wire-go")
	annTopic := "persistent://tg/config/" + uniq
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	ann := echo.Announcement()
	ann.Topic, ann.Lease = annTopic, 3*time.Second
	svc, err := toolservice.New(toolservice.Config{ID: uniq, Topic: uniq, PulsarURL: brokertest.PulsarURL(), MaxConcurrency: 64,
		StopGrace: 5 * time.Second, Logger: log, Announce: ann}, echo.Handle)
	if err != nil {
		t.Fatal(err)
	}
	stop := brokertest.RunService(t, "echo", svc, 30*time.Second)
	target := wirecheck.Target{RequestTopic: wire.RequestTopic(uniq), ResponseTopic: wire.ResponseTopic(uniq),
		ServiceID: uniq, AnnounceTopic: annTopic,
		Stop: func(context.Context) error { go stop(); return nil }}
	echoCalls(&target)
	conform(t, broker(t), target)
}

func TestPythonEcho(t *testing.T) {
	brokertest.RequirePulsar(t)
	t.Parallel()
	uniq := brokertest.UniqueTopic("wire-py")
	annTopic := "persistent://tg/config/" + uniq
	p := startPython(t, "echo.py", uniq, "--pulsar-url", brokertest.PulsarURL(), "--id", uniq, "--topic", uniq,
		"--announce-topic", annTopic, "--announce-lease", "3", "--stop-grace", "5")
	target := wirecheck.Target{RequestTopic: wire.RequestTopic(uniq), ResponseTopic: wire.ResponseTopic(uniq), Tool: "echo",
		ServiceID: uniq, AnnounceTopic: annTopic, Stop: p.stop}
	echoCalls(&target)
	conform(t, broker(t), target)
	p.exited(t)
}

func TestTrustGraphJoke(t *testing.T) {
	brokertest.RequirePulsar(t)
	t.Parallel()
	uniq := brokertest.UniqueTopic("wire-joke")
	annTopic := "persistent://tg/config/" + uniq
	p := startPython(t, "joke.py", uniq, "-p", brokertest.PulsarURL(), "--id", uniq, "-t", uniq, "--no-metrics",
		"--tool-name", "tell-joke", "--tool-config", "style=pun", "--announce-topic", annTopic, "--announce-lease", "3")
	conform(t, broker(t), wirecheck.Target{RequestTopic: wire.RequestTopic(uniq), ResponseTopic: wire.ResponseTopic(uniq),
		Quick: map[string]any{"topic": "llamas"}, ServiceID: uniq, AnnounceTopic: annTopic, Stop: p.stop})
	p.exited(t)
}

// process is a Python example service run from the checkout.
type process struct {
	stopped atomic.Bool
	cmd     *exec.Cmd
	log     string
	done    chan error
}

// venv is the project's Python virtualenv: TOOLGATE_VENV, else what
// scripts/pyenv.sh prints (it installs it on first use).
func venv(t *testing.T) string {
	t.Helper()
	if v := os.Getenv("TOOLGATE_VENV"); v != "" {
		return v
	}
	cmd := exec.CommandContext(t.Context(), filepath.Join(repoRoot(t), "scripts", "pyenv.sh"))
	cmd.Dir = repoRoot(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/pyenv.sh: %v", err)
	}
	return strings.TrimSpace(string(out))
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// startPython runs sdk/python/examples/<script> (the SDK from the
// checkout) until it has subscribed to the request topic of topic.
func startPython(t *testing.T, script, topic string, args ...string) *process {
	t.Helper()
	return startProcess(t, script, topic, filepath.Join(venv(t), "bin", "python"),
		append([]string{filepath.Join(repoRoot(t), "sdk", "python", "examples", script)}, args...)...)
}

// startProcess runs a service's program until it has subscribed to the
// request topic of topic; it is killed when the test ends.
func startProcess(t *testing.T, name, topic, program string, args ...string) *process {
	t.Helper()
	p := &process{log: filepath.Join(t.TempDir(), name+".log"), done: make(chan error, 1)}
	f, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p.cmd = exec.Command(program, args...)
	p.cmd.Env = append(os.Environ(), "PYTHONUNBUFFERED=1", "PYTHONPATH="+filepath.Join(repoRoot(t), "sdk", "python", "src"))
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		if t.Failed() {
			b, _ := os.ReadFile(p.log)
			t.Logf("%s output:\n%s", name, b)
		}
	})
	eventually.True(t, 60*time.Second, name+" subscribed", func() bool {
		return brokertest.Subscriptions(wire.RequestTopic(topic)) > 0
	})
	return p
}

func (p *process) stop(context.Context) error {
	p.stopped.Store(true)
	return p.cmd.Process.Signal(syscall.SIGTERM)
}

// exited checks that the service, once stopped, exited 0 within 10 s.
func (p *process) exited(t *testing.T) {
	t.Helper()
	if !p.stopped.Load() {
		return
	}
	select {
	case err := <-p.done:
		p.done <- err
		if err != nil {
			t.Errorf("the service exited: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("the service did not exit within 10 s of its stop")
	}
}
