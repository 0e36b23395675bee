// Package config reads the gateway's settings from command-line flags and
// TOOLGATE_* environment variables (flags win), validated once.
//
// One convention holds for every field: it holds the value in effect, as
// its flag reads it. Parse fills in each default (named on the field), so
// a Config from Parse needs no further defaulting; and 0 means off —
// none, no bound, never — wherever a setting can be off, as on the
// command line. A field that cannot be off says so. The one package whose
// Options read 0 as "the default" and a negative value as off, the
// bridge, is handed its settings in its own terms by Bridge.Options.
//
// Each sub-config registers its own flags (its register method); Parse
// runs them, then derives what one sub-config takes from another.
package config

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/internal/limits"
	"github.com/toolgate/toolgate/internal/transport"
)

// Config is the gateway's whole configuration. Settings that one part of
// the gateway reads together are grouped in a typed sub-config, which
// internal/app hands to that part.
type Config struct {
	// GRPC is the gRPC listener.
	GRPC GRPC
	// HTTP is the HTTP listener: REST, MCP, Connect, docs.
	HTTP HTTP
	// AdminAddr is the admin listener (/metrics, detailed /readyz, Go
	// profiles; default DefaultAdminAddr); "" (flag: "off" or "") turns
	// it off.
	AdminAddr string
	// Core is how calls are served, whatever the door.
	Core Core
	// Limits bound what one request may bring, the same on every door
	// (defaults limits.DefaultMaxBody, limits.DefaultMaxHeaderBytes,
	// limits.DefaultBodyTimeout; a BodyTimeout of 0: no limit).
	Limits limits.Requests
	// Pulsar is how the gateway reaches the broker.
	Pulsar Pulsar
	// Bridge is how calls travel the broker: how many at once, flow
	// control, reply topics.
	Bridge Bridge
	// MCP is the Model Context Protocol endpoint.
	MCP MCP
	// Operations are the durable operations (docs/operations.md).
	Operations Operations
	// Registry is where the tools come from: a file, announcements,
	// TrustGraph's config service.
	Registry Registry
	// InstanceID names this gateway replica: in its logs, metrics,
	// /readyz, and its reply topic (default: the host name and a random
	// suffix; cannot be off).
	InstanceID string
	// GCHeapMiB is the heap size below which garbage collection runs less
	// often than Go's default (see gcgoal.Set; default
	// gcgoal.DefaultHeapMiB); 0: off.
	GCHeapMiB int
	// ShutdownGrace is how long calls in flight may finish after SIGTERM
	// (default 10s; cannot be off).
	ShutdownGrace time.Duration
	// Log is the log's format and level.
	Log Log
	// TLS is transport security on the gRPC and HTTP listeners.
	TLS TLS
	// Auth is who may call: credentials and policy.
	Auth Auth
	// Rate is the rate limit per caller.
	Rate Rate
	// Quota is the quotas of tool calls and where their counts are kept.
	Quota Quota
	// Idempotency is where calls' idempotency keys are kept.
	Idempotency Idempotency
	// Tracing is where spans are exported.
	Tracing Tracing
	// Audit is the audit log.
	Audit Audit
	// Callers are the caller assertions signed for every call.
	Callers Callers
}

// GRPC is the gRPC listener.
type GRPC struct {
	Addr string // listen address (default 127.0.0.1:9090)
	// Workers is how many handler goroutines are kept for reuse
	// (default DefaultGRPCWorkers); 0: off, a goroutine per call as
	// grpc-go does.
	Workers int
}

// Core is how the core serves a call, whatever the door: the deadlines and
// the user of unauthenticated calls (toolcall.Options).
type Core struct {
	DefaultTimeout time.Duration // when neither caller nor tool service sets one (default toolcall.DefaultTimeout; cannot be off)
	MaxTimeout     time.Duration // the longest deadline a caller may ask for (default toolcall.DefaultMaxTimeout; cannot be off)
	StreamIdle     time.Duration // a stream's longest wait for its next chunk; 0 (the default): off, only the call's deadline
	DefaultUser    string        // the envelope's user of unauthenticated calls (default toolcall.DefaultUser)
}

