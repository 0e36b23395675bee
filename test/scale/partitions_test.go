package scale

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/wire"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

const partitions = 8

// createPartitioned creates topic with n partitions through the admin API.
func createPartitioned(t *testing.T, topic string, n int) {
	t.Helper()
	scheme, rest, _ := strings.Cut(topic, "://")
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, brokertest.AdminURL()+"/admin/v2/"+scheme+"/"+rest+"/partitions", strings.NewReader(strconv.Itoa(n)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("creating %s with %d partitions: %s", topic, n, resp.Status)
	}
}

// consumersOf counts the consumers of every partition of topic, from the
// admin API's partitioned stats.
func consumersOf(t *testing.T, topic string) int {
	t.Helper()
	scheme, rest, _ := strings.Cut(topic, "://")
	resp, err := http.Get(brokertest.AdminURL() + "/admin/v2/" + scheme + "/" + rest + "/partitioned-stats?perPartition=true")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var st struct {
		Partitions map[string]struct {
			Subscriptions map[string]struct {
				Consumers []json.RawMessage `json:"consumers"`
			} `json:"subscriptions"`
		} `json:"partitions"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&st) != nil {
		return 0
	}
	n := 0
	for _, p := range st.Partitions {
		for _, s := range p.Subscriptions {
			n += len(s.Consumers)
		}
	}
	return n
}

// messagesIn is, per partition of topic, the messages it took in.
func messagesIn(t *testing.T, topic string) map[string]int64 {
	t.Helper()
	scheme, rest, _ := strings.Cut(topic, "://")
	resp, err := http.Get(brokertest.AdminURL() + "/admin/v2/" + scheme + "/" + rest + "/partitioned-stats?perPartition=true")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Partitions map[string]struct {
			In int64 `json:"msgInCounter"`
		} `json:"partitions"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("partitioned stats of %s: %v", topic, err)
	}
	out := map[string]int64{}
	for name, p := range st.Partitions {
		out[name] = p.In
	}
	return out
}

