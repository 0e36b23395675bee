// Package app is the gateway's composition root: it builds the registry,
// broker client, bridge, gRPC server and HTTP server from a config, runs them
// together, and shuts them down in reverse order.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/audit"
	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/internal/callerassert"
	"github.com/toolgate/toolgate/internal/config"
	"github.com/toolgate/toolgate/internal/connectapi"
	"github.com/toolgate/toolgate/internal/corebackend"
	"github.com/toolgate/toolgate/internal/docs"
	"github.com/toolgate/toolgate/internal/gcgoal"
	"github.com/toolgate/toolgate/internal/grpcapi"
	"github.com/toolgate/toolgate/internal/httpapi"
	"github.com/toolgate/toolgate/internal/limits"
	"github.com/toolgate/toolgate/internal/mcp"
	"github.com/toolgate/toolgate/internal/operations"
	"github.com/toolgate/toolgate/internal/ratelog"
	"github.com/toolgate/toolgate/internal/registry"
	"github.com/toolgate/toolgate/internal/rootmux"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/internal/toolcall"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/internal/transport/pulsarbroker"
	"github.com/toolgate/toolgate/wire"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
)

// Gateway is a running gateway.
type Gateway struct {
	cfg     config.Config
	log     *slog.Logger
	reg     *registry.Registry
	sources *registrySources
	broker  transport.Broker
	bridge  *bridge.Bridge
	grpcLis net.Listener
	httpLis net.Listener
	grpcSrv *grpc.Server
	httpSrv *http.Server
	// The admin listener and server; nil when --admin-addr is off.
	adminLis net.Listener
	adminSrv *http.Server
	health   *health.Server
	sec      *security
	metrics  *telemetry.Metrics
	mcp      *mcp.Server         // nil without --mcp
	mcpSets  *mcp.Sets           // each tool set's MCP endpoint; nil without --mcp
	ops      *operations.Manager // nil without --operations
	audit    *audit.Log          // nil without --audit
	listened atomic.Bool         // every known response topic is subscribed
	stopping atomic.Bool
	drain    drain
	probe    *transport.Probe // is the broker taking messages now
	// presence tells the bridge which request topics have consumers
	// (nil without --pulsar-admin-url); presenceKnown, that it was asked
	// about every request topic once: readiness waits for it.
	presence      *transport.Presence
	presenceKnown atomic.Bool
	// callers signs the calls' caller assertions; nil without
	// --caller-key-file.
	callers *callerassert.Signer
	// httpBase is every HTTP request's base context, cancelled once the
	// calls are over at shutdown (long-lived MCP streams end with it).
	httpBase     context.Context
	stopHTTPBase context.CancelFunc
	// closers holds what New opened, each step's closing pushed as it
	// opened it: unwound when a later step fails, and at the end of Run
	// for what the shutdown has not closed at its own time — closing.
	closers closers
	closing struct{ sources, broker, traces, bridge *closer }
}

// New builds the gateway and opens its listeners, so that its addresses are
// known before Run. A registry with problems stops it here, with the list.
// Each step builds on those before it and pushes the closing of what it
// opens on g.closers; when one fails, what the steps before it opened is
// closed, the last opened first.
func New(cfg config.Config, log *slog.Logger) (_ *Gateway, err error) {
	g := &Gateway{cfg: cfg, log: log.With("instance", cfg.InstanceID)}
	defer func() {
		if err != nil {
			g.closeEarly()
		}
	}()
	// Security first: it reads files, and opens no more than the quotas'
	// and the idempotency keys' stores.
	opsKeys, err := g.readSecurity()
	if err != nil {
		return nil, err
	}
	if err := g.readCallerKey(); err != nil {
		return nil, err
	}
	if err := g.openRegistry(); err != nil {
		return nil, err
	}
	bus, err := g.connectBroker()
	if err != nil {
		return nil, err
	}
	g.newBridge()
	calls := g.callChain(g.newCore(bus, opsKeys))
	g.newGRPCServer(calls)
	if err := g.openListeners(); err != nil {
		return nil, err
	}
	if err := g.newHTTPServers(calls); err != nil {
		return nil, err
	}
	if err := g.openAudit(); err != nil {
		return nil, err
	}
	// Last: the broker sources may swap snapshots from now on.
	g.sources.start(g.log)
	return g, nil
}

