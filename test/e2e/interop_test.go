package e2e

// Interoperability with TrustGraph's own Python implementation
// (trustgraph-base / trustgraph-flow 2.11.1, installed by scripts/pyenv.sh),
// over the real Pulsar broker:
//
//   - the gateway in front of TrustGraph's `joke-service`;
//   - TrustGraph's serialization and its own client stack calling the Go
//     joke service (toolservice SDK) directly over Pulsar;
//   - a Python DynamicToolService that raises, seen through the gateway.
//
// These tests fail, never skip, when the venv or a Python service cannot be
// started: interoperability is a requirement, not an option.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/eventually"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

const (
	// interopStartTimeout bounds a Python service's start, up to its
	// subscription on the request topic (it takes 1-5 s on a warm machine).
	interopStartTimeout = 45 * time.Second
	// interopStopGrace is how long a Python process gets after SIGTERM
	// before it is killed.
	interopStopGrace = 5 * time.Second
	// interopFailMessage is what test/python/failing_service.py raises.
	interopFailMessage = "the python tool failed on purpose"
)

// interopRepoRoot is the repository root: go test runs in test/e2e.
func interopRepoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// interopVenvOnce resolves the venv once per test binary: TOOLGATE_VENV if
// set, else whatever scripts/pyenv.sh prints (installing it on first use).
var interopVenvOnce = sync.OnceValues(func() (string, error) {
	venv := os.Getenv("TOOLGATE_VENV")
	if venv == "" {
		root, err := filepath.Abs(filepath.Join("..", ".."))
		if err != nil {
			return "", err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(root, "scripts", "pyenv.sh"))
		cmd.Dir = root
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("scripts/pyenv.sh failed: %w\n%s", err, interopTail(stderr.String(), 40))
		}
		venv = strings.TrimSpace(stdout.String())
	}
	if _, err := os.Stat(filepath.Join(venv, "bin", "python")); err != nil {
		return "", fmt.Errorf("venv %q has no bin/python (TOOLGATE_VENV=%q): %w", venv, os.Getenv("TOOLGATE_VENV"), err)
	}
	return venv, nil
})

// interopVenv returns the venv's path or fails the test.
func interopVenv(t *testing.T) string {
	t.Helper()
	venv, err := interopVenvOnce()
	if err != nil {
		t.Fatalf("the Python venv with TrustGraph is required: %v", err)
	}
	return venv
}

// interopEnsureNotifyNamespace makes sure namespace tg/notify exists:
// every TrustGraph processor subscribes to non-persistent://tg/notify/config
// at start and retries forever, never getting to its tool topics, while it
// is missing. scripts/pulsar.sh creates it, but the tests may run against a
// broker they did not set up (TOOLGATE_PULSAR_URL), and one restarted with
// fresh data has lost anything created by hand.
func interopEnsureNotifyNamespace(t *testing.T) {
	t.Helper()
	admin := brokertest.AdminURL() + "/admin/v2/namespaces/tg"
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(admin)
	if err != nil {
		t.Fatalf("list namespaces of tenant tg: %v", err)
	}
	var list []string
	err = json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("list namespaces of tenant tg: HTTP %d, %v", resp.StatusCode, err)
	}
	if slices.Contains(list, "tg/notify") {
		return
	}
	req, _ := http.NewRequest(http.MethodPut, admin+"/notify", nil)
	resp, err = client.Do(req)
	if err != nil {
		t.Fatalf("create namespace tg/notify: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusConflict {
		t.Fatalf("create namespace tg/notify: HTTP %d %s", resp.StatusCode, body)
	}
	t.Logf("created namespace tg/notify (TrustGraph's processors need it; scripts/pulsar.sh does not create it)")
}

// interopProc is a Python tool service started by a test.
type interopProc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed when the process has exited
	waitErr error         // set before done is closed
	shown   bool          // its output is already in a failure message
}

// exited reports whether the process has ended.
func (p *interopProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// logTail is the end of the process's combined stdout and stderr.
func (p *interopProc) logTail(lines int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", p.logPath, err)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return "(no output)"
	}
	return interopTail(string(b), lines)
}

