// Package sdk proves the toolservice SDK from outside the module: a tool
// service in a module of its own (testdata/wordcount, with a go.mod that
// requires github.com/toolgate/toolgate and replaces it with this checkout)
// is built with the go command, offline, run against the real broker and
// called the way the gateway calls it.
package sdk

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/transport/pulsarbroker"
	"github.com/toolgate/toolgate/wire"
)

// buildOutside writes the outside module into a temporary directory and
// builds it; it returns the binary.
func buildOutside(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(gomod)
	pulsarVersion := regexp.MustCompile(`(?m)^\s+github\.com/apache/pulsar-client-go (\S+)`).FindSubmatch(gomod)
	if goVersion == nil || pulsarVersion == nil {
		t.Fatalf("cannot find the go version and pulsar-client-go's in %s/go.mod", root)
	}
	dir := t.TempDir()
	mod := fmt.Sprintf(`module example.com/wordcount

go %s

require (
	github.com/apache/pulsar-client-go %s
	github.com/toolgate/toolgate v0.0.0
)

replace github.com/toolgate/toolgate => %s
`, goVersion[1], pulsarVersion[1], root)
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join("testdata", "wordcount", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"go.mod": []byte(mod), "go.sum": sum, "main.go": src} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "wordcount")
	cmd := exec.CommandContext(t.Context(), "go", "build", "-o", bin, ".")
	cmd.Dir = dir
	// No workspace, no network: only this checkout and the module cache.
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOPROXY=off", "GOTOOLCHAIN=local")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build of a module outside toolgate: %v\n%s\ngo.mod:\n%s", err, out, mod)
	}
	return bin
}

// service is the outside binary, running.
type service struct {
	cmd    *exec.Cmd
	lines  chan string // its stdout, line by line
	topic  string
	stderr *strings.Builder
}

func startService(t *testing.T, bin string, args ...string) *service {
	t.Helper()
	s := &service{topic: brokertest.UniqueTopic("wordcount"), lines: make(chan string, 16), stderr: &strings.Builder{}}
	token := filepath.Join(t.TempDir(), "token")
	// The test broker has no authentication: it accepts and ignores the token.
	if err := os.WriteFile(token, []byte("a-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.cmd = exec.Command(bin, append([]string{"-pulsar-url", brokertest.PulsarURL(), "-topic", s.topic, "-token-file", token}, args...)...)
	s.cmd.Stderr = s.stderr
	out, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			s.lines <- sc.Text()
		}
		close(s.lines)
	}()
	t.Cleanup(func() {
		if s.cmd.ProcessState == nil {
			_ = s.cmd.Process.Kill()
			_ = s.cmd.Wait()
		}
	})
	s.expect(t, "ready", 30*time.Second)
	return s
}

func (s *service) expect(t *testing.T, want string, d time.Duration) {
	t.Helper()
	select {
	case l, ok := <-s.lines:
		if !ok || l != want {
			t.Fatalf("service printed %q (open %v), want %q; stderr:\n%s", l, ok, want, s.stderr)
		}
	case <-time.After(d):
		t.Fatalf("service did not print %q within %s; stderr:\n%s", want, d, s.stderr)
	}
}

// call sends one call over the broker, as the gateway does, and returns
// the reply chunks.
func call(t *testing.T, topic string, args map[string]any) ([]string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	br, err := pulsarbroker.New(pulsarbroker.Options{URL: brokertest.PulsarURL()})
	if err != nil {
		t.Fatal(err)
	}
	defer br.Close()
	b := bridge.New(br, bridge.Options{})
	defer b.Close()
	a, _ := json.Marshal(args)
	c, err := b.Call(ctx, bridge.Target{RequestTopic: wire.RequestTopic(topic), ResponseTopic: wire.ResponseTopic(topic)},
		wire.Request{User: "outsider", Config: "{}", Arguments: string(a)}, bridge.CallOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var chunks []string
	for {
		ch, err := c.Recv(ctx)
		if errors.Is(err, io.EOF) {
			return chunks, nil
		}
		if err != nil {
			return chunks, err
		}
		chunks = append(chunks, ch.Text)
	}
}

func TestToolServiceFromAnotherModule(t *testing.T) {
	brokertest.RequirePulsar(t)
	bin := buildOutside(t)
	for _, mode := range []struct{ name, flag string }{{"WithTokenFile", ""}, {"WithPulsarClient", "-own-client"}} {
		t.Run(mode.name, func(t *testing.T) {
			var args []string
			if mode.flag != "" {
				args = append(args, mode.flag)
			}
			s := startService(t, bin, args...)

			// It is subscribed where TrustGraph's services are: a shared
			// subscription "<id>-request" on the request topic.
			if n := brokertest.Subscriptions(wire.RequestTopic(s.topic)); n != 1 {
				t.Fatalf("%d consumers on %s, want 1", n, wire.RequestTopic(s.topic))
			}

			got, err := call(t, s.topic, map[string]any{"text": "three little words"})
			if want := `{"user": "outsider", "words": 3}`; err != nil || len(got) != 1 || got[0] != want {
				t.Errorf("unary call = %q, %v; want [%s]", got, err, want)
			}
			got, err = call(t, s.topic, map[string]any{"text": "a b c", "stream": true})
			if want := []string{"a\n", "b\n", "c\n", `{"user": "outsider", "words": 3}`}; err != nil || strings.Join(got, "|") != strings.Join(want, "|") {
				t.Errorf("streamed call = %q, %v; want %q", got, err, want)
			}
			_, err = call(t, s.topic, map[string]any{"text": "  "})
			var we *wire.Error
			if !errors.As(err, &we) || we.Type != "invalid-argument" || we.Message != "text has no words" {
				t.Errorf("call with no words = %v, want invalid-argument: text has no words", err)
			}

			// SIGINT: it stops taking calls, finishes, and exits 0.
			if err := s.cmd.Process.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			s.expect(t, "stopped", 20*time.Second)
			if err := s.cmd.Wait(); err != nil {
				t.Fatalf("exit after SIGINT: %v; stderr:\n%s", err, s.stderr)
			}
			if n := brokertest.Subscriptions(wire.RequestTopic(s.topic)); n != 0 {
				t.Errorf("%d consumers left on %s after the service exited", n, wire.RequestTopic(s.topic))
			}
		})
	}
}
