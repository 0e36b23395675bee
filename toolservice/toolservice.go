// Package toolservice is the Go SDK for writing tool services: programs that
// take tool calls from an Apache Pulsar request topic and answer on the
// matching response topic, speaking the same wire format as TrustGraph's
// Python DynamicToolService. Go and Python replicas of one service can share
// a topic: both subscribe as "<id>-request" with a shared subscription.
//
// A minimal service:
//
//	svc, err := toolservice.New(toolservice.Config{
//		ID: "joke-service", Topic: "joke", PulsarURL: "pulsar://127.0.0.1:6650",
//	}, func(ctx context.Context, req *toolservice.Request) (any, error) {
//		return "Why did the gopher cross the road?", nil
//	})
//	if err != nil { ... }
//	err = svc.Run(ctx) // until ctx ends; then finishes in-flight calls
//
// By default a Service creates its own Pulsar client from Config.PulsarURL.
// Options add token authentication (WithToken, WithTokenFile, or any
// pulsar.Authentication with WithAuthentication) and a CA for pulsar+ssl://
// URLs (WithTLSTrustCerts), or hand the service a client the program
// already has (WithPulsarClient).
//
// With WithCallerJWKS, the service takes only calls a gateway of its
// deployment vouches for: each request's caller assertion
// (wire.PropCaller) is checked against the gateway's public keys, and the
// handler reads who the call comes from with CallerFrom.
//
// A tool announced with Result ResultMCPContent answers with MCP content
// blocks (Content) and may send log records while it runs (Request.Log),
// which a gateway's MCP door hands to MCP clients as such.
//
// With Config.Announce set, each Service is one instance (replica) of its
// service id, and gateways serve the service's tools while any instance is
// there. Its lifecycle: Run subscribes, then announces the instance with a
// lease (Announcement.Lease, DefaultLease); it renews the lease every third
// of it; when ctx ends it withdraws its instance only, goes on serving for
// a moment while gateways see that, closes its subscription (handling the
// requests the broker had already sent it) and finishes the calls in
// flight — all of it within Config.StopGrace and StopMargin, whatever the
// broker does (with the broker away, what has not closed by then is left:
// ErrAbandoned). An instance that crashes stops renewing, and gateways let it go
// when its lease runs out; when no instance is left, calls fail at once.
// A rolling update — start a new replica, wait for it to announce, stop an
// old one — never leaves the tools unlisted. Replies name the instance
// (wire.PropInstance); a request that asks for a receipt
// (wire.PropReceipt) and is not answered within wire.ReceiptAfter gets
// one, and a request whose id this instance runs, or answered within the
// last minute, is not run again (a gateway publishes a request again when
// it heard nothing of it after an instance stopped: a closing consumer may
// have dropped it).
package toolservice

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/pulsar-client-go/pulsar"
	"github.com/toolgate/toolgate/internal/ratelog"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/internal/transport/pulsarbroker"
	"github.com/toolgate/toolgate/wire"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Handler answers one call. It returns the reply: a string is sent as is,
// nil as the empty string, anything else encoded as JSON the way Python's
// json.dumps writes it. Chunks sent with req.Send before it returns reach
// the caller first, as a stream. A returned *Error reaches the caller with
// its type; any other error is reported as type "tool-service-error".
type Handler func(ctx context.Context, req *Request) (any, error)

// Request is one call as the handler sees it.
type Request struct {
	// ID is the caller's correlation id.
	ID string
	// User is the caller's identity, as the gateway authenticated it.
	User string
	// Config holds the configuration values of the tool that was called
	// (numbers as json.Number, as in Arguments).
	Config map[string]any
	// Arguments holds the call's arguments. Numbers are json.Number,
	// exactly as the caller wrote them (123456789012345678 stays that,
	// which a float64 cannot hold): use their Int64, Float64 or String.
	Arguments map[string]any
	// Properties are the request message's properties (id, deadline,
	// traceparent, …).
	Properties map[string]string

	send func(text string) error
}

// ErrNoCall is what Send returns on a Request that no Service delivered
// (one a test built itself, say): there is no caller to stream to.
var ErrNoCall = errors.New("toolservice: Send on a Request that no Service delivered")

// Send streams one chunk of the reply to the caller before the handler
// returns the final one. It does not wait for the broker's receipt: chunks
// go out in order with up to 64 unconfirmed, and Send blocks only beyond
// that (or returns the call context's error). Once a chunk is lost, Send
// returns that error, and the caller receives an error instead of the
// final reply. Send is not meant to be called from several goroutines at
// once.
func (r *Request) Send(text string) error {
	if r == nil || r.send == nil {
		return ErrNoCall
	}
	return r.send(text)
}

// Error is a failure with a type the caller can act on. The gateway maps
// well-known types to gRPC codes: "invalid-argument", "not-found",
// "permission-denied", "too-many-requests", "timeout", "unavailable".
type Error struct {
	Type    string
	Message string
}

func (e *Error) Error() string { return e.Type + ": " + e.Message }