// interopStartPython starts a Python tool service, serving requestTopic,
// as a subprocess: argv[0] is a file in the venv's bin directory (a console
// script such as joke-service, or python). Its output goes to a log file in
// the test's temporary directory. It returns once the service's consumer
// shows on requestTopic, failing the test with the log's tail if it exits
// or does not subscribe within interopStartTimeout. The process is stopped
// (SIGTERM, then SIGKILL after interopStopGrace) when the test ends, and its
// log is copied into the test log if the test failed.
func interopStartPython(t *testing.T, name, requestTopic string, argv ...string) *interopProc {
	t.Helper()
	venv := interopVenv(t)
	interopEnsureNotifyNamespace(t)

	logPath := filepath.Join(t.TempDir(), name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(venv, "bin", argv[0])
	cmd := exec.Command(bin, argv[1:]...)
	cmd.Dir = interopRepoRoot(t)
	cmd.Env = append(os.Environ(), "PYTHONUNBUFFERED=1", "VIRTUAL_ENV="+venv)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	start := time.Now()
	if err := cmd.Start(); err != nil {
		logFile.Close()
		t.Fatalf("start %s (%s): %v", name, bin, err)
	}
	logFile.Close() // the child has its own descriptor
	p := &interopProc{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop(t)
		if t.Failed() && !p.shown {
			t.Logf("%s (pid %d, %s) output, last lines:\n%s", name, cmd.Process.Pid, strings.Join(argv, " "), p.logTail(80))
		}
	})

	if !eventually.Holds(interopStartTimeout, func() bool {
		if p.exited() {
			p.shown = true
			t.Fatalf("%s exited before subscribing to %s (%v); output:\n%s", name, requestTopic, p.waitErr, p.logTail(60))
		}
		return brokertest.Subscriptions(requestTopic) > 0
	}) {
		p.shown = true
		t.Fatalf("%s did not subscribe to %s within %s; output:\n%s", name, requestTopic, interopStartTimeout, p.logTail(60))
	}
	t.Logf("%s (pid %d) subscribed to %s after %s", name, cmd.Process.Pid, requestTopic, time.Since(start).Round(time.Millisecond))
	return p
}

// stop sends SIGTERM, then SIGKILL if the process outlives interopStopGrace.
func (p *interopProc) stop(t *testing.T) {
	if p.exited() {
		return
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Logf("%s: SIGTERM: %v", p.name, err)
	}
	select {
	case <-p.done:
		return
	case <-time.After(interopStopGrace):
	}
	t.Logf("%s: still running %s after SIGTERM; killing it", p.name, interopStopGrace)
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		t.Errorf("%s (pid %d) did not exit after SIGKILL", p.name, p.cmd.Process.Pid)
	}
}

// interopTail returns the last n lines of s.
func interopTail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("... (%d lines before)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// interopRun is the outcome of a short-lived Python process.
type interopRun struct {
	stdout, stderr string
	code           int            // exit status; -1 when killed by a signal
	signal         syscall.Signal // the signal that killed it, if code is -1
}

// interopPython runs the venv's python with args from the repository root.
// A process killed by a signal is reported in the result, not as a test
// failure; one that cannot be started or outlives timeout fails the test.
func interopPython(t *testing.T, timeout time.Duration, args ...string) interopRun {
	t.Helper()
	venv := interopVenv(t)
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(venv, "bin", "python"), args...)
	cmd.Dir = interopRepoRoot(t)
	cmd.WaitDelay = 5 * time.Second
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := interopRun{stdout: out.String(), stderr: errb.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case ctx.Err() != nil:
		t.Fatalf("python %s: no exit within %s (%v)\nstderr:\n%s", strings.Join(args, " "), timeout, err, interopTail(r.stderr, 40))
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			r.signal = ws.Signal()
		}
	default:
		t.Fatalf("python %s: %v\nstderr:\n%s", strings.Join(args, " "), err, interopTail(r.stderr, 40))
	}
	return r
}

// interopPythonJokes lists the jokes TrustGraph's joke service can give for a
// category and style, read from the installed package itself.
func interopPythonJokes(t *testing.T, category, style string) []string {
	t.Helper()
	r := interopPython(t, 30*time.Second, "-c",
		`import json, sys; from trustgraph.tool_service.joke.service import JOKES; print(json.dumps(JOKES[sys.argv[1]][sys.argv[2]]))`,
		category, style)
	var jokes []string
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &jokes) != nil || len(jokes) == 0 {
		t.Fatalf("reading JOKES[%q][%q] from trustgraph.tool_service.joke.service: exit %d (%v), stdout %q\nstderr:\n%s", category, style, r.code, r.signal, r.stdout, interopTail(r.stderr, 20))
	}
	return jokes
}

