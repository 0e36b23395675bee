package scale

import (
	"bufio"
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
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/wire"
	"google.golang.org/protobuf/types/known/structpb"
)

// longStream is the chunks of each long stream: the echo service's stream
// mode answers "0,", "1,", … "99999".
const longStream = 100000

// slowClientPause is how long each client of the first round stops
// reading, a tenth into its stream.
const slowClientPause = 3 * time.Second

// streamResult is what a client got from one long stream.
type streamResult struct {
	chunks  int           // chunks received in order
	err     string        // how it ended, when not whole
	elapsed time.Duration // from the request to the last byte
}

func (r streamResult) rate() float64 { return float64(r.chunks) / r.elapsed.Seconds() }

// chunkChecker checks chunks against the echo stream, in order.
type chunkChecker struct {
	n, next int
	bad     string
	pause   time.Duration // the reader stops this long after a tenth of the chunks
}

func (c *chunkChecker) add(text string) {
	if c.pause > 0 && c.next == c.n/10 {
		time.Sleep(c.pause) //nolint:forbidigo // a slow client: the reader stops for a while, the stream's flow control must hold
	}
	want := strconv.Itoa(c.next)
	if c.next < c.n-1 {
		want += ","
	}
	if c.bad == "" && text != want {
		c.bad = fmt.Sprintf("chunk %d is %q, want %q", c.next, text, want)
	}
	c.next++
}

func (c *chunkChecker) result(start time.Time, end string) streamResult {
	r := streamResult{chunks: c.next, elapsed: time.Since(start), err: end}
	switch {
	case c.bad != "":
		r.err = c.bad
	case r.err == "" && c.next != c.n:
		r.err = fmt.Sprintf("%d of %d chunks", c.next, c.n)
	}
	return r
}

func streamArgs(n int) map[string]any { return map[string]any{"mode": "stream", "n": n} }

// restLongStream reads an NDJSON (accept "") or SSE stream of n chunks.
func restLongStream(ctx context.Context, base string, n int, accept string, pause time.Duration) streamResult {
	start := time.Now()
	cc := &chunkChecker{n: n, pause: pause}
	body, _ := json.Marshal(map[string]any{"arguments": streamArgs(n)})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/tools/echo:stream", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return cc.result(start, err.Error())
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return cc.result(start, fmt.Sprintf("HTTP %d %s", resp.StatusCode, b))
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	end := ""
	for sc.Scan() {
		line := sc.Bytes()
		if accept == "text/event-stream" {
			if !bytes.HasPrefix(line, []byte("data: ")) {
				continue // event names, blank lines, keep-alive comments
			}
			line = line[len("data: "):]
		}
		var l struct {
			Output  *string `json:"output"`
			Code    *int    `json:"code"`
			Message string  `json:"message"`
		}
		if err := json.Unmarshal(line, &l); err != nil {
			return cc.result(start, fmt.Sprintf("line %q: %v", line, err))
		}
		switch {
		case l.Output != nil:
			cc.add(*l.Output)
		case l.Code != nil && *l.Code != 0:
			end = fmt.Sprintf("status %d: %s", *l.Code, l.Message)
		}
	}
	if err := sc.Err(); err != nil && end == "" {
		end = err.Error()
	}
	return cc.result(start, end)
}

// grpcLongStream reads a StreamTool stream of n chunks.
func grpcLongStream(ctx context.Context, c toolgatev1.ToolServiceClient, n int, pause time.Duration) streamResult {
	start := time.Now()
	cc := &chunkChecker{n: n, pause: pause}
	args, _ := structpb.NewStruct(streamArgs(n))
	st, err := c.StreamTool(ctx, &toolgatev1.StreamToolRequest{Name: "echo", Arguments: args})
	if err != nil {
		return cc.result(start, err.Error())
	}
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return cc.result(start, "")
		}
		if err != nil {
			return cc.result(start, err.Error())
		}
		cc.add(m.GetOutput())
	}
}