// Errorf returns an *Error of the given type.
func Errorf(typ, format string, args ...any) *Error {
	return &Error{Type: typ, Message: fmt.Sprintf(format, args...)}
}

// DefaultMaxConcurrency is Config.MaxConcurrency's default.
const DefaultMaxConcurrency = 64

// DefaultStopGrace is Config.StopGrace's default.
const DefaultStopGrace = 10 * time.Second

// Config says which topics a service uses and how it behaves.
type Config struct {
	// ID names the service; its subscription is "<ID>-request".
	ID string
	// Topic is the short topic name: requests arrive on
	// non-persistent://tg/request/<Topic>, replies go to
	// non-persistent://tg/response/<Topic>.
	Topic string
	// RequestTopic and ResponseTopic, when set, override Topic with full
	// topic names (or TrustGraph's short form "request:tg:joke").
	RequestTopic  string
	ResponseTopic string
	// PulsarURL of the broker, e.g. pulsar://127.0.0.1:6650, or
	// pulsar+ssl://… for TLS. Not used with WithPulsarClient.
	PulsarURL string
	// MaxConcurrency bounds the calls handled at once (default
	// DefaultMaxConcurrency).
	MaxConcurrency int
	// RequestQueue is how many requests the service's consumer takes from
	// the broker ahead of its handlers (default max(10000,
	// 4×MaxConcurrency)). The request topic is non-persistent: requests
	// beyond it are dropped by the broker, so callers (a gateway's
	// --max-in-flight-per-service) should keep below it.
	RequestQueue int
	// StopGrace is how long Run waits for calls in flight after its ctx
	// ends before cancelling them (DefaultStopGrace). Run returns at most
	// StopMargin later, whatever the broker does (see Run).
	StopGrace time.Duration
	// Logger (default slog.Default()).
	Logger *slog.Logger
	// Announce, when set, is announced to gateways once Run has subscribed
	// and withdrawn when Run ends (see Announcement).
	Announce *Announcement
	// TracerProvider, when set, records a span per request, continuing the
	// caller's trace (the request's traceparent): "execute_tool <tool>",
	// with the attributes of OpenTelemetry's semantic conventions 1.41.0
	// for GenAI tool execution and messaging. The handler's context
	// carries it. Nil: no spans (a handler's own still join the trace).
	TracerProvider trace.TracerProvider
}

// Option changes how a Service connects to the broker. Options are made
// by the With… functions of this package.
type Option func(*options)

// options are the connection settings the options change.
type options struct {
	authentication    pulsar.Authentication // of the client the service creates
	tlsTrustCertsFile string                // CA trusted for pulsar+ssl:// URLs
	client            pulsar.Client         // the caller's, used instead of creating one
	set               []string              // the options given, in order, to report conflicts
	errs              []error               // problems an option found with its own argument

	// The caller check (WithCallerJWKS, WithCallerAudience,
	// WithCallerIssuer).
	callerJWKS, callerIss string
	callerAud             []string
}

// WithAuthentication authenticates the service's Pulsar client with a,
// e.g. pulsar.NewAuthenticationOAuth2(…) or pulsar.NewAuthenticationTLS(…).
func WithAuthentication(a pulsar.Authentication) Option {
	return func(o *options) {
		o.set = append(o.set, "WithAuthentication")
		if a == nil {
			o.errs = append(o.errs, errors.New("WithAuthentication: nil authentication"))
		}
		o.authentication = a
	}
}

// WithToken authenticates the service's Pulsar client with a token (a
// JWT the broker's token authentication accepts).
func WithToken(token string) Option {
	return func(o *options) {
		o.set = append(o.set, "WithToken")
		if strings.TrimSpace(token) == "" {
			o.errs = append(o.errs, errors.New("WithToken: empty token"))
		}
		o.authentication = pulsar.NewAuthenticationToken(token)
	}
}

// WithTokenFile authenticates the service's Pulsar client with the token
// held in a file. The file is read again on every connection to the
// broker, so a token rotated in place is picked up on reconnect. New fails
// when the file cannot be read or is empty.
func WithTokenFile(path string) Option {
	return func(o *options) {
		o.set = append(o.set, "WithTokenFile")
		if err := readableFile(path, true); err != nil {
			o.errs = append(o.errs, fmt.Errorf("WithTokenFile: %w", err))
		}
		o.authentication = pulsar.NewAuthenticationTokenFromFile(path)
	}
}

// WithTLSTrustCerts makes the service's Pulsar client trust the CA
// certificates in a PEM file when it connects to a pulsar+ssl:// URL.
func WithTLSTrustCerts(path string) Option {
	return func(o *options) {
		o.set = append(o.set, "WithTLSTrustCerts")
		if err := readableFile(path, false); err != nil {
			o.errs = append(o.errs, fmt.Errorf("WithTLSTrustCerts: %w", err))
		}
		o.tlsTrustCertsFile = path
	}
}

