// Command floorgw is the benchmark's floor: the smallest correct forwarder
// from gRPC and HTTP/JSON to a tool service over Pulsar and back, run beside
// the gateway in the same benchmark so that what the gateway costs can be
// read against what forwarding alone costs on the same path.
//
//	floorgw --pulsar-url pulsar://127.0.0.1:6650 --topic bench-echo-…-gw \
//	        --grpc-addr 127.0.0.1:0 --http-addr 127.0.0.1:0
//
// It serves toolgate.v1.ToolService InvokeTool and StreamTool over gRPC and
// POST /v1/tools/{name}:invoke over HTTP/JSON. Every call, whatever tool it
// names, goes to the one tool service whose short topic is --topic: the
// arguments are put into a wire envelope as they came, published with an
// "id" property on the request topic, and the call waits on a channel that
// the one consumer of the response topic feeds by that id.
//
// Nothing else: no authentication, registry, argument validation, deadline
// property, metrics middleware, tracing or call log. It uses pulsar-client-go
// directly, with the same adaptive batching the gateway's transport does
// (whatever gathered while the previous batch awaited its receipt goes as
// one batch), because a forwarder that sent each request on its own would
// pay the broker more and be no floor. GET /metrics gives the Go runtime's
// allocation and GC counters (go_memstats_mallocs_total,
// go_memstats_alloc_bytes_total, go_gc_duration_seconds_count) under the
// names Prometheus' Go collector uses,
// GET /readyz answers once the producer and consumer are up.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	_ "net/http/pprof" // registers /debug/pprof/ on http.DefaultServeMux, served only with --pprof-addr
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	plog "github.com/apache/pulsar-client-go/pulsar/log"
	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/wire"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

// options are the command-line settings.
type options struct {
	grpcAddr  string
	httpAddr  string
	pulsarURL string
	topic     string
	user      string
	queue     int
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var o options
	fs := flag.NewFlagSet("floorgw", flag.ExitOnError)
	fs.StringVar(&o.grpcAddr, "grpc-addr", "127.0.0.1:0", "gRPC listen address")
	fs.StringVar(&o.httpAddr, "http-addr", "127.0.0.1:0", "HTTP/JSON listen address (also /readyz and /metrics)")
	fs.StringVar(&o.pulsarURL, "pulsar-url", "pulsar://127.0.0.1:6650", "Pulsar broker URL")
	fs.StringVar(&o.topic, "topic", "", "short topic of the tool service every call goes to (required)")
	fs.StringVar(&o.user, "user", "anonymous", "envelope user")
	fs.IntVar(&o.queue, "receiver-queue", 10000, "receiver queue of the response consumer")
	pprofAddr := fs.String("pprof-addr", "", "serve net/http/pprof (profiles, /debug/pprof/trace) on this address of its own, for diagnosis; off by default")
	_ = fs.Parse(os.Args[1:])
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if o.topic == "" {
		fmt.Fprintln(os.Stderr, "floorgw: --topic is required")
		os.Exit(2)
	}
	if *pprofAddr != "" {
		l, err := servePprof(*pprofAddr)
		if err != nil {
			log.Error("floorgw: --pprof-addr", "err", err)
			os.Exit(1)
		}
		log.Warn("pprof listening", "addr", l.Addr().String())
	}
	if err := run(ctx, o, log); err != nil {
		log.Error("floorgw stopped", "err", err)
		os.Exit(1)
	}
}

// servePprof serves net/http/pprof's handlers (registered on
// http.DefaultServeMux, which the forwarder's own mux is not) on addr
// until the listener is closed.
func servePprof(addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	go func() { _ = http.Serve(l, nil) }() //nolint:gosec // diagnostics on an address the operator chose
	return l, nil
}

func run(ctx context.Context, o options, log *slog.Logger) error {
	gl, err := net.Listen("tcp", o.grpcAddr)
	if err != nil {
		return err
	}
	hl, err := net.Listen("tcp", o.httpAddr)
	if err != nil {
		gl.Close()
		return err
	}
	return serve(ctx, o, log, gl, hl)
}