// HTTP is the HTTP listener and what it serves.
type HTTP struct {
	Addr         string        // listen address (default 127.0.0.1:8081)
	CORSOrigins  []string      // origins browsers may call from; "*" = any; none (the default): CORS off
	SSEHeartbeat time.Duration // keep-alive of a quiet Server-Sent Events stream (default doorconf.SSEHeartbeat; cannot be off)
}

// Pulsar is how the gateway reaches the broker: where, as whom, and how
// it sends.
type Pulsar struct {
	URL       string // broker URL (default transport.DefaultPulsarURL)
	AdminURL  string // admin API; "" (the default): off, no liveness checks of tool services
	TokenFile string // authentication token, re-read on every connection; "": none
	TLSCA     string // PEM CA bundle for pulsar+ssl:// URLs; "": the system's
	Batching  bool   // batch requests that gather while a batch is in flight (default true)
}

// Connection is how every Pulsar client of the gateway connects.
func (p Pulsar) Connection() transport.Connection {
	return transport.Connection{URL: p.URL, TokenFile: p.TokenFile, TLSTrustCertsFile: p.TLSCA}
}

// Bridge is how calls travel the broker (bridge.Options).
type Bridge struct {
	// MaxInFlight bounds the calls waiting for replies at once (default
	// bridge.DefaultMaxInFlight; cannot be off).
	MaxInFlight int
	// MaxInFlightPerService bounds one tool service's calls in flight
	// from this instance (default bridge.DefaultMaxInFlightPerService);
	// 0: off, no bound. Calls beyond it wait up to ServiceQueueWait.
	MaxInFlightPerService int
	// ServiceQueueWait is how long a call waits for a free slot of its
	// tool service (default bridge.DefaultServiceQueueWait). It cannot be
	// off: 0 is taken as the default, as the bridge takes it.
	ServiceQueueWait time.Duration
	// StreamWindow is the flow-control window of a streamed reply, in
	// reply messages (default bridge.DefaultStreamWindow); 0: off, no
	// flow control.
	StreamWindow int
	// ReplyTo has tool services answer this instance's calls on its own
	// reply topic (the reply-to property) where they can (default true).
	ReplyTo bool
	// HedgeAfter is the least silence after which a call to a service
	// that sends receipts is published once more (e.g.
	// bridge.DefaultHedgeAfter, the default); 0: off, no hedges.
	HedgeAfter time.Duration
}

// Options are b's settings as the bridge takes them, where a negative
// value is off (and 0 its default).
func (b Bridge) Options() bridge.Options {
	off := func(n int) int {
		if n == 0 {
			return -1
		}
		return n
	}
	hedge := b.HedgeAfter
	if hedge == 0 {
		hedge = -1
	}
	return bridge.Options{MaxInFlight: b.MaxInFlight, MaxInFlightPerService: off(b.MaxInFlightPerService),
		ServiceQueueWait: b.ServiceQueueWait, StreamWindow: off(b.StreamWindow), HedgeAfter: hedge}
}

// MCP is the Model Context Protocol endpoint at /mcp.
type MCP struct {
	// Enabled serves the tools over MCP (default true).
	Enabled bool
	// CacheTTL bounds the ttlMs caching hint of MCP list results (default
	// doorconf.MCPMaxCacheTTL); 0: off, never cache.
	CacheTTL time.Duration
	// OAuth is the endpoint as an OAuth protected resource.
	OAuth MCPOAuth
}

// MCPOAuth is the MCP endpoint as an OAuth 2.0 protected resource
// (RFC 9728): its resource identifier, the authorization servers that
// issue its tokens, and the scopes to ask for. Without a Resource (the
// default) the endpoint publishes no metadata.
type MCPOAuth struct {
	Resource             string
	AuthorizationServers []string // default: --jwt-issuer
	Scopes               []string // default: none
}