// WithPulsarClient makes the service use a Pulsar client the program
// already has (and configured: URL, authentication, TLS) instead of
// creating one; Config.PulsarURL is then not used. The service creates its
// own consumer and producers on it and closes them when Run returns, but
// leaves the client open for its owner.
func WithPulsarClient(c pulsar.Client) Option {
	return func(o *options) {
		o.set = append(o.set, "WithPulsarClient")
		if c == nil {
			o.errs = append(o.errs, errors.New("WithPulsarClient: nil client"))
		}
		o.client = c
	}
}

func readableFile(path string, nonEmpty bool) error {
	if path == "" {
		return errors.New("empty file name")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if nonEmpty && strings.TrimSpace(string(b)) == "" {
		return fmt.Errorf("%s is empty", path)
	}
	return nil
}

// check reports options that cannot go together.
func check(o *options) error {
	if len(o.errs) > 0 {
		return errors.Join(o.errs...)
	}
	var auth, client, other []string
	for _, n := range o.set {
		switch n {
		case "WithAuthentication", "WithToken", "WithTokenFile":
			auth = append(auth, n)
		case "WithPulsarClient":
			client = append(client, n)
		default:
			other = append(other, n)
		}
	}
	switch {
	case len(auth) > 1:
		return fmt.Errorf("%s: give one way to authenticate", strings.Join(auth, " and "))
	case len(client) > 1:
		return fmt.Errorf("%s: give one client", strings.Join(client, " and "))
	case len(client) == 1 && len(auth)+len(other) > 0:
		return fmt.Errorf("%s cannot be combined with %s, which configure a client the service creates itself: configure the client you pass instead",
			client[0], strings.Join(append(auth, other...), ", "))
	}
	return nil
}

// Service is a running tool service.
type Service struct {
	cfg       Config
	handler   Handler
	log       *slog.Logger
	slow      *slog.Logger // log, rate-limited: for what repeats while the broker is away
	broker    *pulsarbroker.Pulsar
	reqTopic  string
	respTopic string
	// flowTopic takes the grants of callers that do flow control
	// (wire.PropCredit), one per Service; "" when it could not be
	// subscribed (then chunks are sent without waiting for credit).
	flowTopic string
	flows     sync.Map // call id → *chunkSender of a flow-controlled stream
	// cancelTopic is where callers give calls up when they do not know
	// the instance (wire.CancelTopic); every instance reads it on a
	// subscription of its own, named after instance.
	cancelTopic string
	instance    string
	calls       calls         // the calls running here, and early cancels
	recent      recentReplies // the last reply of recent calls, for a resend
	// receipts holds the calls taken here that asked for a receipt
	// (wire.PropReceipt), until they end: call id → *receiptWait.
	receipts sync.Map
	// caller checks the requests' caller assertions (WithCallerJWKS);
	// nil: not checked.
	caller *callerCheck

	ready     chan struct{} // closed once Run has subscribed
	sem       chan struct{}
	queue     requestQueue   // the requests taken, waiting for a slot (queue.go)
	wg        sync.WaitGroup // the calls running
	resends   sync.WaitGroup // replies being sent again (resend)
	handled   atomic.Int64
	dropped   atomic.Int64
	cancelled atomic.Int64
	resent    atomic.Int64
	repeated  atomic.Int64
	refused   atomic.Int64
	callCtx   context.Context
	cancelFn  context.CancelFunc
	// stopped is set, under acceptMu, once Run no longer waits for calls
	// to begin: a request its subscription hands over after that (a
	// close that did not finish in time) is not run.
	acceptMu sync.Mutex
	stopped  bool

	// Announcements (announce.go).
	announceMu sync.Mutex
	announced  bool
	current    *Announcement // the one last announced
	announceWG sync.WaitGroup
}

// New checks cfg and prepares the service; Run starts it.
func New(cfg Config, h Handler, opts ...Option) (*Service, error) {
	if cfg.ID == "" {
		return nil, errors.New("toolservice: empty ID")
	}
	if h == nil {
		return nil, errors.New("toolservice: nil handler")
	}
	if cfg.MaxConcurrency <= 0 {
		cfg.MaxConcurrency = DefaultMaxConcurrency
	}
	if cfg.RequestQueue <= 0 {
		cfg.RequestQueue = max(10000, 4*cfg.MaxConcurrency)
	}
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = DefaultStopGrace
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Service{cfg: cfg, handler: h, log: cfg.Logger.With("service", cfg.ID)}
	s.slow = ratelog.New(s.log, pulsarbroker.DefaultLogEvery)
	var err error
	switch {
	case cfg.RequestTopic != "" || cfg.ResponseTopic != "":
		if s.reqTopic, err = wire.ExpandQueue(cfg.RequestTopic); err != nil {
			return nil, fmt.Errorf("toolservice: request topic: %w", err)
		}
		if s.respTopic, err = wire.ExpandQueue(cfg.ResponseTopic); err != nil {
			return nil, fmt.Errorf("toolservice: response topic: %w", err)
		}
	case cfg.Topic != "":
		s.reqTopic, s.respTopic = wire.RequestTopic(cfg.Topic), wire.ResponseTopic(cfg.Topic)
		if err := wire.ValidateTopic(s.reqTopic); err != nil {
			return nil, fmt.Errorf("toolservice: %w", err)
		}
	default:
		return nil, errors.New("toolservice: set Topic, or RequestTopic and ResponseTopic")
	}
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if err := check(&o); err != nil {
		return nil, fmt.Errorf("toolservice: %w", err)
	}
	if cfg.PulsarURL == "" && o.client == nil {
		return nil, errors.New("toolservice: empty PulsarURL")
	}
	if err := s.checkCallers(o); err != nil {
		return nil, fmt.Errorf("toolservice: %w", err)
	}
	// A deep prefetch queue: a non-persistent topic drops what a
	// consumer without free queue slots cannot take, and a burst of
	// requests arrives faster than MaxConcurrency handlers drain it.
	b, err := pulsarbroker.New(pulsarbroker.Options{
		URL: cfg.PulsarURL, Client: o.client, Logger: s.log, ReceiverQueueSize: cfg.RequestQueue,
		Authentication: o.authentication, TLSTrustCertsFilePath: o.tlsTrustCertsFile,
	})
	if err != nil {
		return nil, fmt.Errorf("toolservice: %w", err)
	}
	s.broker = b // closed by Run; a client passed in stays open
	var inst [6]byte
	_, _ = rand.Read(inst[:])
	s.instance = hex.EncodeToString(inst[:])
	s.flowTopic = wire.FlowTopic(s.reqTopic, s.instance)
	s.cancelTopic = wire.CancelTopic(s.reqTopic)
	s.calls.init()
	s.sem = make(chan struct{}, cfg.MaxConcurrency)
	s.queue.init(cfg.RequestQueue)
	s.ready = make(chan struct{})
	return s, nil
}

// Ready is closed once Run has subscribed to the request topic: calls
// published from then on reach the service. (Request topics are
// non-persistent, so a call published before that is lost.) It stays open
// when Run fails to subscribe; Run's error says why.
func (s *Service) Ready() <-chan struct{} { return s.ready }

// Instance is the id of this instance (replica) of the service, random per
// Service: its announcements and withdrawal name it (wire.PropInstance).
func (s *Service) Instance() string { return s.instance }

// RequestTopic is the topic the service listens on.
func (s *Service) RequestTopic() string { return s.reqTopic }

// ResponseTopic is the topic the service answers on, unless a request
// names a reply topic of its own in the wire.PropReplyTo property (as the
// gateway does, one topic per gateway instance): then its replies go there,
// and only there, provided the topic is in the response topic's
// namespace (wire.ReplyToAllowed); a reply-to anywhere else is ignored, so
// a caller cannot have replies sent to an arbitrary topic.
func (s *Service) ResponseTopic() string { return s.respTopic }

// Run subscribes and handles calls until ctx ends, then stops: it
// withdraws its announcement, stops taking new calls, waits up to
// StopGrace for those in flight (cancelling them after that), and closes
// its subscriptions, producers and client. It returns an error if it
// cannot subscribe.
//
// Run returns at most StopGrace + StopMargin after ctx ends, whatever
// the broker does. With the broker away, closing waits for it: what has
// not closed by then — subscriptions, producers and the replies they
// hold, the client, calls still sending their reply — is left behind,
// logged once, and Run returns an error wrapping ErrAbandoned.
func (s *Service) Run(ctx context.Context) error {
	s.callCtx, s.cancelFn = context.WithCancel(context.WithoutCancel(ctx))
	defer s.cancelFn()
	go s.dispatch()
	defer s.closeQueue()
	sub, err := s.broker.Subscribe(ctx, s.reqTopic, s.cfg.ID+"-request", transport.Shared, s.accept)
	if err != nil {
		cctx, cancel := context.WithTimeout(context.Background(), s.cfg.StopGrace)
		defer cancel()
		s.broker.CloseWithin(cctx) // a client passed in stays open
		return fmt.Errorf("toolservice %s: %w", s.cfg.ID, err)
	}
	// The flow topic before the first call: a caller's grants must find it.
	flowSub, err := s.broker.Subscribe(ctx, s.flowTopic, s.cfg.ID+"-flow", transport.Exclusive, s.grant)
	if err != nil {
		s.log.Warn("cannot subscribe to the flow topic; streams are sent without flow control", "topic", s.flowTopic, "err", err)
		s.flowTopic = ""
	}
	// Cancels for calls whose instance the caller does not know: each
	// instance hears them all, on a subscription of its own.
	cancelSub, err := s.broker.Subscribe(ctx, s.cancelTopic, s.cfg.ID+"-cancel-"+s.instance, transport.Exclusive, s.grant)
	if err != nil {
		s.log.Warn("cannot subscribe to the cancel topic; calls given up before their first chunk run to their end", "topic", s.cancelTopic, "err", err)
		s.cancelTopic = ""
	}
	close(s.ready)
	s.log.Info("tool service listening", "request_topic", s.reqTopic, "response_topic", s.respTopic,
		"subscription", s.cfg.ID+"-request", "max_concurrency", s.cfg.MaxConcurrency, "flow_topic", s.flowTopic,
		"cancel_topic", s.cancelTopic)
	s.announceOnStart(ctx)
	<-ctx.Done()
	return s.stop(sub, flowSub, cancelSub)
}

// StopMargin is how long past StopGrace Run may take to return after its
// ctx ended: for the calls cancelled at the end of the grace to send
// their replies (callsEndWait), and for the subscriptions, producers and
// client to close.
const StopMargin = 2 * time.Second

// callsEndWait is how long the calls cancelled at the end of the stop
// grace have to send their replies before the closes begin.
const callsEndWait = time.Second

// ErrAbandoned is what Run returns (wrapped, with what was left) when it
// stopped at its deadline, StopGrace + StopMargin after its ctx ended,
// before everything had closed: the closes wait for a broker that does
// not answer. The service has stopped all the same.
var ErrAbandoned = errors.New("stopped, abandoning what had not closed by the stop's deadline")

// stop ends Run: the announcement withdrawn, the request subscription
// closed (handling what it had received), the calls waited for until the
// grace ends and cancelled then, the other subscriptions, the producers
// and the client closed — all within StopGrace + StopMargin of its start.
func (s *Service) stop(sub, flowSub, cancelSub transport.Subscription) error {
	start := time.Now()
	graceEnd := start.Add(s.cfg.StopGrace)
	deadline := graceEnd.Add(StopMargin)
	grace, cancelGrace := context.WithDeadline(context.Background(), graceEnd)
	defer cancelGrace()
	s.withdrawOnStop(grace) // gateways stop routing calls here first
	// No new calls: once the close has returned, accept has for the last
	// time. A close that waits for the broker past the grace goes on
	// (CloseWithin below tells whether it ended); a request it hands over
	// later is not run — a gateway publishes again the calls that heard
	// nothing from an instance that left.
	within(grace, func() { _ = sub.Close() })
	// What was taken starts as slots free up, within the grace.
	s.queue.drained(grace)
	s.acceptMu.Lock()
	s.stopped = true
	s.acceptMu.Unlock()
	s.closeQueue()
	calls := make(chan struct{})
	go func() { s.wg.Wait(); close(calls) }()
	select {
	case <-calls:
	case <-grace.Done():
		s.log.Warn("stop grace period over; cancelling calls in flight")
		s.cancelFn()
		t := time.NewTimer(callsEndWait)
		select {
		case <-calls:
		case <-t.C:
		}
		t.Stop()
	}
	// The flow and cancel subscriptions after the calls, whose streams and
	// cancels they serve; replies being sent again (the cancel topic
	// starts no more of them) before the client closes.
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	var wg sync.WaitGroup
	for _, sub := range []transport.Subscription{flowSub, cancelSub} {
		if sub != nil {
			wg.Go(func() { _ = sub.Close() })
		}
	}
	within(ctx, func() { wg.Wait(); s.resends.Wait() })
	left := s.broker.CloseWithin(ctx) // a client passed in stays open
	running := 0
	select {
	case <-calls:
	case <-ctx.Done():
		running = len(s.sem)
	}
	stats := []any{"handled", s.handled.Load(), "dropped", s.dropped.Load(), "cancelled", s.cancelled.Load()}
	if left.Empty() && running == 0 {
		s.log.Info("tool service stopped", stats...)
		return nil
	}
	// Once, with all of it: the broker's client would say it again and
	// again.
	as := append(stats, "took", time.Since(start).Round(time.Millisecond))
	if len(left.Subscriptions) > 0 {
		as = append(as, "subscriptions", left.Subscriptions)
	}
	if len(left.Producers) > 0 {
		as = append(as, "producers", left.Producers, "queued_messages", left.Queued)
	}
	if left.Client {
		as = append(as, "pulsar_client", true)
	}
	if running > 0 {
		as = append(as, "calls", running)
	}
	s.log.Warn("tool service stopped at its deadline, abandoning what had not closed: the broker does not answer", as...)
	return fmt.Errorf("toolservice %s: %w: %d subscription(s), %d producer(s), %d call(s) still open", s.cfg.ID, ErrAbandoned,
		len(left.Subscriptions), len(left.Producers), running)
}

// within runs f on a goroutine of its own and reports whether it returned
// before ctx ended; if not, it is left running.
func within(ctx context.Context, f func()) bool {
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		select {
		case <-done:
			return true
		default:
			return false
		}
	}
}