// serve forwards the calls arriving on gl (gRPC) and hl (HTTP) until ctx
// ends, then stops in reverse order: listeners, producer, consumer, client.
func serve(ctx context.Context, o options, log *slog.Logger, gl, hl net.Listener) error {
	client, err := pulsar.NewClient(pulsar.ClientOptions{URL: o.pulsarURL, Logger: plog.NewLoggerWithSlog(log)})
	if err != nil {
		gl.Close()
		hl.Close()
		return err
	}
	defer client.Close()
	f, err := newForwarder(client, o)
	if err != nil {
		gl.Close()
		hl.Close()
		return err
	}
	defer f.close()

	gs := grpc.NewServer()
	toolgatev1.RegisterToolServiceServer(gs, &grpcService{f: f})
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/tools/", f.serveInvoke)
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /metrics", serveMetrics)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	errc := make(chan error, 2)
	go func() { errc <- gs.Serve(gl) }()
	go func() { errc <- hs.Serve(hl) }()
	log.Warn("floorgw listening", "grpc", gl.Addr().String(), "http", hl.Addr().String(), "topic", o.topic)
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = hs.Shutdown(sctx)
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-sctx.Done():
		gs.Stop()
	}
	if errors.Is(err, http.ErrServerClosed) || errors.Is(err, grpc.ErrServerStopped) {
		err = nil
	}
	return err
}

// forwarder publishes requests and routes replies to the calls waiting for
// them.
type forwarder struct {
	user     string
	producer pulsar.Producer
	consumer pulsar.Consumer
	queue    chan outgoing
	stop     chan struct{} // closed when the forwarder stops
	sent     chan struct{}
	recvDone chan struct{}

	mu      sync.Mutex
	pending map[string]*waiter
}

// outgoing is a request and what to do when its publish fails.
type outgoing struct {
	msg  *pulsar.ProducerMessage
	done func(pulsar.MessageID, *pulsar.ProducerMessage, error)
}

// waiter is one call waiting for its replies. The consumer appends and
// never waits: a consumer that stopped reading would make the broker drop
// messages for every call (non-persistent topics drop when the client falls
// behind).
type waiter struct {
	mu     sync.Mutex
	queued []wire.Response
	ready  chan struct{} // has a token when queued is not empty
}

func (w *waiter) push(r wire.Response) {
	w.mu.Lock()
	w.queued = append(w.queued, r)
	w.mu.Unlock()
	select {
	case w.ready <- struct{}{}:
	default:
	}
}

// next waits for the next reply message.
func (w *waiter) next(ctx context.Context) (wire.Response, error) {
	for {
		w.mu.Lock()
		if len(w.queued) > 0 {
			r := w.queued[0]
			w.queued = w.queued[1:]
			w.mu.Unlock()
			return r, nil
		}
		w.mu.Unlock()
		select {
		case <-w.ready:
		case <-ctx.Done():
			return wire.Response{}, ctx.Err()
		}
	}
}

var errStopping = errors.New("floorgw is stopping")

// maxBatch bounds one batch of requests.
const maxBatch = 1000

func newForwarder(client pulsar.Client, o options) (*forwarder, error) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	consumer, err := client.Subscribe(pulsar.ConsumerOptions{
		Topic:                       wire.ResponseTopic(o.topic),
		SubscriptionName:            "floorgw-" + hex.EncodeToString(b[:]),
		Type:                        pulsar.Exclusive,
		ReceiverQueueSize:           o.queue,
		SubscriptionInitialPosition: pulsar.SubscriptionPositionLatest,
		// Non-persistent messages are never acknowledged; the grouping ack
		// tracker drops messages whose ids repeat, and on such topics they
		// all do.
		AckGroupingOptions: &pulsar.AckGroupingOptions{MaxSize: 1},
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe: %w", err)
	}
	producer, err := client.CreateProducer(pulsar.ProducerOptions{
		Topic:                   wire.RequestTopic(o.topic),
		BatchingMaxPublishDelay: 100 * time.Millisecond, // flushed by send, not by this timer
		BatchingMaxMessages:     maxBatch,
		MaxPendingMessages:      100000,
		DisableBlockIfQueueFull: true,
	})
	if err != nil {
		consumer.Close()
		return nil, fmt.Errorf("producer: %w", err)
	}
	f := &forwarder{
		user: o.user, producer: producer, consumer: consumer,
		queue: make(chan outgoing, 100000), stop: make(chan struct{}), sent: make(chan struct{}), recvDone: make(chan struct{}),
		pending: map[string]*waiter{},
	}
	go f.send()
	go f.receive()
	return f, nil
}