// readSecurity reads what security needs (credentials, policy, TLS,
// quotas' settings) and, with --operations, the records' keys.
func (g *Gateway) readSecurity() (*operations.Keys, error) {
	sec, err := newSecurity(g.cfg, g.log, &g.closers)
	if err != nil {
		return nil, err
	}
	g.sec = sec
	var opsKeys *operations.Keys // the records' keys: files read, as security's
	if g.cfg.Operations.Enabled {
		if opsKeys, err = operationsKeys(g.cfg); err != nil {
			return nil, fmt.Errorf("operations: %w", err)
		}
	}
	return opsKeys, nil
}

// openRegistry builds the registry's sources (not started yet: New
// starts them last) and the registry they fill.
func (g *Gateway) openRegistry() error {
	cfg, log := g.cfg, g.log
	// Every Pulsar client of the gateway connects alike.
	rs, err := newRegistrySources(g, cfg.Pulsar.Connection())
	if err != nil {
		return err
	}
	g.sources, g.reg = rs, rs.merger.Registry()
	g.closing.sources = g.closers.push("registry sources", func(ctx context.Context) error {
		if left := rs.stopWithin(ctx); len(left) > 0 {
			return &leftOpen{abandoned{registry: left}}
		}
		return nil
	})
	if cfg.Registry.File != "" {
		snap := g.reg.Snapshot()
		log.Info("registry loaded", "file", cfg.Registry.File, "tools", len(snap.Tools()), "tool_services", len(snap.Services()))
	}
	return nil
}