// Stats are a Service's counters since New.
type Stats struct {
	// Handled counts the calls whose handler returned.
	Handled int64
	// Dropped counts the requests dropped because their deadline had
	// passed before their turn came.
	Dropped int64
	// Cancelled counts the calls the caller gave up (wire.CreditCancel)
	// while they ran here — their handler's context ended, with
	// ErrCallerGone as its cause — or before they started (the handler
	// did not run).
	Cancelled int64
	// Resent counts the replies published again at a caller's request
	// (wire.CreditResend): its consumer was away when they were sent.
	Resent int64
	// Repeated counts the requests a caller published again (it had
	// heard nothing for the call, wire.PropReceipt) that this instance had
	// taken already: not run again; a receipt, or the kept reply, is sent
	// instead.
	Repeated int64
	// CallersRefused counts the requests refused for their caller
	// assertion (WithCallerJWKS): missing, forged, expired, replayed or
	// for another service.
	CallersRefused int64
}

// Stats returns the service's counters.
func (s *Service) Stats() Stats {
	return Stats{Handled: s.handled.Load(), Dropped: s.dropped.Load(), Cancelled: s.cancelled.Load(), Resent: s.resent.Load(),
		Repeated: s.repeated.Load(), CallersRefused: s.refused.Load()}
}