// send is the adaptive batcher: whatever is queued goes to the client as
// one batch, flushed, and the next batch gathers while this one awaits the
// broker's receipt.
func (f *forwarder) send() {
	defer close(f.sent)
	for {
		var m outgoing
		select {
		case m = <-f.queue:
		case <-f.stop:
			return
		}
		f.producer.SendAsync(context.Background(), m.msg, m.done)
	fill:
		for n := 1; n < maxBatch; n++ {
			select {
			case m = <-f.queue:
				f.producer.SendAsync(context.Background(), m.msg, m.done)
			default:
				break fill
			}
		}
		_ = f.producer.FlushWithCtx(context.Background())
	}
}

// receive routes every reply to the call with its id.
func (f *forwarder) receive() {
	defer close(f.recvDone)
	for {
		m, err := f.consumer.Receive(context.Background())
		if err != nil {
			return // closed
		}
		r, err := wire.DecodeResponse(m.Payload())
		if err != nil {
			r = wire.Response{Error: &wire.Error{Type: "bad-reply", Message: err.Error()}, EndOfStream: true}
		}
		f.deliver(m.Properties()[wire.PropID], r)
	}
}

// deliver hands r to the call with id, unless that call has ended.
func (f *forwarder) deliver(id string, r wire.Response) {
	f.mu.Lock()
	w := f.pending[id]
	f.mu.Unlock()
	if w != nil {
		w.push(r)
	}
}

// close stops the sender (calls still arriving fail), then closes the
// producer and the consumer.
func (f *forwarder) close() {
	close(f.stop)
	<-f.sent
	f.producer.Close()
	f.consumer.Close()
	<-f.recvDone
}

// call publishes arguments (a JSON object) and returns the waiter its
// replies arrive on; done must be called when the call ends.
func (f *forwarder) call(ctx context.Context, arguments string) (*waiter, func(), error) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	payload := wire.EncodeRequest(wire.Request{User: f.user, Arguments: arguments})
	w := &waiter{ready: make(chan struct{}, 1)}
	f.mu.Lock()
	f.pending[id] = w
	f.mu.Unlock()
	done := func() {
		f.mu.Lock()
		delete(f.pending, id)
		f.mu.Unlock()
	}
	m := outgoing{
		msg: &pulsar.ProducerMessage{Payload: payload, Properties: map[string]string{wire.PropID: id}},
		done: func(_ pulsar.MessageID, _ *pulsar.ProducerMessage, err error) {
			if err != nil {
				f.deliver(id, wire.Response{Error: &wire.Error{Type: "publish", Message: err.Error()}, EndOfStream: true})
			}
		},
	}
	select {
	case f.queue <- m:
	case <-ctx.Done():
		done()
		return nil, nil, ctx.Err()
	case <-f.stop:
		done()
		return nil, nil, errStopping
	}
	return w, done, nil
}

// invoke makes a unary call: the reply's chunks joined.
func (f *forwarder) invoke(ctx context.Context, arguments string) (string, error) {
	w, done, err := f.call(ctx, arguments)
	if err != nil {
		return "", err
	}
	defer done()
	var out strings.Builder
	for {
		r, err := w.next(ctx)
		if err != nil {
			return "", err
		}
		if r.Error != nil {
			return "", r.Error
		}
		out.WriteString(r.Response)
		if r.EndOfStream {
			return out.String(), nil
		}
	}
}

type grpcService struct {
	toolgatev1.UnimplementedToolServiceServer
	f *forwarder
}