// connectBroker makes the broker client the calls' messages go through
// (and the operations' bus), and sets tracing up.
func (g *Gateway) connectBroker() (operations.Bus, error) {
	cfg, log := g.cfg, g.log
	conn := cfg.Pulsar.Connection()
	// Every reply for this instance arrives on its response subscriptions:
	// a deep prefetch queue keeps bursts from being dropped by the broker.
	popts := pulsarbroker.ConnectionOptions(conn)
	popts.Logger, popts.ReceiverQueueSize, popts.DisableBatching = log, 10000, !cfg.Pulsar.Batching
	pb, err := pulsarbroker.New(popts)
	if err != nil {
		return nil, err
	}
	g.broker = pb
	g.closing.broker = g.closers.push("broker client", func(ctx context.Context) error {
		if left := g.closeBroker(ctx); !left.Empty() {
			return &leftOpen{abandoned{broker: left}}
		}
		return nil
	})
	stop, err := telemetry.SetupTracing(context.Background(), telemetry.TracingConfig{
		OTLPEndpoint: cfg.Tracing.OTLPEndpoint, OTLPInsecure: cfg.Tracing.OTLPInsecure, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	g.closing.traces = g.closers.push("traces", stop)
	return pb, nil
}

// newBridge makes the bridge over the broker, and the probe that tells
// whether the broker takes messages.
func (g *Gateway) newBridge() {
	cfg, log := g.cfg, g.log
	bopts := cfg.Bridge.Options()
	bopts.Logger, bopts.OnPublish = log, telemetry.TracePublish
	if cfg.Bridge.ReplyTo {
		bopts.ReplyTopic = wire.ReplyTopic(cfg.InstanceID)
	}
	if cfg.Pulsar.AdminURL != "" {
		p := pulsarbroker.NewAdminPresence(cfg.Pulsar.AdminURL, log)
		p.TokenFile = cfg.Pulsar.TokenFile // an authenticating broker's admin API asks for it too
		// A cached "no consumer" is asked again before a call is refused.
		g.presence = transport.NewPresence(p, 0)
		bopts.Presence, bopts.Watch = g.presence, p
	}
	g.bridge = bridge.New(g.broker, bopts)
	g.closing.bridge = g.closers.push("bridge", func(ctx context.Context) error {
		if !within(ctx, g.bridge.Close) {
			return &leftOpen{abandoned{bridge: true}}
		}
		return nil
	})
	g.probe = transport.NewProbe(g.broker, wire.RequestTopic("toolgate.probe."+cfg.InstanceID), 0, 0, g.probeChanged)
	// Calls fail fast while the broker does not take messages, and are
	// served again as soon as it does.
	g.probe.Each = g.probed
}

// probeChanged logs the broker probe's change and updates health.
func (g *Gateway) probeChanged(ok bool) {
	if ok {
		g.log.Info("broker probe: the broker takes messages again")
	} else {
		g.log.Warn("broker probe: the broker does not take messages; not ready", "err", g.probe.State().Error)
	}
	g.updateHealth()
}

// probed tells the bridge each broker probe's outcome, and the
// operations the bridge's verdict: a start, cancel or delete of an
// operation is refused at once while calls are.
func (g *Gateway) probed(st transport.ProbeState) {
	if st.OK {
		g.bridge.BrokerUp()
		if g.ops != nil {
			g.ops.BrokerUp()
		}
		return
	}
	cause := errors.New(st.Error)
	if g.bridge.BrokerDown(cause, st.Sent) && g.ops != nil {
		g.ops.BrokerDown(cause)
	}
}

// newCore makes the core, over the registry, the bridge and, with
// --operations, the operations' manager.
func (g *Gateway) newCore(bus operations.Bus, opsKeys *operations.Keys) *toolcall.Core {
	cfg, log := g.cfg, g.log
	var ops toolcall.Operations // an untyped nil without --operations
	if cfg.Operations.Enabled {
		// New fails only without keys, which were read above.
		g.ops, _ = operations.New(bus, g.bridge, operations.Options{Instance: cfg.InstanceID, TTL: cfg.Operations.TTL,
			MaxPerOwner: cfg.Operations.MaxPerCaller, Logger: log, Keys: opsKeys,
			StateTopic: cfg.Operations.Topics.State, ChunkTopic: cfg.Operations.Topics.Chunks, ReplyTopic: cfg.Operations.Topics.Replies,
			// a record's service topic passes the announcements' allow-list
			TopicAllowed: g.sources.merger.CheckRequestTopic})
		ops = corebackend.Operations(g.ops)
	}
	return toolcall.New(g.reg, corebackend.Bridge(g.bridge), toolcall.Options{
		Operations:        ops,
		DefaultTimeout:    cfg.Core.DefaultTimeout,
		MaxTimeout:        cfg.Core.MaxTimeout,
		DefaultUser:       cfg.Core.DefaultUser,
		StreamIdleTimeout: cfg.Core.StreamIdle,
		Logger:            log,
		Visible:           g.sec.authn.Visible,
		Callers:           g.callerSigner(),
	})
}

// callChain makes the metrics and the one middleware chain every door
// runs around the core.
func (g *Gateway) callChain(core *toolcall.Core) toolcall.Handler {
	cfg, log, sec := g.cfg, g.log, g.sec
	var opsStats []telemetry.MetricsOption
	if g.ops != nil {
		opsStats = append(opsStats, telemetry.WithOperationsStats(g.operationsStats))
	}
	if cfg.Tracing.OTLPEndpoint != "" {
		opsStats = append(opsStats, telemetry.WithSpans())
	}
	g.metrics = telemetry.NewMetrics(append([]telemetry.MetricsOption{telemetry.WithInstance(cfg.InstanceID),
		telemetry.WithKnownTools(g.knownTool),
		telemetry.WithBridgeStats(g.bridgeStats),
		telemetry.WithRegistryStats(g.sources.stats),
		telemetry.WithBrokerConnected(func() bool { return g.listened.Load() && g.probe.State().OK })}, opsStats...)...)
	// Every door runs the same chain. Spans when they are exported, else
	// only the caller's trace context is passed on; then the call log and
	// metrics, which see every call, refused ones too; then
	// authentication and authorization, the rate limit, the quotas, and
	// the idempotency keys (a retry counts as a call; it is answered only
	// to a caller allowed the call now).
	trace, logOpts := telemetry.TraceContextMiddleware(), []telemetry.LogOption{telemetry.WithoutSpans()}
	if cfg.Tracing.OTLPEndpoint != "" {
		trace, logOpts = telemetry.SpanMiddleware(nil), nil
	}
	var limit, quotas toolcall.Middleware
	if sec.lim != nil {
		limit = sec.lim.Middleware()
	}
	if sec.quota != nil {
		quotas = sec.quota.Middleware()
		g.metrics.Registry().MustRegister(sec.quota.Collectors()...)
	}
	g.metrics.Registry().MustRegister(sec.keys.Collectors()...)
	// A call in a tool set names the set's tool, which the policy knows
	// by the registry's name: the caller is authenticated first, then the
	// set resolves the name, then the policy decides.
	return toolcall.Chain(core.Handle, g.auditCalls(), trace, telemetry.NewCallLog(log, logOpts...).Middleware(), g.metrics.Middleware(),
		g.drain.middleware(), sec.authn.Authentication(), core.ToolSets(), sec.authn.Authorization(), limit, quotas, sec.keys.Middleware())
}

// operationsStats are the operations' counters for the metrics.
func (g *Gateway) operationsStats() telemetry.OperationsStats {
	s := g.ops.Stats()
	return telemetry.OperationsStats{Started: s.Started, Done: s.Done, Failed: s.Failed, Cancelled: s.Cancelled,
		Expired: s.Expired, CancelsSent: s.Told, Running: s.Running, Table: s.Table, TableLag: s.TableLag,
		RecordsRefused: s.Refused}
}

// bridgeStats are the bridge's counters for the metrics.
func (g *Gateway) bridgeStats() telemetry.BridgeStats {
	s := g.bridge.Stats()
	return telemetry.BridgeStats{Pending: s.InFlight, Published: s.Published, PublishErrors: s.PublishErrors,
		Replies: s.Replies, OrphanReplies: s.OrphanReplies, BadReplies: s.BadReplies, RefusedReplies: s.RefusedReplies,
		Resends: s.Resends, Receipts: s.Receipts, Republished: s.Republished, Hedged: s.Hedged, InstanceLost: s.InstanceLost}
}

// knownTool reports whether the registry has tool t (the metrics label
// tools by name only then).
func (g *Gateway) knownTool(t string) bool { _, ok := g.reg.Snapshot().Tool(t); return ok }

// newGRPCServer makes the gRPC server: the gRPC door, operations, health
// and reflection, behind the request limits.
func (g *Gateway) newGRPCServer(calls toolcall.Handler) {
	cfg, sec := g.cfg, g.sec
	// The request limits first: they refuse before authentication.
	gopts := append(limits.GRPCServerOptions(cfg.Limits), g.auditGRPC(limits.GRPCTap(cfg.Limits, sec.limitsLog, sec.authn.TapHandle())))
	gopts = append(gopts, grpcapi.ServerOptions()...)
	if cfg.GRPC.Workers > 0 {
		gopts = append(gopts, grpc.NumStreamWorkers(uint32(cfg.GRPC.Workers)))
	}
	if c := sec.creds(); c != nil {
		gopts = append(gopts, grpc.Creds(c))
	}
	g.grpcSrv = grpc.NewServer(gopts...)
	toolgatev1.RegisterToolServiceServer(g.auditServices(), grpcapi.New(calls))
	// The operations StartTool starts, through the same chain; without
	// --operations the core answers its methods UNIMPLEMENTED, as REST.
	longrunningpb.RegisterOperationsServer(g.auditServices(), grpcapi.NewOperations(calls))
	g.health = health.NewServer()
	g.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	g.health.SetServingStatus(toolgatev1.ToolService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(g.grpcSrv, g.health)
	reflection.Register(g.grpcSrv)
}

// openListeners opens the gRPC, HTTP and admin listeners.
func (g *Gateway) openListeners() error {
	cfg := g.cfg
	var err error
	if g.grpcLis, err = net.Listen("tcp", cfg.GRPC.Addr); err != nil {
		return fmt.Errorf("gRPC listener: %w", err)
	}
	g.grpcLis = g.sec.grpcListener(g.grpcLis)
	g.closers.push("gRPC listener", closeListener(g.grpcLis))
	if g.httpLis, err = net.Listen("tcp", cfg.HTTP.Addr); err != nil {
		return fmt.Errorf("HTTP listener: %w", err)
	}
	g.httpLis = g.sec.httpListener(g.httpLis)
	g.closers.push("HTTP listener", closeListener(g.httpLis))
	if cfg.AdminAddr != "" {
		if g.adminLis, err = net.Listen("tcp", cfg.AdminAddr); err != nil {
			return fmt.Errorf("admin listener: %w", err)
		}
		g.closers.push("admin listener", closeListener(g.adminLis))
	}
	return nil
}

// newHTTPServers makes the public HTTP server — the root mux over the
// REST door, MCP, Connect and the docs — and the admin one.
func (g *Gateway) newHTTPServers(calls toolcall.Handler) error {
	cfg, log, sec := g.cfg, g.log, g.sec
	var mcpHandler, mcpSets, mcpMetadata http.Handler
	if cfg.MCP.Enabled {
		g.mcp = mcp.New(calls, g.mcpOptions(""))
		g.mcpSets = mcp.NewSets(calls, g.mcpOptions, g.toolSetInfo)
		mcpHandler, mcpSets, mcpMetadata = g.mcp, g.mcpSets, g.mcp.ResourceMetadata()
	}
	connectPath, connectHandler := connectapi.New(calls, connectapi.Options{
		MaxMessageBytes: cfg.Limits.Body(), MaxHeaderBytes: cfg.Limits.Header()})
	// The public listener tells readiness without details and serves no
	// metrics: those are the admin listener's.
	rest, err := httpapi.New(httpapi.Options{Logger: log, Ready: g.publicReady,
		Handler:      calls,
		ErrorHandler: limits.ErrorHandler,
		SSEHeartbeat: cfg.HTTP.SSEHeartbeat,
		Operations:   cfg.Operations.Enabled})
	if err != nil {
		return err
	}
	routes := rest.Routes()
	routes = append(routes, rootmux.Docs(docs.New(docs.Options{Logger: log}))...)
	routes = append(routes, rootmux.MCP(mcpHandler, mcpSets, mcpMetadata)...)
	routes = append(routes, rootmux.Connect(connectPath, connectHandler)...)
	routes = append(routes, g.callerJWKSRoutes()...)
	h, err := rootmux.New(rootmux.Options{Logger: log, Routes: routes,
		CORSOrigins: cfg.HTTP.CORSOrigins, MaxHeaderBytes: cfg.Limits.Header()})
	if err != nil {
		return err
	}
	g.httpBase, g.stopHTTPBase = context.WithCancel(context.Background())
	g.closers.push("HTTP requests' context", closeFunc(func() error { g.stopHTTPBase(); return nil }))
	g.httpSrv = &http.Server{
		Handler:     g.auditHTTP(sec.wrapHTTP(h)),
		BaseContext: func(net.Listener) context.Context { return g.httpBase },
		// TLS is the listener's (security.httpListener), so that the
		// HTTP/2 frame meter reads above it.
		ConnContext: limits.ConnContext,
		Protocols:   httpProtocols(),
		HTTP2:       cfg.Limits.HTTP2.ServerConfig(),
		// Above the handler's own limit, which answers 431 in JSON.
		MaxHeaderBytes:    limits.HardHeaderFactor * cfg.Limits.Header(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		// net/http's own lines (a TLS handshake that failed, a client's
		// protocol error) are a client's to cause: rate-limited by shape.
		ErrorLog: slog.NewLogLogger(ratelog.NewHandlerByShape(log.Handler(), 0), slog.LevelWarn),
	}
	if g.adminLis != nil {
		g.adminSrv = &http.Server{
			Handler:           g.adminHandler(),
			ReadHeaderTimeout: 10 * time.Second,
			IdleTimeout:       2 * time.Minute,
			ErrorLog:          slog.NewLogLogger(log.With("listener", "admin").Handler(), slog.LevelWarn),
		}
	}
	return nil
}

// mcpOptions are the options of the MCP endpoint of tool set set (""
// for the one of every tool).
func (g *Gateway) mcpOptions(set string) mcp.Options {
	cfg, a, tools := g.cfg, g.cfg.Auth, setTools{g: g, set: set}
	// MCP's log is of refusals and of what tools answered, per request:
	// rate-limited.
	return mcp.Options{Logger: g.sec.limitsLog, Authenticate: g.audit.Authenticate(g.sec.authn.Authenticate), AllowedOrigins: cfg.HTTP.CORSOrigins,
		// Who may list which tools is the caller's credentials' and the
		// policy's to say: with either, a tool list is the caller's own.
		CallerDependent: a.Policy != "" || a.APIKeys != "" || a.JWTSecretFile != "" || a.JWTJWKSFile != "" || a.ClientCerts,
		MaxCacheTTL:     cfg.MCP.CacheTTL,
		// MCP tasks are durable operations: served with --operations.
		Tasks: cfg.Operations.Enabled, TaskTTL: cfg.Operations.TTL,
		TaskSupport: tools.taskSupport, Result: tools.result, HeaderParams: tools.headerParams,
		MaxHeaderBytes: cfg.Limits.Header(),
		Resource:       cfg.MCP.OAuth.Resource, AuthorizationServers: cfg.MCP.OAuth.AuthorizationServers, Scopes: cfg.MCP.OAuth.Scopes}
}

// toolSetInfo is what the MCP endpoint of tool set set tells of it.
func (g *Gateway) toolSetInfo(set string) (mcp.SetInfo, bool) {
	ts, ok := g.reg.Snapshot().Set(set)
	if !ok {
		return mcp.SetInfo{}, false
	}
	return mcp.SetInfo{Title: ts.Title, Instructions: ts.Instructions}, true
}

// setTools are the tools of one MCP endpoint, by the name the set shows
// (the registry's outside a set), read from the registry's snapshot of
// the moment.
type setTools struct {
	g   *Gateway
	set string // "": every tool
}

func (s setTools) tool(name string) (*registry.Tool, bool) {
	snap := s.g.reg.Snapshot()
	if s.set == "" {
		return snap.Tool(name)
	}
	ts, ok := snap.Set(s.set)
	if !ok {
		return nil, false
	}
	shown, _, ok := ts.Lookup(name)
	return shown, ok
}

func (s setTools) taskSupport(name string) string {
	if t, ok := s.tool(name); ok {
		return t.TaskSupport
	}
	return ""
}

func (s setTools) result(name string) string {
	if t, ok := s.tool(name); ok {
		return t.Result
	}
	return registry.ResultText
}

func (s setTools) headerParams(name string) []registry.HeaderParam {
	if t, ok := s.tool(name); ok {
		return t.HeaderParams
	}
	return nil
}

// httpProtocols are what the HTTP listener speaks: HTTP/1.1, and HTTP/2
// both over TLS and in plain text with prior knowledge (h2c), so gRPC
// clients reach the Connect door's gRPC on a listener without TLS too.
func httpProtocols() *http.Protocols {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	return &p
}

// GRPCAddr and HTTPAddr are the addresses the gateway listens on.
func (g *Gateway) GRPCAddr() string { return g.grpcLis.Addr().String() }

// HTTPAddr is the HTTP listener's address.
func (g *Gateway) HTTPAddr() string { return g.httpLis.Addr().String() }

// serving: the response topics were subscribed, the last broker probe
// succeeded, the consumers of the request topics were asked about once
// (with --pulsar-admin-url), the operations table was read (with
// --operations), and the gateway is not shutting down.
func (g *Gateway) serving() bool {
	return g.listened.Load() && g.probe.State().OK && !g.stopping.Load() && (g.ops == nil || g.ops.Ready()) &&
		(g.presence == nil || g.presenceKnown.Load())
}

// updateHealth sets gRPC health to match serving (health.Shutdown, at
// shutdown, makes it NOT_SERVING for good).
func (g *Gateway) updateHealth() {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if g.serving() {
		st = healthpb.HealthCheckResponse_SERVING
	}
	g.health.SetServingStatus("", st)
	g.health.SetServingStatus(toolgatev1.ToolService_ServiceDesc.ServiceName, st)
}

// AdminAddr is the admin listener's address, "" when it is off.
func (g *Gateway) AdminAddr() string {
	if g.adminLis == nil {
		return ""
	}
	return g.adminLis.Addr().String()
}

func (g *Gateway) ready(context.Context) (bool, map[string]any) {
	snap := g.reg.Snapshot()
	probe := g.probe.State()
	d := map[string]any{
		"registry_version":  snap.Version,
		"tools":             len(snap.Tools()),
		"broker_connected":  g.listened.Load() && probe.OK,
		"broker_probe":      probe,
		"shutting_down":     g.stopping.Load(),
		"instance":          g.cfg.InstanceID,
		"reply_topic":       g.bridge.ReplyTopic(),
		"reply_to_services": g.bridge.Honouring(),
	}
	if g.ops != nil {
		d["operations_ready"] = g.ops.Ready() // the state table read, the reply subscription attached
		// The keys held (ids only) and keys other writers on the operations
		// topics use: replicas that disagree on keys show here, never
		// holding up readiness (a rotation under way is such a time).
		d["operations_keys"] = g.ops.KeyIDs()
		d["operations_reply_topics"] = g.ops.ReplyTopics()
		d["operations_foreign_keys"] = g.ops.Foreign()
	}
	if g.presence != nil {
		d["presence_known"] = g.presenceKnown.Load() // every request topic's consumers asked about once
	}
	g.sources.details(d)
	// Shown, never holding up readiness: one bad service must not.
	d["response_topics_failing"] = g.bridge.Failing()
	return g.serving(), d
}

// onRegistrySwap hands the bridge the response topics of the snapshot's
// services: those a reload added are subscribed in the background (their
// first calls do not wait for it), those of services gone are released.
func (g *Gateway) onRegistrySwap(snap *registry.Snapshot) {
	if g.mcp != nil {
		g.mcp.ToolsChanged()
		g.mcpSets.ToolsChanged()
	}
	if g.bridge == nil {
		return
	}
	topics := make([]string, 0, len(snap.Services()))
	for _, sv := range snap.Services() {
		topics = append(topics, sv.ResponseTopic)
	}
	g.bridge.Track(topics)
}

// watchRegistry reloads the registry when its file changes.
func (g *Gateway) watchRegistry(ctx context.Context) {
	if src := g.sources.file; src != nil {
		if err := src.Watch(ctx, 100*time.Millisecond); err != nil {
			g.log.Warn("registry file watching stopped; ReloadRegistry (SIGHUP) still reloads", "err", err)
		}
	}
}

// ReloadRegistry reads the registry file again now (the gateway command
// calls it on SIGHUP). A file with problems changes nothing: the last
// good registry keeps serving, and the error is logged, counted and shown
// in /readyz. Without a registry file there is nothing to reload.
func (g *Gateway) ReloadRegistry() error {
	src := g.sources.file
	if src == nil {
		g.log.Info("no registry file to reload")
		return nil
	}
	g.log.Info("reloading the registry")
	return src.Reload()
}

// listen subscribes to every response topic of the registry, retrying until
// it succeeds or ctx ends, so that the first calls do not pay for it and
// readiness reflects a working broker connection.
func (g *Gateway) listen(ctx context.Context) {
	topics := func() []string {
		var ts []string
		for _, sv := range g.reg.Snapshot().Services() {
			ts = append(ts, sv.ResponseTopic)
		}
		return ts
	}
	if err := g.bridge.ListenAll(ctx, topics); err != nil {
		return // ctx ended first
	}
	g.listened.Store(true)
	g.updateHealth()
	g.log.Info("broker connected; response topics subscribed")
}

// Run serves until ctx ends, then shuts down (see shutdown): readiness
// turns off and new calls are refused while the listeners stay open,
// calls in flight get cfg.ShutdownGrace to finish, those still running
// then end with UNAVAILABLE and a RetryInfo, and the broker client closes.
// It returns within the grace and shutdownMargin whatever the broker
// does; an error wrapping ErrAbandoned when something had not closed by
// then.
func (g *Gateway) Run(ctx context.Context) error {
	gcgoal.Set(g.cfg.GCHeapMiB, g.log)
	errc := make(chan error, 3)
	var wg sync.WaitGroup // the servers
	if g.adminSrv != nil {
		wg.Go(func() {
			if err := g.adminSrv.Serve(g.adminLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("admin server: %w", err)
			}
		})
	}
	wg.Go(func() {
		if err := g.grpcSrv.Serve(g.grpcLis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			errc <- fmt.Errorf("gRPC server: %w", err)
		}
	})
	wg.Go(func() {
		if err := g.httpSrv.Serve(g.httpLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("HTTP server: %w", err)
		}
	})
	// The tasks end with lctx, but may wait for the broker first: the
	// shutdown waits for them within its deadline.
	lctx, stopListen := context.WithCancel(ctx)
	var bg tasks
	bg.Go("response topics' subscriber", func() { g.listen(lctx) })
	bg.Go("registry file watch", func() { g.watchRegistry(lctx) })
	bg.Go("broker probe", func() { g.probe.Run(lctx) })
	if g.presence != nil {
		bg.Go("request topics' consumers", func() { g.learnPresence(lctx) })
	}
	if g.ops != nil {
		bg.Go("operations", func() { g.ops.Run(lctx) })
		go g.watchOperationsReady(lctx)
	}
	g.log.Info("gateway serving", "grpc", g.GRPCAddr(), "http", g.HTTPAddr(), "admin", g.AdminAddr(), "pulsar", g.cfg.Pulsar.URL, "reply_topic", g.bridge.ReplyTopic())

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	stopListen()
	err := g.shutdown(&bg)
	wg.Wait() // the servers are closed: their Serve has returned
	g.closeRest()
	if runErr != nil {
		return runErr
	}
	return err
}

// NewLogger builds the process logger from the config's format and level.
func NewLogger(w io.Writer, format, level string) *slog.Logger {
	var lv slog.Level
	_ = lv.UnmarshalText([]byte(level))
	opts := &slog.HandlerOptions{Level: lv}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// learnPresence asks the admin API once which of the registry's request
// topics have consumers, so that the first calls find the answers
// (readiness waits for it: a gateway is ready once it knows where
// calls can go). A topic the admin API could not answer about is asked
// again at its first call, as before.
func (g *Gateway) learnPresence(ctx context.Context) {
	var topics []string
	for _, sv := range g.reg.Snapshot().Services() {
		topics = append(topics, sv.RequestTopic)
	}
	err := g.presence.Learn(ctx, topics)
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		g.log.Warn("the admin API did not say which request topics have consumers; asked again at their first calls", "err", err)
	}
	g.presenceKnown.Store(true)
	g.updateHealth()
}

// watchOperationsReady updates gRPC health once the operations table has
// been read (readiness waits for it).
func (g *Gateway) watchOperationsReady(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-g.ops.WhenReady():
		g.updateHealth()
	}
}

// operationsKeys reads the keys of the operations' records: the one
// --operations-key-file holds, and the verify-only one of
// --operations-previous-key-file.
func operationsKeys(cfg config.Config) (*operations.Keys, error) {
	key, err := operations.ReadKeyFile(cfg.Operations.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("--operations-key-file: %w", err)
	}
	var verify [][]byte
	if cfg.Operations.PreviousKeyFile != "" {
		prev, err := operations.ReadKeyFile(cfg.Operations.PreviousKeyFile)
		if err != nil {
			return nil, fmt.Errorf("--operations-previous-key-file: %w", err)
		}
		verify = append(verify, prev)
	}
	return operations.NewKeys(key, verify...)
}