// grant takes a caller's grant for one of its streams (wire.PropCredit),
// from the flow topic: more credit, or the caller is gone; or a cancel or
// a request to send a reply again (resend) from the cancel topic. A cancel ends the call's context (calls.cancel);
// grants for calls not streaming here (ended, or never flow-controlled)
// are ignored.
func (s *Service) grant(m transport.Message) {
	id := m.Properties[wire.PropID]
	credit := m.Properties[wire.PropCredit]
	if credit == wire.CreditResend {
		s.resend(id)
		return
	}
	if credit == wire.CreditCancel {
		if id == "" || id == "unknown" {
			return
		}
		// The context first, then the stream: a handler whose Send fails
		// because the caller is gone finds its context ended already, with
		// ErrCallerGone as the cause.
		if s.calls.cancel(id, time.Now()) {
			s.cancelled.Add(1)
			s.log.Debug("call given up by the caller; its context is cancelled", "id", id)
		}
		if v, ok := s.flows.Load(id); ok {
			v.(*chunkSender).cancel()
		}
		return
	}
	v, ok := s.flows.Load(id)
	if !ok {
		return
	}
	if n, err := strconv.Atoi(credit); err == nil {
		v.(*chunkSender).grant(n)
	}
}

// resend publishes once more the last reply of call id, when this instance
// answered it within the last minute (wire.CreditResend), and reports
// whether it did; it does not wait for the broker.
func (s *Service) resend(id string) bool {
	rep, ok := s.recent.take(id, time.Now())
	if !ok {
		return false
	}
	s.resent.Add(1)
	s.resends.Add(1)
	go func() {
		defer s.resends.Done()
		// Bounded, and ended with the calls when the stop grace runs out.
		ctx, cancel := context.WithTimeout(s.callCtx, 10*time.Second)
		defer cancel()
		if err := s.broker.Publish(ctx, rep.topic, rep.msg); err != nil {
			s.log.Warn("cannot send a reply again", "id", id, "topic", rep.topic, "err", err)
			return
		}
		s.log.Debug("reply sent again at the caller's request", "id", id, "topic", rep.topic)
	}()
	return true
}