func (s *grpcService) InvokeTool(ctx context.Context, req *toolgatev1.InvokeToolRequest) (*toolgatev1.InvokeToolResponse, error) {
	out, err := s.f.invoke(ctx, string(appendStruct(nil, req.GetArguments())))
	if err != nil {
		return nil, grpcError(err)
	}
	return &toolgatev1.InvokeToolResponse{Output: out}, nil
}

func (s *grpcService) StreamTool(req *toolgatev1.StreamToolRequest, st grpc.ServerStreamingServer[toolgatev1.StreamToolResponse]) error {
	ctx := st.Context()
	w, done, err := s.f.call(ctx, string(appendStruct(nil, req.GetArguments())))
	if err != nil {
		return grpcError(err)
	}
	defer done()
	for i := int64(0); ; i++ {
		r, err := w.next(ctx)
		if err != nil {
			return grpcError(err)
		}
		if r.Error != nil {
			return grpcError(r.Error)
		}
		if err := st.Send(&toolgatev1.StreamToolResponse{Output: r.Response, Index: i, Last: r.EndOfStream}); err != nil {
			return err
		}
		if r.EndOfStream {
			return nil
		}
	}
}

func grpcError(err error) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	}
	return status.Error(codes.Unavailable, err.Error())
}

// serveInvoke is POST /v1/tools/{name}:invoke with {"arguments": {...}}.
func (f *forwarder) serveInvoke(w http.ResponseWriter, r *http.Request) {
	if _, ok := strings.CutSuffix(r.URL.Path, ":invoke"); !ok {
		http.Error(w, `{"message":"not found"}`, http.StatusNotFound)
		return
	}
	var body struct {
		Arguments json.RawMessage `json:"arguments"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&body); err != nil {
		http.Error(w, `{"message":"body is not JSON"}`, http.StatusBadRequest)
		return
	}
	args := string(body.Arguments)
	if args == "" || args == "null" {
		args = "{}"
	}
	out, err := f.invoke(r.Context(), args)
	if err != nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadGateway)
		_ = json.NewEncoder(w).Encode(map[string]string{"message": err.Error()})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(struct {
		Output string `json:"output"`
	}{out})
}

// serveMetrics gives the runtime's allocation and GC counters under the
// names Prometheus' Go collector uses, so the benchmark reads both servers
// alike.
func serveMetrics(w http.ResponseWriter, _ *http.Request) {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	fmt.Fprintf(w, "# TYPE go_memstats_mallocs_total counter\ngo_memstats_mallocs_total %d\n# TYPE go_memstats_alloc_bytes_total counter\ngo_memstats_alloc_bytes_total %d\n# TYPE go_gc_duration_seconds summary\ngo_gc_duration_seconds_count %d\n# TYPE go_goroutines gauge\ngo_goroutines %d\n",
		m.Mallocs, m.TotalAlloc, m.NumGC, runtime.NumGoroutine())
}

// appendStruct writes s as a JSON object (nil as {}). Non-finite numbers,
// which JSON cannot hold, are written as null: the floor does not validate.
func appendStruct(b []byte, s *structpb.Struct) []byte {
	b = append(b, '{')
	i := 0
	for k, v := range s.GetFields() {
		if i > 0 {
			b = append(b, ',')
		}
		i++
		b = appendString(b, k)
		b = append(b, ':')
		b = appendValue(b, v)
	}
	return append(b, '}')
}

func appendValue(b []byte, v *structpb.Value) []byte {
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		return appendString(b, k.StringValue)
	case *structpb.Value_NumberValue:
		f := k.NumberValue
		if f != f || f > 1.7976931348623157e308 || f < -1.7976931348623157e308 {
			return append(b, "null"...)
		}
		return strconv.AppendFloat(b, f, 'g', -1, 64)
	case *structpb.Value_BoolValue:
		return strconv.AppendBool(b, k.BoolValue)
	case *structpb.Value_StructValue:
		return appendStruct(b, k.StructValue)
	case *structpb.Value_ListValue:
		b = append(b, '[')
		for i, e := range k.ListValue.GetValues() {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendValue(b, e)
		}
		return append(b, ']')
	}
	return append(b, "null"...)
}

// appendString writes a JSON string: quotes, backslashes and control
// characters escaped, the rest (valid UTF-8, as protobuf strings are) as is.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