// Operations are the durable operations (operations.Options).
type Operations struct {
	// Enabled serves durable operations: calls started as operations,
	// their state on the broker's state table (default false).
	Enabled bool
	// TTL is how long an operation is kept once it ended (default
	// operations.DefaultTTL; cannot be off).
	TTL time.Duration
	// MaxPerCaller bounds one caller's running operations (default
	// operations.DefaultMaxPerOwner; cannot be off).
	MaxPerCaller int
	// KeyFile holds the key the deployment's gateways share to encrypt,
	// sign and check the operations' records (required when Enabled);
	// PreviousKeyFile, when set, a key whose records are still accepted,
	// while a new one replaces it ("": none).
	KeyFile, PreviousKeyFile string
	// Topics are the topics the operations are kept on; one
	// deployment's gateways share them.
	Topics OperationsTopics
}

// OperationsTopics are the topics of durable operations: the state table
// (default operations.DefaultStateTopic), the chunks of answers
// (operations.DefaultChunkTopic), and the topic their replies come on
// (wire.OperationsTopic).
type OperationsTopics struct {
	State, Chunks, Replies string
}

// Registry is where the tools come from.
type Registry struct {
	// File is the registry file; "" (the default): none.
	File string
	// Announcements reads tool services' announcements from
	// AnnounceTopic (default true; topic default
	// pulsarsrc.DefaultAnnounceTopic).
	Announcements bool
	AnnounceTopic string
	// Announce is what announcements may claim.
	Announce Announce
	// TrustGraph reads descriptors from TrustGraph's config service
	// (default false), workspace TrustGraphWorkspace (default
	// pulsarsrc.DefaultWorkspace).
	TrustGraph          bool
	TrustGraphWorkspace string
}

// Announce bounds what an announcement from the bus may claim
// (registry.WithAnnouncedNamespaces, registry.WithAnnounceTakeover).
type Announce struct {
	// RequestNamespaces and ResponseNamespaces ("tenant/namespace") hold
	// the topics an announced service may name (defaults
	// registry.DefaultAnnounceRequestNamespaces and
	// registry.DefaultAnnounceResponseNamespaces).
	RequestNamespaces  []string
	ResponseNamespaces []string
	// Takeover lets a later announcement take a tool name or topic from
	// the service that announced it first (default false).
	Takeover bool
	// ClaimGrace is how long an announced service whose instances have
	// all left keeps its tool names and topics (default
	// registry.DefaultClaimGrace; 0: off, none); Release names services
	// that keep none once their instances have left (a hand-over;
	// default none).
	ClaimGrace time.Duration
	Release    []string
}

// Log is the log's format and level.
type Log struct {
	Format string // text (the default) or json
	Level  string // debug, info (the default), warn or error
}

// TLS is transport security on the gRPC and HTTP listeners; "" (the
// default) for each: none.
type TLS struct {
	Cert, Key string // PEM certificate and its private key
	ClientCA  string // PEM CA bundle: verify client certificates (mTLS)
}

// Auth is who may call: the credential files, JWT checks, the policy and
// anonymous access, as auth.FromConfig reads them.
type Auth = auth.Config

// Rate is the rate limit per caller (limits.New).
type Rate struct {
	Limit float64 // calls per second; 0 (the default): off, no limit
	Burst int     // the token bucket's size (default limits.DefaultBurst)
}

// Quota is the quotas of tool calls (quota.Rules) and their store: this
// gateway's memory, or a Redis every replica shares.
type Quota struct {
	Rules        string        // rules file; "" (the default): no quotas
	RedisURL     string        // "" (the default): counts in memory, this replica's own
	RedisTimeout time.Duration // bound of each exchange with Redis (default quota.DefaultRedisTimeout)
	FailClosed   bool          // refuse calls under quota while Redis does not answer (default false)
}