// accept runs on the subscription's goroutine: it waits for a free slot and
// hands the message to a goroutine of its own.
func (s *Service) accept(m transport.Message) {
	// toolgate's words in one property (wire.PropCall), as properties of
	// their own from here on.
	m.Properties = wire.ExpandCall(m.Properties)
	var rw *receiptWait
	if m.Properties[wire.PropReceipt] != "" {
		// Before waiting for a slot: the receipt's clock starts when the
		// request is taken, not when it runs.
		var repeated bool
		if rw, repeated = s.takeReceipted(m); repeated {
			return
		}
	}
	s.enqueue(m, rw)
}

// start runs request m (rw: its receipt, if it asked for one) on a
// goroutine of its own once a slot is free; after the stop it is not run.
func (s *Service) start(m transport.Message, rw *receiptWait) {
	s.sem <- struct{}{}
	s.acceptMu.Lock()
	if s.stopped {
		// Handed over by a subscription whose close Run stopped waiting
		// for: nobody waits for the call now. Not run; a gateway hears
		// the instance is gone.
		s.acceptMu.Unlock()
		<-s.sem
		if rw != nil {
			s.endReceipted(rw)
		}
		return
	}
	s.wg.Add(1)
	s.acceptMu.Unlock()
	go func() {
		defer func() { <-s.sem; s.wg.Done() }()
		if rw != nil {
			defer s.endReceipted(rw)
		}
		s.serve(m, rw)
	}()
}

// replyTopicOf is where the replies to request m go: the topic its
// wire.PropReplyTo names (the calling gateway's own) when that is in the
// response namespace, else the service's response topic; warn logs a
// reply-to refused.
func (s *Service) replyTopicOf(m transport.Message, warn bool) string {
	rt := m.Properties[wire.PropReplyTo]
	switch {
	case rt == "":
	case wire.ReplyToAllowed(rt, s.respTopic):
		return rt
	case warn:
		s.log.Warn("ignoring a reply-to outside the response namespace; answering on the response topic",
			"id", m.Properties[wire.PropID], "reply_to", rt, "response_topic", s.respTopic)
	}
	return s.respTopic
}