// mcpLongStream calls echo through MCP with a progress token: a progress
// notification per chunk, then the result with the chunks joined.
func mcpLongStream(ctx context.Context, base string, n int, pause time.Duration) streamResult {
	start := time.Now()
	cc := &chunkChecker{n: n, pause: pause}
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"mode":"stream","n":%d},"_meta":{"progressToken":"p"}}}`, n)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return cc.result(start, err.Error())
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return cc.result(start, fmt.Sprintf("HTTP %d %s", resp.StatusCode, b))
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	end := "no result"
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, []byte("data: ")) {
			continue
		}
		var m struct {
			Method string `json:"method"`
			Params struct {
				Message string `json:"message"`
			} `json:"params"`
			Result *struct {
				IsError bool `json:"isError"`
				Content []struct {
					Text string `json:"text"`
				} `json:"content"`
			} `json:"result"`
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(line[len("data: "):], &m); err != nil {
			return cc.result(start, fmt.Sprintf("event: %v", err))
		}
		switch {
		case m.Method == "notifications/progress":
			cc.add(m.Params.Message)
		case m.Error != nil:
			end = "JSON-RPC error: " + m.Error.Message
		case m.Result != nil:
			end = ""
			text := ""
			if len(m.Result.Content) > 0 {
				text = m.Result.Content[0].Text
			}
			if m.Result.IsError {
				end = "tool error: " + text
			} else if text != echoStreamText(n) {
				end = fmt.Sprintf("result of %d bytes is not the whole stream", len(text))
			}
		}
	}
	return cc.result(start, end)
}

// directLongStream asks the echo service for n chunks over Pulsar itself,
// without a gateway: the yardstick for a stream's chunks per second. It
// publishes the request as the gateway would, naming a reply topic of its
// own with a receiver queue deep enough for the whole stream.
func directLongStream(t *testing.T, requestTopic string, n int) streamResult {
	t.Helper()
	client, err := pulsar.NewClient(pulsar.ClientOptions{URL: brokertest.PulsarURL(), Logger: plog.DefaultNopLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	replyTopic := wire.ReplyTopic(brokertest.UniqueTopic("direct"))
	cons, err := client.Subscribe(pulsar.ConsumerOptions{Topic: replyTopic, SubscriptionName: "direct",
		ReceiverQueueSize: n + 10, Type: pulsar.Exclusive})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	prod, err := client.CreateProducer(pulsar.ProducerOptions{Topic: requestTopic})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	args, _ := json.Marshal(streamArgs(n))
	id := "direct-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	cc := &chunkChecker{n: n}
	if _, err := prod.Send(ctx, &pulsar.ProducerMessage{
		Payload:    wire.EncodeRequest(wire.Request{User: "direct", Config: "{}", Arguments: string(args)}),
		Properties: map[string]string{wire.PropID: id, wire.PropReplyTo: replyTopic},
	}); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := cons.Receive(ctx)
		if err != nil {
			return cc.result(start, err.Error())
		}
		r, err := wire.DecodeResponse(m.Payload())
		if err != nil {
			return cc.result(start, err.Error())
		}
		if r.Error != nil {
			return cc.result(start, r.Error.Message)
		}
		cc.add(r.Response)
		if r.EndOfStream {
			return cc.result(start, "")
		}
	}
}

// unaryLoad runs c workers calling echo over gRPC until stop is closed,
// and reports the calls made and failed.
func unaryLoad(g *gateway, c int, stop <-chan struct{}) (wait func() (ok, failed int64)) {
	var okN, failN atomic.Int64
	var wg sync.WaitGroup
	for w := range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := invoke(ctx, g, "echo", fmt.Sprintf("load %d/%d", w, i))
				cancel()
				if err != nil {
					failN.Add(1)
				} else {
					okN.Add(1)
				}
			}
		}()
	}
	return func() (int64, int64) { wg.Wait(); return okN.Load(), failN.Load() }
}

// TestLongStreamsWhole: 100,000-chunk streams from the Go echo service
// reach the client whole through every door — REST NDJSON, SSE, gRPC and
// MCP — three rounds, while 64 workers make unary calls beside them; in
// the first round every client stops reading for 3 s on the way. The
// broker drops what a consumer without room cannot take on the reply
// topic (non-persistent): without flow control the gateway falls behind
// and ends such streams with REPLY_LOST. Chunks per second of a lone
// stream, through the gateway and directly over Pulsar, are logged.
func TestLongStreamsWhole(t *testing.T) {
	if err := brokertest.CheckPulsar(); err != nil {
		t.Fatalf("the Pulsar broker is required: %v (start it with `make pulsar-up`, or run `make test`)", err)
	}
	rounds := 3
	if v, err := strconv.Atoi(os.Getenv("TOOLGATE_LONG_STREAM_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	topic := brokertest.UniqueTopic("streams-echo")
	regPath := filepath.Join(t.TempDir(), "registry.yaml")
	reg := fmt.Sprintf("tool-service:\n  echo-service: {topic: %s}\ntool:\n  echo: {type: tool-service, description: echo, service: echo-service}\n", topic)
	if err := os.WriteFile(regPath, []byte(reg), 0o644); err != nil {
		t.Fatal(err)
	}
	startEcho(t, "streams-echo", topic)
	g := startGateway(t, regPath, brokertest.UniqueTopic("gw-streams"), "--default-timeout", "120s")
	base := "http://" + g.gw.HTTPAddr()
	doors := []struct {
		name string
		run  func(ctx context.Context, pause time.Duration) streamResult
	}{
		{"REST NDJSON", func(ctx context.Context, p time.Duration) streamResult {
			return restLongStream(ctx, base, longStream, "", p)
		}},
		{"SSE", func(ctx context.Context, p time.Duration) streamResult {
			return restLongStream(ctx, base, longStream, "text/event-stream", p)
		}},
		{"gRPC", func(ctx context.Context, p time.Duration) streamResult {
			return grpcLongStream(ctx, g.client, longStream, p)
		}},
		{"MCP", func(ctx context.Context, p time.Duration) streamResult {
			return mcpLongStream(ctx, base, longStream, p)
		}},
	}

	// A lone stream first, through the gateway and directly, for the rate.
	direct := directLongStream(t, wire.RequestTopic(topic), longStream)
	// Each stream has 3 minutes of its own: the rounds run one after the
	// other, and a deadline shared by all of them would end the last round
	// early on a slow machine.
	loneCtx, loneCancel := context.WithTimeout(t.Context(), 3*time.Minute)
	lone := doors[2].run(loneCtx, 0)
	loneCancel()
	t.Logf("lone %d-chunk stream: direct over Pulsar %d chunks in %v (%.0f/s, %s); gateway gRPC %d chunks in %v (%.0f/s, %s); gateway ÷ direct %.2f",
		longStream, direct.chunks, direct.elapsed.Round(time.Millisecond), direct.rate(), orWhole(direct.err),
		lone.chunks, lone.elapsed.Round(time.Millisecond), lone.rate(), orWhole(lone.err), lone.rate()/direct.rate())

	failed := 0
	if lone.err != "" {
		failed++
	}
	stop := make(chan struct{})
	wait := unaryLoad(g, 64, stop)
	for round := range rounds {
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
		var wg sync.WaitGroup
		results := make([]streamResult, len(doors))
		for i, d := range doors {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// In the first round each client stops reading for a
				// while, as a slow one would: the service must wait.
				pause := time.Duration(0)
				if round == 0 {
					pause = slowClientPause
				}
				results[i] = d.run(ctx, pause)
			}()
		}
		wg.Wait()
		cancel()
		for i, r := range results {
			t.Logf("round %d %-11s %6d chunks in %v (%.0f/s) %s", round+1, doors[i].name, r.chunks, r.elapsed.Round(time.Millisecond), r.rate(), orWhole(r.err))
			if r.err != "" {
				failed++
			}
		}
	}
	close(stop)
	ok, bad := wait()
	t.Logf("unary load beside the streams: %d calls ok, %d failed", ok, bad)
	if failed > 0 {
		t.Errorf("%d of %d long streams did not arrive whole", failed, 1+rounds*len(doors))
	}
	if bad > 0 {
		t.Errorf("%d unary calls failed beside the streams", bad)
	}
}

func orWhole(err string) string {
	if err == "" {
		return "whole"
	}
	return err
}

// burnCPU keeps every core busy until stop is called or bound passes,
// with goroutines of this process (one per P): the gateway's own
// goroutines — the one reading its broker connection included — wait
// their turn, as in a gateway starved of CPU, while the tool service, a
// process of its own, sends at full speed.
func burnCPU(bound time.Duration) (stop func()) {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for n := uint64(1); ctx.Err() == nil; n++ {
				for i := range 1 << 16 {
					n = n*6364136223846793005 + uint64(i)
				}
				spin.Store(n)
			}
		})
	}
	return func() { cancel(); wg.Wait() }
}

// spin keeps the burners' work from being optimised away.
var spin atomic.Uint64

// TestLongStreamsUnderCPULoad: 100,000-chunk streams reach the client
// whole through REST NDJSON, gRPC and MCP at once while every core is
// kept busy by the test itself (bounded to 4 minutes), the Go echo
// service running as a process of its own.
// A gateway starved of CPU reads its connection late: what the broker
// cannot write to it meanwhile past its write mark it drops. The credit
// all streams hold together is sized below that.
func TestLongStreamsUnderCPULoad(t *testing.T) {
	if err := brokertest.CheckPulsar(); err != nil {
		t.Fatalf("the Pulsar broker is required: %v (start it with `make pulsar-up`, or run `make test`)", err)
	}
	topic := brokertest.UniqueTopic("loaded-echo")
	regPath := filepath.Join(t.TempDir(), "registry.yaml")
	reg := fmt.Sprintf("tool-service:\n  echo-service: {topic: %s}\ntool:\n  echo: {type: tool-service, description: echo, service: echo-service}\n", topic)
	if err := os.WriteFile(regPath, []byte(reg), 0o644); err != nil {
		t.Fatal(err)
	}
	echoProcess(t, topic)
	g := startGateway(t, regPath, brokertest.UniqueTopic("gw-loaded"), "--default-timeout", "240s")
	base := "http://" + g.gw.HTTPAddr()
	doors := []struct {
		name string
		run  func(ctx context.Context) streamResult
	}{
		{"REST NDJSON", func(ctx context.Context) streamResult { return restLongStream(ctx, base, longStream, "", 0) }},
		{"gRPC", func(ctx context.Context) streamResult { return grpcLongStream(ctx, g.client, longStream, 0) }},
		{"MCP", func(ctx context.Context) streamResult { return mcpLongStream(ctx, base, longStream, 0) }},
	}
	stop := burnCPU(4 * time.Minute)
	defer stop()
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	results := make([]streamResult, len(doors))
	var wg sync.WaitGroup
	for i, d := range doors {
		wg.Go(func() { results[i] = d.run(ctx) })
	}
	wg.Wait()
	stop()
	for i, r := range results {
		t.Logf("%-11s %6d chunks in %v (%.0f/s) %s", doors[i].name, r.chunks, r.elapsed.Round(time.Millisecond), r.rate(), orWhole(r.err))
		if r.err != "" {
			t.Errorf("the %s stream did not arrive whole with the machine loaded: %s", doors[i].name, r.err)
		}
	}
}

// echoProcess builds cmd/echo-service and runs it on topic until the test
// ends; it returns once the service has subscribed.
func echoProcess(t *testing.T, topic string) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "echo-service")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "./cmd/echo-service")
	build.Dir = repoRoot(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/echo-service: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "--pulsar-url", brokertest.PulsarURL(), "--topic", topic, "--announce=false")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	eventually.True(t, 30*time.Second, "the echo service subscribed", func() bool {
		return brokertest.Subscriptions(wire.RequestTopic(topic)) > 0
	})
}
