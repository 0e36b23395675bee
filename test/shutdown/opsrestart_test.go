package shutdown

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/eventually"
)

// opSeen is an operation as a gateway answered for it: done, its state.
type opSeen struct {
	done  bool
	state string
}

// TestOperationsAcrossABrokerRestart: operations in flight on two gateways
// when the test's broker stops — their service answering while it is
// away, each reply's send timing out — all end done, read alike on both
// gateways once it is back (the service sends each reply again until the
// operation's deadline); and no gateway ever reports an operation ended
// one way, then another.
func TestOperationsAcrossABrokerRestart(t *testing.T) {
	b, gwBin, topic := ownBrokerWithEcho(t, "opsrestart")
	reg := filepath.Join(t.TempDir(), "registry.yaml")
	if err := os.WriteFile(reg, fmt.Appendf(nil, "tool-service:\n  echo-service: {topic: %s}\ntool:\n  echo: {type: tool-service, service: echo-service}\n", topic), 0o600); err != nil {
		t.Fatal(err)
	}
	ops := brokertest.TestOperations(t).Flags()
	gws := []*gateway{
		startGateway(t, gwBin, "gateway 1", "opsrestart1", b.broker, append(ops, "--registry", reg, "--announcements=false")...),
		startGateway(t, gwBin, "gateway 2", "opsrestart2", b.broker, append(ops, "--registry", reg, "--announcements=false")...),
	}
	for _, g := range gws {
		g.ready(t, "echo")
	}
	get := func(g *gateway, id string) (opSeen, int) {
		resp, err := http.Get("http://" + g.http + "/v1/operations/" + id)
		if err != nil {
			return opSeen{}, 0
		}
		defer resp.Body.Close()
		var v struct {
			Done     bool `json:"done"`
			Metadata struct {
				State string `json:"state"`
			} `json:"metadata"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&v)
		return opSeen{v.Done, v.Metadata.State}, resp.StatusCode
	}
	// Operations that answer 3 s after they start, so that the replies
	// go out while the broker is away.
	const n = 10
	var ids []string
	for i := range n {
		g := gws[i%2]
		resp, err := http.Post("http://"+g.http+"/v1/tools/echo:start", "application/json",
			strings.NewReader(`{"arguments": {"mode": "sleep", "ms": 3000, "msg": "m`+strconv.Itoa(i)+`"}, "timeout": "40s"}`))
		if err != nil {
			t.Fatal(err)
		}
		var op struct {
			Name string `json:"name"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&op)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || op.Name == "" {
			t.Fatalf("start %d: %d", i, resp.StatusCode)
		}
		ids = append(ids, strings.TrimPrefix(op.Name, "operations/"))
	}
	// Both gateways polled all along: what each has shown of each.
	var mu sync.Mutex
	seen := map[string][]opSeen{} // gateway i, id → the answers that changed
	stopPoll := make(chan struct{})
	var polling sync.WaitGroup
	for gi, g := range gws {
		polling.Go(func() {
			for {
				for _, id := range ids {
					s, code := get(g, id)
					if code != http.StatusOK {
						continue
					}
					k := strconv.Itoa(gi) + " " + id
					mu.Lock()
					if l := seen[k]; len(l) == 0 || l[len(l)-1] != s {
						seen[k] = append(seen[k], s)
					}
					mu.Unlock()
				}
				select {
				case <-stopPoll:
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
		})
	}
	defer func() { close(stopPoll); polling.Wait() }()
	b.stop(t)
	downAt := time.Now()
	// Away longer than the services' send timeout (their client's
	// operation timeout, 10 s) after their replies were due (3 s): each
	// reply's first send fails.
	eventually.True(t, 60*time.Second, "the replies' sends timed out with the broker away", func() bool { return time.Since(downAt) > 16*time.Second })
	b.start(t)
	for gi, g := range gws {
		for _, id := range ids {
			eventually.True(t, 120*time.Second, fmt.Sprintf("operation %s done on gateway %d", id, gi+1), func() bool {
				s, _ := get(g, id)
				if s.done && s.state != "DONE" {
					t.Fatalf("operation %s on gateway %d ended %s, want DONE", id, gi+1, s.state)
				}
				return s.done
			})
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for k, l := range seen {
		var ended string
		for _, s := range l {
			switch {
			case s.done && ended == "":
				ended = s.state
			case ended != "" && (!s.done || s.state != ended):
				t.Errorf("gateway, operation %s: ended %s, then showed %+v (all: %+v)", k, ended, s, l)
			}
		}
	}
	t.Logf("%d operations over a broker restart, each done on both gateways: %s", len(ids), strings.Join(ids[:2], ", ")+", …")
}