// Idempotency is the store of calls' idempotency keys and their answers
// (internal/idempotency): a Redis every replica shares, or none.
type Idempotency struct {
	RedisURL       string        // "" (the default): no store, calls with a key are refused
	RedisTimeout   time.Duration // bound of each exchange with Redis (default idempotency.DefaultRedisTimeout)
	Window         time.Duration // how long an answer is kept after its call ended (default idempotency.DefaultWindow)
	MaxAnswerBytes int           // the largest answer kept (default idempotency.DefaultMaxAnswerBytes)
}

// Tracing is where spans are exported (telemetry.TracingConfig).
type Tracing struct {
	OTLPEndpoint string // OTLP/gRPC collector; "" (the default): off
	OTLPInsecure bool   // no TLS to the collector (default false)
}

// Audit is the audit log: one line per call, hash-chained (internal/audit).
type Audit struct {
	File      string // a file to append to, or "-" for the standard output; "" (the default): off
	Arguments bool   // write each call's arguments, not only their digest (default false)
	Queue     int    // calls waiting for the writer, beyond which they are dropped and counted (default audit.DefaultQueue; cannot be off)
}

// Callers are the caller assertions the gateway signs for every call's
// request (internal/callerassert; docs/security.md).
type Callers struct {
	KeyFile         string // PEM PKCS#8 Ed25519 or P-256 private key; "" (the default): off, no assertions
	PreviousKeyFile string // the key KeyFile replaces, still in the JWK Set; "" (the default): none
	Issuer          string // the assertions' iss (default callerassert.DefaultIssuer)
	JWKSPublic      bool   // serve the JWK Set on the public HTTP listener too (default false: the admin listener's only)
}

// DefaultAdminAddr is the admin listener's default: loopback only.
const DefaultAdminAddr = "127.0.0.1:8082"

// DefaultGRPCWorkers is how many gRPC handler goroutines are kept for
// reuse by default. grpc-go otherwise starts a goroutine per call, whose
// stack the call path outgrows and the runtime copies each time
// (CHANGELOG.md, Performance); a kept goroutine's stack stays grown.
// Calls beyond them get a goroutine of their own, as without workers.
const DefaultGRPCWorkers = 128

// Parse reads args (without the program name) and the environment.
func Parse(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	var c Config
	// An optional config file (--config or TOOLGATE_CONFIG): its keys are
	// flag names; it ranks below the environment and the flags.
	getenv, err := withConfigFile(args, getenv)
	if err != nil {
		return c, err
	}
	f := newFlags(getenv, stderr)
	f.fs.String("config", "", "optional YAML or JSON file of settings keyed by flag name; flags and env win (env TOOLGATE_CONFIG)")
	c.register(f)
	c.GRPC.register(f)
	c.HTTP.register(f)
	c.Core.register(f)
	registerLimits(f, &c.Limits)
	c.Pulsar.register(f)
	c.Bridge.register(f)
	c.MCP.register(f)
	c.Operations.register(f)
	c.Registry.register(f)
	c.Log.register(f)
	c.TLS.register(f)
	registerAuth(f, &c.Auth)
	c.Rate.register(f)
	c.Quota.register(f)
	c.Idempotency.register(f)
	c.Tracing.register(f)
	c.Audit.register(f)
	c.Callers.register(f)
	if err := f.parse(args); err != nil {
		return c, err
	}
	c.derive()
	if f.fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %s", strings.Join(f.fs.Args(), " "))
	}
	return c, errors.Join(append(f.errs, c.validate(), c.checkSecretFiles())...)
}

// derive sets what one sub-config takes from another.
func (c *Config) derive() {
	if c.MCP.OAuth.Resource != "" {
		if len(c.MCP.OAuth.AuthorizationServers) == 0 && c.Auth.JWTIssuer != "" {
			c.MCP.OAuth.AuthorizationServers = []string{c.Auth.JWTIssuer}
		}
		// MCP clients ask for tokens whose audience is the resource
		// (RFC 8707): only those may reach it.
		if c.Auth.JWTAudience == "" {
			c.Auth.JWTAudience = c.MCP.OAuth.Resource
		}
	}
	c.Auth.DefaultUser, c.Auth.ClientCerts = c.Core.DefaultUser, c.TLS.ClientCA != ""
}