func (s *Service) serve(m transport.Message, rw *receiptWait) {
	id := m.Properties[wire.PropID]
	if id == "" {
		id = "unknown" // what the Python base class answers with
	}
	ctx := s.callCtx
	if m.Properties[wire.PropTraceparent] != "" {
		// The caller's trace: spans the handler starts join it.
		ctx = propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier(m.Properties))
	}
	var callErr error
	ctx, endSpan := s.startSpan(ctx, m.Properties, id)
	defer func() { endSpan(callErr) }()
	if dl, ok := wire.ParseDeadline(m.Properties[wire.PropDeadline]); ok {
		if time.Now().After(dl) {
			s.dropped.Add(1)
			s.log.Debug("dropping request past its deadline", "id", id)
			return
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl)
		defer cancel()
	}
	// The caller may give the call up (grant): that ends ctx, with
	// ErrCallerGone as its cause.
	ctx, giveUp := context.WithCancelCause(ctx)
	defer giveUp(nil)
	if id != "unknown" {
		if !s.calls.start(id, giveUp) {
			giveUp(ErrCallerGone)
		}
		defer s.calls.end(id)
	}
	// Replies go where the request asks (wire.PropReplyTo: the calling
	// gateway's own topic) when that is in the response namespace, and
	// only there; else to the service's response topic.
	replyTopic := s.replyTopicOf(m, true)
	var chunks *chunkSender // created by the first Send
	reply := func(r wire.Response) error {
		rw.replied() // no receipt needed now
		b := wire.EncodeResponse(r)
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		seq := 0
		if chunks != nil {
			seq = chunks.seq
		}
		// Keyed by the id: on a persistent reply topic read by a
		// Key_Shared subscription (durable operations) the replies of one
		// call reach one reader, in order.
		// The instance, on every reply: who answered, by which a caller
		// also learns that this service sends receipts (wire.PropReceipt).
		msg := transport.Message{Key: id, Payload: b, Properties: map[string]string{wire.PropID: id, wire.PropSeq: strconv.Itoa(seq),
			wire.PropInstance: s.instance}}
		// The last reply is the one the caller waits for: when the
		// producer's queue is full (a burst of chunks), it waits for room
		// instead of being dropped, and one the broker dropped is sent
		// again, either of which would leave the caller to its deadline.
		if r.EndOfStream && id != "unknown" {
			// Kept a minute, should the caller miss it (wire.CreditResend);
			// kept first, as the caller may ask as soon as it is out.
			s.recent.keep(id, replyTopic, msg, time.Now())
		}
		publish := func(ctx context.Context) error { return s.broker.Publish(ctx, replyTopic, msg) }
		if r.EndOfStream && strings.HasPrefix(replyTopic, "persistent://") {
			// A durable operation's reply: its caller may be any gateway,
			// later; sent again until it is taken or the operation's
			// deadline has passed (a broker restarting).
			return s.sendDurable(ctx, id, replyTopic, publish)
		}
		return retryQueueFull(pctx, publish)
	}
	fail := func(typ, msg string) {
		if err := reply(wire.Response{Error: &wire.Error{Type: typ, Message: msg}, EndOfStream: true}); err != nil {
			s.log.Warn("cannot send error reply", "id", id, "err", err)
		}
	}
	if errors.Is(context.Cause(ctx), ErrCallerGone) {
		// Given up before its turn came: the handler does not run.
		s.cancelled.Add(1)
		fail("cancelled", "the caller gave the call up before it started")
		return
	}
	if s.caller != nil {
		who, err := s.caller.check(m.Properties[wire.PropCaller], id)
		if err != nil {
			s.refused.Add(1)
			s.slow.Warn("refusing a call: its caller assertion does not hold", "id", id, "err", err)
			typ := wire.ErrorTypeCallerRefused
			if errors.Is(err, errCallerBusy) {
				typ = "unavailable"
			}
			fail(typ, "caller assertion refused: "+err.Error())
			return
		}
		ctx = context.WithValue(ctx, callerKey{}, who)
	}
	req, err := wire.DecodeRequest(m.Payload)
	if err != nil {
		s.log.Warn("malformed request", "id", id, "err", err)
		fail("invalid-argument", "request is not a tool-service request: "+err.Error())
		return
	}
	r := &Request{ID: id, User: req.User, Properties: m.Properties}
	if r.Config, err = decodeObject(req.Config); err != nil {
		fail("invalid-argument", "config: "+err.Error())
		return
	}
	if r.Arguments, err = decodeObject(req.Arguments); err != nil {
		fail("invalid-argument", "arguments: "+err.Error())
		return
	}
	r.send = func(text string) error {
		rw.replied()
		if chunks == nil {
			chunks = s.newChunks(replyTopic, id, m.Properties[wire.PropCredit])
		}
		return chunks.send(ctx, text)
	}
	out, err := s.call(ctx, r)
	callErr = err
	if chunks != nil && chunks.flow != "" {
		s.flows.CompareAndDelete(id, chunks)
	}
	if chunks != nil {
		// The last reply must not claim a whole stream when a chunk was
		// lost: wait for every chunk's receipt first.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		werr := chunks.wait(wctx)
		cancel()
		if werr != nil && err == nil {
			err = fmt.Errorf("a reply chunk could not be published: %w", werr)
		}
	}
	s.handled.Add(1)
	if err != nil {
		var te *Error
		switch {
		case errors.Is(context.Cause(ctx), ErrCallerGone):
			// Nobody reads this reply; it is sent all the same, so that
			// a cancel the caller did not send shows as an error.
			fail("cancelled", "the caller gave the call up")
		case errors.As(err, &te):
			fail(te.Type, te.Message)
		case ctx.Err() != nil && errors.Is(err, ctx.Err()):
			fail("timeout", "the request's deadline passed: "+err.Error())
		default:
			fail(wire.ErrorTypeToolService, err.Error())
		}
		return
	}
	text, err := Text(out)
	if err != nil {
		fail(wire.ErrorTypeToolService, "cannot encode the reply: "+err.Error())
		return
	}
	if err := reply(wire.Response{Response: text, EndOfStream: true}); err != nil {
		s.log.Warn("cannot send reply", "id", id, "err", err)
	}
}