// TestInteropPythonJokeService puts the gateway in front of TrustGraph's own
// joke-service (unchanged, from PyPI): tool py-tell-joke, whose service uses
// TrustGraph's queue fields (request-queue in the short form).
func TestInteropPythonJokeService(t *testing.T) {
	t.Parallel()
	requestTopic := "non-persistent://tg/request/" + env.pyJokeTopic
	interopStartPython(t, "joke-service", requestTopic,
		"joke-service", "-p", brokertest.PulsarURL(), "--id", brokertest.UniqueTopic("toolgate-e2e-pyjoke"),
		"-t", env.pyJokeTopic, "--no-metrics", "--no-loki-enabled")

	// The service picks at random among the puns of the topic's category:
	// a joke from that list shows that both config (style=pun, from the
	// registry) and arguments (topic) arrived.
	puns := interopPythonJokes(t, "programming", "pun")
	const prefix = "Here's a pun for you:\n\n"
	check := func(via, out string) {
		t.Helper()
		joke, ok := strings.CutPrefix(out, prefix)
		if !ok || joke == "" {
			t.Fatalf("%s: output %q, want %q followed by a joke", via, out, prefix)
		}
		if !slices.Contains(puns, joke) {
			t.Errorf("%s: joke %q is not one of TrustGraph's programming puns %q", via, joke, puns)
		}
	}

	t.Run("gRPC", func(t *testing.T) {
		args, _ := structpb.NewStruct(map[string]any{"topic": "programming"})
		resp, err := env.grpc.InvokeTool(t.Context(), &toolgatev1.InvokeToolRequest{Name: "py-tell-joke", Arguments: args})
		if err != nil {
			t.Fatalf("InvokeTool py-tell-joke: %v", err)
		}
		check("gRPC", resp.GetOutput())
	})
	t.Run("HTTP", func(t *testing.T) {
		code, body := post(t, "/v1/tools/py-tell-joke:invoke", `{"arguments":{"topic":"programming"}}`)
		if code != http.StatusOK {
			t.Fatalf("HTTP status %d, body %v", code, body)
		}
		out, _ := body["output"].(string)
		check("HTTP", out)
	})
}

// interopTgCallResult is what scripts/python/tg_call.py prints.
type interopTgCallResult struct {
	ID       *string `json:"id"`
	Response string  `json:"response"`
	Error    *struct {
		Type    *string `json:"type"`
		Message string  `json:"message"`
	} `json:"error"`
	EndOfStream bool `json:"end_of_stream"`
	Chunks      int  `json:"chunks"`
}

// interopTgCall runs scripts/python/tg_call.py against the Go joke service
// and decodes the JSON object it prints (its last stdout line).
func interopTgCall(t *testing.T, extra ...string) (interopTgCallResult, interopRun) {
	t.Helper()
	args := append([]string{"scripts/python/tg_call.py", "--pulsar", brokertest.PulsarURL(), "--topic", env.jokeTopic, "--timeout", "20"}, extra...)
	r := interopPython(t, 60*time.Second, args...)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	var res interopTgCallResult
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		t.Fatalf("tg_call.py %s: exit %d (%v), stdout is not its JSON result (%v):\n%s\nstderr:\n%s", strings.Join(extra, " "), r.code, r.signal, err, r.stdout, interopTail(r.stderr, 30))
	}
	return res, r
}