// TestPartitionedRequestTopics: a Go SDK service (two replicas) and
// TrustGraph's Python joke service each on a request topic of 8
// partitions, behind a gateway with --pulsar-admin-url. Every call is
// answered and the calls reach every partition; the fail-fast check reads
// the partitions' consumers (a partitioned topic without any fails at once
// with NO_LISTENER); the watch of calls in flight sees the Python
// service's consumers leave when it is killed and ends its calls with
// SERVICE_GONE, not at their deadline.
func TestPartitionedRequestTopics(t *testing.T) {
	if err := brokertest.CheckPulsar(); err != nil {
		t.Fatalf("the Pulsar broker is required: %v (start it with `make pulsar-up`, or run `make test`)", err)
	}
	echoTopic, jokeTopic, noneTopic := brokertest.UniqueTopic("part-echo"), brokertest.UniqueTopic("part-pyjoke"), brokertest.UniqueTopic("part-none")
	for _, tp := range []string{echoTopic, jokeTopic, noneTopic} {
		createPartitioned(t, wire.RequestTopic(tp), partitions)
	}
	regPath := filepath.Join(t.TempDir(), "registry.yaml")
	reg := fmt.Sprintf(`tool-service:
  echo-service: {topic: %s}
  py-joke-service: {topic: %s, config-params: [style]}
  nobody: {topic: %s}
tool:
  echo: {type: tool-service, description: echo, service: echo-service}
  py-tell-joke:
    type: tool-service
    description: TrustGraph's Python joke service
    service: py-joke-service
    style: pun
    arguments: [{name: topic, type: string}]
  nobody: {type: tool-service, description: no service listens, service: nobody}
`, echoTopic, jokeTopic, noneTopic)
	if err := os.WriteFile(regPath, []byte(reg), 0o644); err != nil {
		t.Fatal(err)
	}
	startEcho(t, "part-echo", echoTopic)
	startEcho(t, "part-echo", echoTopic)
	py := startPythonJokesProc(t, jokeTopic)
	eventually.True(t, 60*time.Second, "every partition of the Python service's topic consumed", func() bool {
		return consumersOf(t, wire.RequestTopic(jokeTopic)) >= partitions
	})
	if n := consumersOf(t, wire.RequestTopic(echoTopic)); n != 2*partitions {
		t.Fatalf("%d consumers on the echo topic's partitions, want %d", n, 2*partitions)
	}
	g := startGateway(t, regPath, brokertest.UniqueTopic("gw-part"), "--default-timeout", "30s")

	t.Run("calls answered, spread over the partitions", func(t *testing.T) {
		// Paced, not a burst: a producer keeps to one partition for 50
		// messages at least, and moves on once 100 ms have passed (the
		// client's default router for messages without a key, with the
		// gateway's batching settings), so the spread shows over time.
		const calls, every = 900, 3 // every 3rd call to the Python service
		var wg sync.WaitGroup
		errs := make([]error, calls)
		pace := time.NewTicker(5 * time.Millisecond) // about 200 calls per second
		defer pace.Stop()
		for i := range calls {
			<-pace.C
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				if i%every == 0 {
					errs[i] = invoke(ctx, g, "py-tell-joke", "")
					return
				}
				errs[i] = invoke(ctx, g, "echo", fmt.Sprintf("call-%d", i))
			})
		}
		wg.Wait()
		failed := 0
		for i, err := range errs {
			if err != nil {
				failed++
				if failed <= 5 {
					t.Errorf("call %d: %v", i, err)
				}
			}
		}
		if failed > 0 {
			t.Fatalf("%d of %d calls failed", failed, calls)
		}
		// Echo's 600 calls reach all 8 partitions; the Python service's
		// 300, at a third of the rate, at least 4.
		for _, c := range []struct {
			topic string
			least int
		}{{echoTopic, partitions}, {jokeTopic, 4}} {
			in := messagesIn(t, wire.RequestTopic(c.topic))
			used := 0
			for _, n := range in {
				if n > 0 {
					used++
				}
			}
			t.Logf("%s: calls per partition %v", c.topic, in)
			if len(in) != partitions || used < c.least {
				t.Errorf("%s: calls on %d of %d partitions, want at least %d", c.topic, used, len(in), c.least)
			}
		}
	})

	t.Run("no consumer on any partition: fails at once", func(t *testing.T) {
		st, _ := structpb.NewStruct(map[string]any{})
		_, err := g.client.InvokeTool(t.Context(), &toolgatev1.InvokeToolRequest{Name: "nobody", Arguments: st})
		if status.Code(err) != codes.Unavailable || errReason(err) != "NO_LISTENER" {
			t.Fatalf("a call to a partitioned topic nobody consumes: %v; want UNAVAILABLE NO_LISTENER", err)
		}
	})

	t.Run("the Python service killed mid-call: SERVICE_GONE", func(t *testing.T) {
		// Stopped, it keeps its consumers, which take the calls and answer
		// none; killed, its consumers leave every partition.
		if err := py.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		const n = 16
		before := sumIn(messagesIn(t, wire.RequestTopic(jokeTopic)))
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() {
				st, _ := structpb.NewStruct(map[string]any{"topic": "partitions"})
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				_, errs[i] = g.client.InvokeTool(ctx, &toolgatev1.InvokeToolRequest{Name: "py-tell-joke", Arguments: st})
			})
		}
		// The calls are out once the broker counts them in on the topic.
		eventually.True(t, 30*time.Second, "the calls published", func() bool {
			return sumIn(messagesIn(t, wire.RequestTopic(jokeTopic))) >= before+n
		})
		if err := py.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-py.done
		wg.Wait()
		reasons := map[string]int{}
		for i, err := range errs {
			reasons[errReason(err)]++
			if status.Code(err) != codes.Unavailable {
				t.Errorf("call %d: %v; want UNAVAILABLE (SERVICE_GONE, or NO_LISTENER for one published after the kill)", i, err)
			}
		}
		if reasons["SERVICE_GONE"] == 0 {
			t.Errorf("no call held by the killed service ended with SERVICE_GONE: %v", reasons)
		}
		t.Logf("calls held by the killed Python service ended with %v", reasons)
	})
}

func sumIn(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// errReason is the ErrorInfo reason of a gRPC error.
func errReason(err error) string {
	for _, d := range status.Convert(err).Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei.GetReason()
		}
	}
	return ""
}
