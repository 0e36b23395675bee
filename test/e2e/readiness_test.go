package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/app/apptest"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/echo"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/toolservice"
)

// Readiness means serving: a gateway that knows its services' consumers
// from the admin API (--pulsar-admin-url) refuses no call of a service
// whose consumer is subscribed — not a service that has just (re)started,
// whatever the gateway's cache held, nor the calls made as soon as a
// restarted gateway says it is ready.

// called is one call of the echo tool over REST: when it was sent, and
// its HTTP status and ErrorInfo reason.
type called struct {
	sent   time.Time
	status int
	reason string
}

// callEcho calls the echo tool on the gateway at base.
func callEcho(base string) called {
	c := called{sent: time.Now()}
	resp, err := http.Post(base+"/v1/tools/echo:invoke", "application/json", strings.NewReader(`{"arguments": {"msg": "hi"}, "timeout": "5s"}`))
	if err != nil {
		c.reason = err.Error()
		return c
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	c.status = resp.StatusCode
	var st struct {
		Details []struct {
			Reason string `json:"reason"`
		} `json:"details"`
	}
	if json.Unmarshal(b, &st) == nil {
		for _, d := range st.Details {
			if d.Reason != "" {
				c.reason = d.Reason
			}
		}
	}
	return c
}

// caller calls the echo tool on the gateway at base every 5 ms, from
// each of two goroutines, until stop; the calls are in calls().
type caller struct {
	stop chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	all  []called
}

func startCalling(base string) *caller {
	c := &caller{stop: make(chan struct{})}
	for range 2 {
		c.wg.Go(func() {
			for {
				got := callEcho(base)
				c.mu.Lock()
				c.all = append(c.all, got)
				c.mu.Unlock()
				select {
				case <-c.stop:
					return
				case <-time.After(5 * time.Millisecond):
				}
			}
		})
	}
	return c
}

// saw reports whether a call sent after since had reason.
func (c *caller) saw(reason string, since time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, got := range c.all {
		if got.reason == reason && got.sent.After(since) {
			return true
		}
	}
	return false
}

// end stops the calls and returns them.
func (c *caller) end() []called {
	close(c.stop)
	c.wg.Wait()
	return c.all
}

// refusedAfter checks that no call sent after since was refused with
// NO_LISTENER, and that some were served; what names the moment.
func refusedAfter(t *testing.T, calls []called, since time.Time, what string) {
	t.Helper()
	var after, served, refused int
	var last time.Duration
	for _, c := range calls {
		if !c.sent.After(since) {
			continue
		}
		after++
		switch {
		case c.status == http.StatusOK:
			served++
		case c.reason == "NO_LISTENER":
			refused++
			last = max(last, c.sent.Sub(since))
		}
	}
	t.Logf("%d calls sent after %s: %d served, %d refused NO_LISTENER", after, what, served, refused)
	if refused > 0 {
		t.Errorf("%d calls sent after %s refused NO_LISTENER, the last sent %v after it", refused, what, last.Round(time.Millisecond))
	}
	if served == 0 {
		t.Errorf("none of the %d calls sent after %s served", after, what)
	}
}

// echoRegistry writes a registry of the echo tool on topic.
func echoRegistry(t *testing.T, topic string) string {
	t.Helper()
	reg := filepath.Join(t.TempDir(), "registry.yaml")
	if err := os.WriteFile(reg, fmt.Appendf(nil, "tool-service:\n  echo-service: {topic: %s}\ntool:\n  echo: {type: tool-service, service: echo-service}\n", topic), 0o600); err != nil {
		t.Fatal(err)
	}
	return reg
}

// runEcho runs a Go SDK echo service on topic until stop, waiting until
// it is subscribed; it returns when that was.
func runEcho(t *testing.T, topic string) (subscribed time.Time, stop func()) {
	t.Helper()
	svc, err := toolservice.New(toolservice.Config{ID: "echo-service", Topic: topic, PulsarURL: brokertest.PulsarURL()}, echo.Handle)
	if err != nil {
		t.Fatal(err)
	}
	stop = brokertest.RunService(t, "echo", svc, 30*time.Second)
	return time.Now(), stop
}

// TestServedOnceSubscribed: calls go on while the echo service is
// stopped, refused NO_LISTENER, and started again: every call sent once
// the new instance has subscribed is served.
func TestServedOnceSubscribed(t *testing.T) {
	t.Parallel()
	topic := brokertest.UniqueTopic("presence")
	_, stop := runEcho(t, topic)
	gw := apptest.Start(t, nil, "--pulsar-admin-url", brokertest.AdminURL(), "--registry", echoRegistry(t, topic),
		"--announcements=false", "--allow-anonymous")
	gw.WaitReady(t, 60*time.Second)
	base := "http://" + gw.HTTPAddr()
	if c := callEcho(base); c.status != http.StatusOK {
		t.Fatalf("echo before the restart: %+v", c)
	}
	calls := startCalling(base)
	stopped := time.Now()
	stop()
	eventually.True(t, 30*time.Second, "calls refused NO_LISTENER with the service stopped", func() bool {
		return calls.saw("NO_LISTENER", stopped)
	})
	subscribed, _ := runEcho(t, topic)
	eventually.True(t, 30*time.Second, "calls served again", func() bool {
		c := callEcho(base)
		return c.status == http.StatusOK && time.Since(subscribed) > time.Second
	})
	refusedAfter(t, calls.end(), subscribed, "the new instance subscribed")
}

// TestRestartedGatewayReadyMeansServing: a gateway stopped and started
// again while the echo service runs refuses no call made from the moment
// its /readyz is 200.
func TestRestartedGatewayReadyMeansServing(t *testing.T) {
	t.Parallel()
	topic := brokertest.UniqueTopic("ready")
	runEcho(t, topic)
	flags := []string{"--pulsar-admin-url", brokertest.AdminURL(), "--registry", echoRegistry(t, topic),
		"--announcements=false", "--allow-anonymous"}
	first := apptest.Start(t, nil, flags...)
	first.WaitReady(t, 60*time.Second)
	if c := callEcho("http://" + first.HTTPAddr()); c.status != http.StatusOK {
		t.Fatalf("echo on the first gateway: %+v", c)
	}
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}
	gw := apptest.Start(t, nil, flags...)
	base := "http://" + gw.HTTPAddr()
	var ready time.Time
	eventually.True(t, 60*time.Second, "the restarted gateway ready", func() bool {
		at := time.Now()
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			ready = at
		}
		return resp.StatusCode == http.StatusOK
	})
	// A burst at once, then calls for a second.
	calls := startCalling(base)
	var burst sync.WaitGroup
	var mu sync.Mutex
	var all []called
	for range 50 {
		burst.Go(func() {
			c := callEcho(base)
			mu.Lock()
			all = append(all, c)
			mu.Unlock()
		})
	}
	burst.Wait()
	eventually.True(t, 10*time.Second, "a second of calls", func() bool { return time.Since(ready) > time.Second })
	refusedAfter(t, append(all, calls.end()...), ready, "/readyz answered 200")
}