// TestInteropPythonClientCallsGoService has TrustGraph's Python side call the
// Go joke service (the toolservice SDK) straight over Pulsar, no gateway:
// the request is encoded and the reply decoded by trustgraph-base's own
// ToolServiceRequest/ToolServiceResponse serialization.
func TestInteropPythonClientCallsGoService(t *testing.T) {
	t.Parallel()
	want := expectedJoke(t, "dad-joke", "cats")
	common := []string{"--config", `{"style":"dad-joke"}`, "--arguments", `{"topic":"cats"}`}

	t.Run("plain", func(t *testing.T) {
		t.Parallel()
		res, r := interopTgCall(t, append(common, "--user", "alice")...)
		if r.code != 0 || res.Error != nil || res.Response != want || !res.EndOfStream || res.Chunks != 1 {
			t.Fatalf("tg_call.py (plain client): exit %d (%v), %+v; want exit 0, one chunk %q, end_of_stream\nstderr:\n%s", r.code, r.signal, res, want, interopTail(r.stderr, 30))
		}
	})
	t.Run("trustgraph", func(t *testing.T) {
		t.Parallel()
		// TrustGraph's own caller: RequestResponseClient + ToolServiceClient.
		res, r := interopTgCall(t, append(common, "--client", "trustgraph")...)
		if r.code != 0 || res.Error != nil || res.Response != want || !res.EndOfStream {
			t.Fatalf("tg_call.py --client trustgraph: exit %d (%v), %+v; want exit 0, %q\nstderr:\n%s", r.code, r.signal, res, want, interopTail(r.stderr, 30))
		}
	})
	t.Run("error", func(t *testing.T) {
		t.Parallel()
		// A Go service's typed error decodes as TrustGraph's Error.
		res, r := interopTgCall(t, "--config", `{"style":"limerick"}`, "--arguments", `{"topic":"cats"}`)
		if r.code != 1 || res.Error == nil || res.Error.Type == nil || *res.Error.Type != "invalid-argument" ||
			!strings.Contains(res.Error.Message, "limerick") || !res.EndOfStream || res.Response != "" {
			t.Fatalf("tg_call.py with an unknown style: exit %d (%v), %+v; want exit 1, error type invalid-argument naming the style\nstderr:\n%s", r.code, r.signal, res, interopTail(r.stderr, 30))
		}
	})
}

// TestInteropPythonServiceError checks that an exception in a Python
// DynamicToolService (test/python/failing_service.py) reaches the caller as
// codes.Unknown / HTTP 500 with ErrorInfo reason "tool-service-error".
func TestInteropPythonServiceError(t *testing.T) {
	t.Parallel()
	requestTopic := "non-persistent://tg/request/" + env.pyFailTopic
	interopStartPython(t, "failing-service", requestTopic,
		"python", "test/python/failing_service.py", "-p", brokertest.PulsarURL(),
		"--id", brokertest.UniqueTopic("toolgate-e2e-pyfail"), "-t", env.pyFailTopic, "--no-metrics", "--no-loki-enabled")

	t.Run("gRPC", func(t *testing.T) {
		args, _ := structpb.NewStruct(map[string]any{"anything": "at all"})
		_, err := env.grpc.InvokeTool(t.Context(), &toolgatev1.InvokeToolRequest{Name: "py-fail", Arguments: args})
		st := status.Convert(err)
		if st.Code() != codes.Unknown || !strings.Contains(st.Message(), "failed on purpose") {
			t.Fatalf("gRPC: %v, want UNKNOWN with message %q", err, interopFailMessage)
		}
		info := errorInfo(st)
		if info == nil || info.GetReason() != "tool-service-error" || info.GetMetadata()["tool"] != "py-fail" || info.GetMetadata()["service"] != "py-fail-service" {
			t.Fatalf("gRPC ErrorInfo %v, want reason tool-service-error, metadata tool=py-fail service=py-fail-service", info)
		}
	})
	t.Run("HTTP", func(t *testing.T) {
		code, body := post(t, "/v1/tools/py-fail:invoke", `{"arguments":{"anything":"at all"}}`)
		msg, _ := body["message"].(string)
		if code != http.StatusInternalServerError || body["code"] != float64(codes.Unknown) || !strings.Contains(msg, "failed on purpose") {
			t.Fatalf("HTTP: %d %v, want 500, code UNKNOWN, message %q", code, body, interopFailMessage)
		}
		details, _ := body["details"].([]any)
		var info map[string]any
		if len(details) > 0 {
			info, _ = details[0].(map[string]any)
		}
		meta, _ := info["metadata"].(map[string]any)
		if info == nil || info["reason"] != "tool-service-error" || meta["tool"] != "py-fail" || meta["service"] != "py-fail-service" {
			t.Fatalf("HTTP details %v, want ErrorInfo reason tool-service-error with metadata tool=py-fail service=py-fail-service", body["details"])
		}
	})
}