// newChunks makes the chunk sender of one call; with flow control when the
// caller asked for it (credit, its first window) and the flow topic is up.
func (s *Service) newChunks(replyTopic, id, credit string) *chunkSender {
	n, err := strconv.Atoi(credit)
	if err != nil || n <= 0 || s.flowTopic == "" || id == "unknown" {
		cs := newChunkSender(s.broker, replyTopic, id, "", 0)
		cs.instance = s.instance
		return cs
	}
	cs := newChunkSender(s.broker, replyTopic, id, s.flowTopic, n)
	cs.instance = s.instance
	s.flows.Store(id, cs)
	return cs
}

// call runs the handler, turning a panic into an error.
func (s *Service) call(ctx context.Context, r *Request) (out any, err error) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("handler panicked", "id", r.ID, "panic", p)
			err = fmt.Errorf("internal error in tool service %s", s.cfg.ID)
		}
	}()
	return s.handler(ctx, r)
}

func decodeObject(s string) (map[string]any, error) {
	if strings.TrimSpace(s) == "" {
		return map[string]any{}, nil
	}
	var m map[string]any
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	if d.More() {
		return nil, errors.New("not a JSON object: text after it")
	}
	if m == nil {
		m = map[string]any{}
	}
	return m, nil
}

// durableReplyFloor: a durable operation's reply is sent again for at
// least this long, also when its request's deadline is nearer (an error
// reply sent as the deadline passes).
const durableReplyFloor = 30 * time.Second

// sendDurable sends the last reply of a durable operation (to a
// persistent reply topic, read by whichever gateway holds its key): each
// attempt as any reply (retryQueueFull, bounded by durableReplyFloor),
// and one that fails — a send timing out while the broker restarts, the
// topic not reachable — is sent again, waiting longer each time (up to
// 5 s), until the broker takes it or the request's deadline has passed
// (at least durableReplyFloor from now), the client is closed or the
// service gives its calls up (Run's grace over). A reply taken twice (an
// attempt that timed out after all) is recorded once: the gateway drops
// a reply to an operation that has ended.
func (s *Service) sendDurable(ctx context.Context, id, topic string, publish func(context.Context) error) error {
	until := time.Now().Add(durableReplyFloor)
	if dl, ok := ctx.Deadline(); ok && dl.After(until) {
		until = dl
	}
	rctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), until)
	defer cancel()
	wait := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		actx, acancel := context.WithTimeout(rctx, durableReplyFloor)
		err := retryQueueFull(actx, publish)
		acancel()
		if err == nil {
			if attempt > 1 {
				s.log.Info("reply of a durable operation sent", "id", id, "topic", topic, "attempts", attempt)
			}
			return nil
		}
		if errors.Is(err, transport.ErrClosed) {
			return err
		}
		s.slow.Warn("cannot send the reply of a durable operation; sending it again until its deadline", "id", id, "topic", topic,
			"attempt", attempt, "deadline", until, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-rctx.Done():
			t.Stop()
			return fmt.Errorf("%w (gave up after %d attempts: the operation's deadline passed)", err, attempt)
		case <-s.callCtx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// retryQueueFull runs publish until it does not fail with a full queue
// or a message the broker dropped (which no consumer got), waiting a
// little longer each time, or until ctx ends.
func retryQueueFull(ctx context.Context, publish func(context.Context) error) error {
	wait := 5 * time.Millisecond
	for {
		err := publish(ctx)
		if !errors.Is(err, transport.ErrQueueFull) && !errors.Is(err, transport.ErrDropped) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (gave up: %w)", err, context.Cause(ctx))
		case <-t.C:
		}
		wait = min(2*wait, 250*time.Millisecond)
	}
}
