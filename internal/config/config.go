// Package config reads the gateway's settings from command-line flags and
// TOOLGATE_* environment variables (flags win), validated once.
package config

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/internal/gcgoal"
	"github.com/toolgate/toolgate/internal/httpapi"
	"github.com/toolgate/toolgate/internal/limits"
	"github.com/toolgate/toolgate/internal/mcp"
	"github.com/toolgate/toolgate/internal/operations"
	"github.com/toolgate/toolgate/internal/quota"
	"github.com/toolgate/toolgate/internal/registry"
	"github.com/toolgate/toolgate/internal/registry/pulsarsrc"
	"github.com/toolgate/toolgate/internal/toolcall"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/wire"
	"gopkg.in/yaml.v3"
)

// Config is the gateway's whole configuration. Settings that one part of
// the gateway reads together are grouped in a typed sub-config (Core,
// HTTP, Pulsar, Auth), which internal/app hands to that part.
type Config struct {
	GRPCAddr    string
	GRPCWorkers int
	// AdminAddr is the admin listener (/metrics, detailed /readyz, Go
	// profiles); "" turns it off.
	AdminAddr string
	// HTTP is the HTTP listener: REST, MCP, Connect, docs.
	HTTP HTTP
	// Core is how calls are served, whatever the door.
	Core Core
	// Limits bound what one request may bring, the same on every door.
	Limits limits.Requests
	// Pulsar is how the gateway reaches the broker.
	Pulsar      Pulsar
	MaxInFlight int
	// MaxInFlightPerService bounds one tool service's calls in flight
	// (0: no bound); calls beyond it wait up to ServiceQueueWait.
	MaxInFlightPerService int
	ServiceQueueWait      time.Duration
	// StreamWindow is the flow-control window of a streamed reply, in
	// reply messages (0: no flow control).
	StreamWindow int
	// GCHeapMiB is the heap size below which garbage collection runs less
	// often than Go's default (see gcgoal.Set); 0 turns it off.
	GCHeapMiB int
	// MCP serves the tools over the Model Context Protocol at /mcp.
	MCP bool
	// MCPCacheTTL bounds the ttlMs caching hint of MCP list results.
	MCPCacheTTL time.Duration
	// MCPOAuth is the MCP endpoint as an OAuth protected resource.
	MCPOAuth MCPOAuth
	// InstanceID names this gateway replica: in its logs, metrics,
	// /readyz, and its reply topic.
	InstanceID string
	// ReplyTo has tool services answer this instance's calls on its own
	// reply topic (the reply-to property) where they can.
	ReplyTo bool
	// Operations serves durable operations (docs/operations.md): calls
	// started as operations, their state on the broker's state table.
	Operations bool
	// OperationTTL is how long an operation is kept once it ended;
	// MaxOperationsPerCaller bounds one caller's running operations.
	OperationTTL           time.Duration
	MaxOperationsPerCaller int
	// OperationsKeyFile holds the key the deployment's gateways share to
	// encrypt, sign and check the operations' records (required with
	// Operations);
	// OperationsPreviousKeyFile, when set, a key whose records are still
	// accepted, while a new one replaces it.
	OperationsKeyFile, OperationsPreviousKeyFile string
	// OperationsTopics are the topics the operations are kept on; one
	// deployment's gateways share them.
	OperationsTopics OperationsTopics
	Registry         string
	// Announcements reads tool services' announcements from AnnounceTopic.
	Announcements bool
	AnnounceTopic string
	// Announce is what announcements may claim.
	Announce Announce
	// TrustGraphConfig reads descriptors from TrustGraph's config service
	// (workspace TrustGraphWorkspace).
	TrustGraphConfig    bool
	TrustGraphWorkspace string
	ShutdownGrace       time.Duration
	LogFormat           string
	LogLevel            string

	// Transport security.
	TLSCert  string
	TLSKey   string
	ClientCA string
	// Authentication and authorization.
	Auth      Auth
	RateLimit float64
	RateBurst int
	// Quota is the quotas of tool calls and where their counts are kept.
	Quota Quota
	// Telemetry.
	OTLPEndpoint string
	OTLPInsecure bool
}

// Core is how the core serves a call, whatever the door: the deadlines and
// the user of unauthenticated calls (toolcall.Options).
type Core struct {
	DefaultTimeout time.Duration // when neither caller nor tool service sets one
	MaxTimeout     time.Duration // the longest deadline a caller may ask for
	StreamIdle     time.Duration // a stream's longest wait for its next chunk; 0 = none
	DefaultUser    string        // the envelope's user of unauthenticated calls
}

// HTTP is the HTTP listener and what it serves (httpapi.Options).
type HTTP struct {
	Addr         string
	CORSOrigins  []string      // origins browsers may call from; "*" = any
	SSEHeartbeat time.Duration // keep-alive of a quiet Server-Sent Events stream
}

// Pulsar is how the gateway reaches the broker: where, as whom, and how
// it sends.
type Pulsar struct {
	URL       string
	AdminURL  string // "" = no liveness checks of tool services
	TokenFile string // authentication token, re-read on every connection
	TLSCA     string // PEM CA bundle for pulsar+ssl:// URLs
	Batching  bool   // batch requests that gather while a batch is in flight
}

// OperationsTopics are the topics of durable operations
// (operations.Options): the state table, the chunks of answers, and the
// topic their replies come on.
type OperationsTopics struct {
	State, Chunks, Replies string
}

// Announce bounds what an announcement from the bus may claim
// (registry.WithAnnouncedNamespaces, registry.WithAnnounceTakeover).
type Announce struct {
	// RequestNamespaces and ResponseNamespaces ("tenant/namespace") hold
	// the topics an announced service may name.
	RequestNamespaces  []string
	ResponseNamespaces []string
	// Takeover lets a later announcement take a tool name or topic from
	// the service that announced it first.
	Takeover bool
	// ClaimGrace is how long an announced service whose instances have
	// all left keeps its tool names and topics; Release names services
	// that keep none once their instances have left (a hand-over).
	ClaimGrace time.Duration
	Release    []string
}

// Connection is how every Pulsar client of the gateway connects.
func (p Pulsar) Connection() transport.Connection {
	return transport.Connection{URL: p.URL, TokenFile: p.TokenFile, TLSTrustCertsFile: p.TLSCA}
}

// MCPOAuth is the MCP endpoint as an OAuth 2.0 protected resource
// (RFC 9728): its resource identifier, the authorization servers that
// issue its tokens, and the scopes to ask for. Without a Resource the
// endpoint publishes no metadata.
type MCPOAuth struct {
	Resource             string
	AuthorizationServers []string // default: --jwt-issuer
	Scopes               []string
}

// Quota is the quotas of tool calls (quota.Rules) and their store: this
// gateway's memory, or a Redis every replica shares.
type Quota struct {
	Rules        string        // rules file; "" = no quotas
	RedisURL     string        // "" = counts in memory, this replica's own
	RedisTimeout time.Duration // bound of each exchange with Redis
	FailClosed   bool          // refuse calls under quota while Redis does not answer
}

// Auth is who may call: the credential files, JWT checks, the policy and
// anonymous access, as auth.FromConfig reads them.
type Auth = auth.Config

// DefaultAdminAddr is the admin listener's default: loopback only.
const DefaultAdminAddr = "127.0.0.1:8082"

// DefaultGRPCWorkers is how many gRPC handler goroutines are kept for
// reuse by default. grpc-go otherwise starts a goroutine per call, whose
// stack the call path outgrows and the runtime copies each time
// (docs/benchmarks/ANALYSIS.md); a kept goroutine's stack stays grown.
// Calls beyond them get a goroutine of their own, as without workers.
const DefaultGRPCWorkers = 128

// Parse reads args (without the program name) and the environment.
func Parse(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	var c Config
	var envErrs []error
	// An optional config file (--config or TOOLGATE_CONFIG): its keys are
	// flag names; it ranks below the environment and the flags.
	if path := configPath(args, getenv); path != "" {
		file, err := loadFile(path)
		if err != nil {
			return c, err
		}
		env := getenv
		getenv = func(k string) string {
			if v := env(k); v != "" {
				return v
			}
			return file[k]
		}
	}
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	fs.SetOutput(stderr)
	str := func(p *string, name, def, usage string) {
		fs.StringVar(p, name, envOr(getenv, name, def), usage+" (env "+envName(name)+")")
	}
	dur := func(p *time.Duration, name string, def time.Duration, usage string) {
		d := def
		if v := getenv(envName(name)); v != "" {
			pd, err := time.ParseDuration(v)
			if err != nil {
				envErrs = append(envErrs, fmt.Errorf("%s=%q: want a duration such as 30s", envName(name), v))
			} else {
				d = pd
			}
		}
		fs.DurationVar(p, name, d, usage+" (env "+envName(name)+")")
	}
	fs.String("config", "", "optional YAML or JSON file of settings keyed by flag name; flags and env win (env TOOLGATE_CONFIG)")
	str(&c.GRPCAddr, "grpc-addr", "127.0.0.1:9090", "gRPC listen address")
	str(&c.HTTP.Addr, "http-addr", "127.0.0.1:8081", "HTTP/JSON listen address")
	str(&c.AdminAddr, "admin-addr", DefaultAdminAddr, "admin listen address: /metrics, /readyz with its details, /healthz and the Go profiles (/debug/pprof/), none of them on the public HTTP listener; off (or \"\") turns it off. Keep it off the internet: it asks for no credentials")
	str(&c.Pulsar.URL, "pulsar-url", transport.DefaultPulsarURL, "Pulsar broker URL")
	str(&c.Pulsar.AdminURL, "pulsar-admin-url", "", "Pulsar admin URL (e.g. http://127.0.0.1:8080; on a cluster several, comma-separated, tried in turn); when set, calls to a tool service nobody listens to fail at once with UNAVAILABLE, and calls whose service left or reconnected soon after")
	fs.IntVar(&c.GRPCWorkers, "grpc-workers", envInt(getenv, "grpc-workers", DefaultGRPCWorkers, &envErrs), "gRPC handler goroutines kept for reuse (their stacks stay grown; calls beyond them get a goroutine each); 0 starts a goroutine per call as grpc-go does (env "+envName("grpc-workers")+")")
	fs.IntVar(&c.GCHeapMiB, "gc-heap-mib", envInt(getenv, "gc-heap-mib", gcgoal.DefaultHeapMiB, &envErrs), "heap size in MiB below which the garbage collector runs less often (GOGC up to 500 while the live heap is small, Go's default 100 once it reaches half this); 0 turns it off, and a GOGC environment variable overrides it (env "+envName("gc-heap-mib")+")")
	fs.BoolVar(&c.Pulsar.Batching, "pulsar-batching", envBool(getenv, "pulsar-batching", true, &envErrs), "batch requests that gather while the previous batch awaits the broker's receipt; false sends each on its own (env "+envName("pulsar-batching")+")")
	fs.BoolVar(&c.MCP, "mcp", envBool(getenv, "mcp", true, &envErrs), "serve the tools over the Model Context Protocol (Streamable HTTP, stateless) at /mcp on the HTTP listener (env "+envName("mcp")+")")
	dur(&c.MCPCacheTTL, "mcp-cache-ttl", mcp.DefaultMaxCacheTTL, "longest time MCP clients may cache tools/list (the ttlMs hint of protocol 2026-07-28: a tenth of the time since the tool list last changed, up to this); 0 = never")
	var authServers, scopes string
	str(&c.MCPOAuth.Resource, "mcp-resource", "", "the MCP endpoint's URL as OAuth clients reach it (e.g. https://gateway.example.com/mcp): publishes its protected resource metadata (RFC 9728) at /.well-known/oauth-protected-resource[/mcp], names it in 401 challenges, and is the audience JWTs must carry unless --jwt-audience says otherwise")
	str(&authServers, "mcp-authorization-servers", "", "comma-separated issuer URLs of the authorization servers of --mcp-resource (default: --jwt-issuer)")
	str(&scopes, "mcp-scopes", "", "comma-separated scopes MCP clients should ask for (scopes_supported of --mcp-resource)")
	str(&c.InstanceID, "instance-id", defaultInstanceID(), "name of this gateway replica, unique among the replicas on one Pulsar cluster: in logs, metrics, /readyz and its reply topic non-persistent://tg/response/toolgate.<id> (default: host name and a random suffix)")
	fs.BoolVar(&c.ReplyTo, "reply-to", envBool(getenv, "reply-to", true, &envErrs), "name this instance's own reply topic in every request (reply-to), so services that honour it answer this replica only; false leaves every reply on the shared response topics, received by every replica (env "+envName("reply-to")+")")
	fs.BoolVar(&c.Operations, "operations", envBool(getenv, "operations", false, &envErrs), "serve durable operations (POST /v1/tools/{name}:start, /v1/operations): their state is kept on the broker (persistent://tg/operations/state, the namespace tg/operations must exist) so any replica answers for them (env "+envName("operations")+")")
	dur(&c.OperationTTL, "operation-ttl", operations.DefaultTTL, "how long a durable operation is kept once it ended")
	str(&c.OperationsKeyFile, "operations-key-file", "", "file holding the key (at least 32 bytes, e.g. openssl rand -base64 48) with which the deployment's gateways encrypt and sign the records of durable operations and check those they read; records not signed with it are refused. Required with --operations; every replica needs the same")
	str(&c.OperationsPreviousKeyFile, "operations-previous-key-file", "", "file holding a key whose records are still accepted, never written with: the key --operations-key-file replaces, while the replicas move to the new one")
	str(&c.OperationsTopics.State, "operations-state-topic", operations.DefaultStateTopic, "compacted topic of the durable operations' state table; one deployment's gateways share it")
	str(&c.OperationsTopics.Chunks, "operations-chunk-topic", operations.DefaultChunkTopic, "topic keeping the chunks of durable operations' answers that come in several messages")
	str(&c.OperationsTopics.Replies, "operations-reply-topic", wire.OperationsTopic, "persistent topic of the response namespace that tool services answer durable operations on (their reply-to)")
	fs.IntVar(&c.MaxOperationsPerCaller, "max-operations-per-caller", envInt(getenv, "max-operations-per-caller", operations.DefaultMaxPerOwner, &envErrs), "durable operations one caller may have running; one more is refused with RESOURCE_EXHAUSTED (env "+envName("max-operations-per-caller")+")")
	fs.IntVar(&c.MaxInFlight, "max-in-flight", envInt(getenv, "max-in-flight", bridge.DefaultMaxInFlight, &envErrs), "calls waiting for replies at once; beyond it calls fail with RESOURCE_EXHAUSTED (env "+envName("max-in-flight")+")")
	fs.IntVar(&c.MaxInFlightPerService, "max-in-flight-per-service", envInt(getenv, "max-in-flight-per-service", bridge.DefaultMaxInFlightPerService, &envErrs), "calls in flight to one tool service from this instance, kept below the service's request queue so that the broker drops none; further calls wait up to --service-queue-wait, then fail with RESOURCE_EXHAUSTED and a retry hint; 0 = no bound (env "+envName("max-in-flight-per-service")+")")
	dur(&c.ServiceQueueWait, "service-queue-wait", bridge.DefaultServiceQueueWait, "how long a call waits for a free slot of its tool service (at most half its remaining deadline)")
	fs.IntVar(&c.StreamWindow, "stream-window", envInt(getenv, "stream-window", bridge.DefaultStreamWindow, &envErrs), "flow control of streamed replies: chunks a tool service that honours it (the Go SDK) may send ahead of what the client has read; it waits for more instead of the broker dropping them; 0 = off (env "+envName("stream-window")+")")
	dur(&c.Core.StreamIdle, "stream-idle-timeout", 0, "end a stream whose next chunk takes longer than this; 0 = only the call's deadline")
	str(&c.Registry, "registry", "", "tool registry file (JSON or YAML); optional when --announcements or --trustgraph-config is on. Its entries win over the other sources'")
	fs.BoolVar(&c.Announcements, "announcements", envBool(getenv, "announcements", true, &envErrs), "register the tools that tool services announce on --announce-topic (env "+envName("announcements")+")")
	str(&c.AnnounceTopic, "announce-topic", pulsarsrc.DefaultAnnounceTopic, "compacted topic of tool service announcements, keyed by service id")
	fs.BoolVar(&c.TrustGraphConfig, "trustgraph-config", envBool(getenv, "trustgraph-config", false, &envErrs), "read tool-service and tool descriptors from TrustGraph's config service over Pulsar; its entries win over announcements (env "+envName("trustgraph-config")+")")
	var reqNS, respNS string
	str(&reqNS, "announce-request-namespaces", strings.Join(registry.DefaultAnnounceRequestNamespaces, ","), "comma-separated namespaces (tenant/namespace) an announced service's request topic must be in; announcements naming another are refused")
	str(&respNS, "announce-response-namespaces", strings.Join(registry.DefaultAnnounceResponseNamespaces, ","), "comma-separated namespaces (tenant/namespace) an announced service's response topic must be in")
	fs.BoolVar(&c.Announce.Takeover, "announce-takeover", envBool(getenv, "announce-takeover", false, &envErrs), "let a later announcement take a tool name or topic from the service that announced it first; by default the first keeps it and the later one is a conflict, logged and shown in /readyz (env "+envName("announce-takeover")+")")
	dur(&c.Announce.ClaimGrace, "announce-claim-grace", registry.DefaultClaimGrace, "how long an announced service whose instances have all left (withdrawn, or leases run out) keeps its tool names and topics: a restart within it keeps its place, and no announcement refused for them is promoted meanwhile; 0 = none")
	var release string
	str(&release, "announce-release", "", "comma-separated announced service ids whose tool names and topics are handed over (to announcements refused for them) as soon as their last instance leaves, without --announce-claim-grace; logged")
	str(&c.TrustGraphWorkspace, "trustgraph-workspace", pulsarsrc.DefaultWorkspace, "TrustGraph config workspace holding the descriptors")
	dur(&c.Core.DefaultTimeout, "default-timeout", toolcall.DefaultTimeout, "deadline of a call when neither caller nor tool service sets one")
	dur(&c.Core.MaxTimeout, "max-timeout", toolcall.DefaultMaxTimeout, "the longest deadline a caller may ask for")
	dur(&c.ShutdownGrace, "shutdown-grace", 10*time.Second, "how long calls in flight may finish after SIGTERM")
	str(&c.Core.DefaultUser, "default-user", toolcall.DefaultUser, "envelope user for calls without an authenticated identity")
	str(&c.LogFormat, "log-format", "text", "log format: text or json")
	str(&c.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
	str(&c.TLSCert, "tls-cert", "", "PEM certificate for TLS on the gRPC and HTTP listeners")
	str(&c.TLSKey, "tls-key", "", "PEM private key of --tls-cert")
	str(&c.ClientCA, "client-ca", "", "PEM CA bundle: verify client certificates (mTLS) and accept them as identities; needs --tls-cert")
	str(&c.Auth.APIKeys, "api-keys", "", "file of hashed API keys (key hash → user, roles)")
	str(&c.Auth.JWTSecretFile, "jwt-hs256-secret-file", "", "file holding the HS256 secret of JWT bearer tokens")
	str(&c.Auth.JWTJWKSFile, "jwt-jwks-file", "", "JWKS file with the public keys of RS/ES/PS/EdDSA JWT bearer tokens")
	str(&c.Auth.JWTIssuer, "jwt-issuer", "", "required JWT issuer (iss)")
	str(&c.Auth.JWTAudience, "jwt-audience", "", "required JWT audience (aud)")
	str(&c.Auth.JWTUserClaim, "jwt-user-claim", auth.DefaultUserClaim, "JWT claim holding the user")
	str(&c.Auth.JWTRolesClaim, "jwt-roles-claim", "", "JWT claim holding the roles (dots reach into objects)")
	str(&c.Auth.Policy, "policy", "", "authorization policy file: which users/roles (api-key:alice, jwt(<issuer>):alice, mtls:alice) may list and invoke which tools, and which identities are one; none = every authenticated caller may do everything")
	fs.BoolVar(&c.Auth.AllowAnonymous, "allow-anonymous", envBool(getenv, "allow-anonymous", false, &envErrs), "serve callers without credentials as --default-user (env "+envName("allow-anonymous")+")")
	fs.Float64Var(&c.RateLimit, "rate-limit", envFloat(getenv, "rate-limit", 0, &envErrs), "calls per second per caller — user and source of its identity (token bucket); 0 = no limit (env "+envName("rate-limit")+")")
	fs.IntVar(&c.RateBurst, "rate-burst", envInt(getenv, "rate-burst", limits.DefaultBurst, &envErrs), "burst of the per-user rate limit (env "+envName("rate-burst")+")")
	var maxBody, maxHeader int
	fs.IntVar(&maxBody, "max-body-bytes", envInt(getenv, "max-body-bytes", limits.DefaultMaxBody, &envErrs), "largest request body, and largest message, on every door, counted after decompression (a gzip body is inflated up to it, no further): REST and MCP answer 413, gRPC, Connect and gRPC-Web RESOURCE_EXHAUSTED (env "+envName("max-body-bytes")+")")
	fs.IntVar(&maxHeader, "max-header-bytes", envInt(getenv, "max-header-bytes", limits.DefaultMaxHeaderBytes, &envErrs), "largest request headers (gRPC: metadata) on every door: REST and MCP answer 431, gRPC, Connect and gRPC-Web RESOURCE_EXHAUSTED; above 4 times it the server refuses them at the protocol level (env "+envName("max-header-bytes")+")")
	dur(&c.Limits.BodyTimeout, "body-timeout", limits.DefaultBodyTimeout, "time a request's body (gRPC: its first message) has to arrive in full on every door, from its headers: REST and MCP answer 408 and close the connection, gRPC, Connect and gRPC-Web DEADLINE_EXCEEDED; 0 = no limit; responses, streams included, are not limited")
	str(&c.Quota.Rules, "quota-rules", "", "quota rules file (YAML or JSON): calls a second, minute, hour or day and calls at once, per caller, for the users and roles and tools each rule names; a call over one is refused with RESOURCE_EXHAUSTED (429) and a retry delay; none = no quotas")
	str(&c.Quota.RedisURL, "quota-redis-url", "", "Redis that keeps the quotas' counts, shared by every replica pointing at it (redis://[user:password@]host:port[/db], rediss:// for TLS); empty = in this gateway's memory, for one replica")
	dur(&c.Quota.RedisTimeout, "quota-redis-timeout", quota.DefaultRedisTimeout, "longest wait for Redis on a call under quota; past it the store counts as unreachable (see --quota-redis-failure)")
	var quotaFailure string
	str(&quotaFailure, "quota-redis-failure", "open", "calls under quota while Redis does not answer: open lets them through uncounted, closed refuses them with UNAVAILABLE (503) and a retry delay; both are counted in toolgate_quota_store_errors_total")
	var cors string
	str(&cors, "cors-origins", "", "comma-separated origins browsers may call the HTTP API from (\"*\" for any); empty = CORS off")
	dur(&c.HTTP.SSEHeartbeat, "sse-heartbeat", httpapi.DefaultSSEHeartbeat, "a quiet Server-Sent Events stream gets a keep-alive comment this often")
	str(&c.Pulsar.TokenFile, "pulsar-token-file", "", "file holding a Pulsar authentication token (JWT), re-read on every connection")
	str(&c.Pulsar.TLSCA, "pulsar-tls-ca", "", "PEM CA bundle to trust for pulsar+ssl:// broker URLs")
	str(&c.OTLPEndpoint, "otlp-endpoint", "", "OTLP/gRPC trace collector (host:port or http(s)://…); empty = tracing off")
	fs.BoolVar(&c.OTLPInsecure, "otlp-insecure", envBool(getenv, "otlp-insecure", false, &envErrs), "no TLS to the OTLP collector (env "+envName("otlp-insecure")+")")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.AdminAddr == "off" {
		c.AdminAddr = ""
	}
	switch quotaFailure {
	case "open", "closed":
		c.Quota.FailClosed = quotaFailure == "closed"
	default:
		envErrs = append(envErrs, fmt.Errorf("--quota-redis-failure %q: want open or closed", quotaFailure))
	}
	c.Announce.RequestNamespaces, c.Announce.ResponseNamespaces = commaList(reqNS), commaList(respNS)
	c.Announce.Release = commaList(release)
	c.HTTP.CORSOrigins = commaList(cors)
	c.Limits.MaxBodyBytes, c.Limits.MaxHeaderBytes = int64(maxBody), maxHeader
	c.MCPOAuth.AuthorizationServers, c.MCPOAuth.Scopes = commaList(authServers), commaList(scopes)
	if c.MCPOAuth.Resource != "" {
		if len(c.MCPOAuth.AuthorizationServers) == 0 && c.Auth.JWTIssuer != "" {
			c.MCPOAuth.AuthorizationServers = []string{c.Auth.JWTIssuer}
		}
		// MCP clients ask for tokens whose audience is the resource
		// (RFC 8707): only those may reach it.
		if c.Auth.JWTAudience == "" {
			c.Auth.JWTAudience = c.MCPOAuth.Resource
		}
	}
	c.Auth.DefaultUser, c.Auth.ClientCerts = c.Core.DefaultUser, c.ClientCA != ""
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	return c, errors.Join(append(envErrs, c.validate())...)
}

// commaList is the non-empty, trimmed items of a comma-separated list.
func commaList(s string) []string {
	var out []string
	for _, o := range strings.Split(s, ",") {
		if o = strings.TrimSpace(o); o != "" {
			out = append(out, o)
		}
	}
	return out
}

func (c Config) validate() error {
	var errs []error
	addrs := []struct{ name, v string }{{"grpc-addr", c.GRPCAddr}, {"http-addr", c.HTTP.Addr}}
	if c.AdminAddr != "" {
		addrs = append(addrs, struct{ name, v string }{"admin-addr", c.AdminAddr})
	}
	for _, a := range addrs {
		if _, _, err := net.SplitHostPort(a.v); err != nil {
			errs = append(errs, fmt.Errorf("--%s %q: want host:port", a.name, a.v))
		}
	}
	if !strings.HasPrefix(c.Pulsar.URL, "pulsar://") && !strings.HasPrefix(c.Pulsar.URL, "pulsar+ssl://") {
		errs = append(errs, fmt.Errorf("--pulsar-url %q: want pulsar://host:port or pulsar+ssl://host:port", c.Pulsar.URL))
	}
	if c.Pulsar.AdminURL != "" {
		for u := range strings.SplitSeq(c.Pulsar.AdminURL, ",") {
			if u = strings.TrimSpace(u); !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
				errs = append(errs, fmt.Errorf("--pulsar-admin-url %q: want http://host:port, or several separated by commas", c.Pulsar.AdminURL))
				break
			}
		}
	}
	if !instanceIDRE.MatchString(c.InstanceID) {
		errs = append(errs, fmt.Errorf("--instance-id %q: want 1 to 200 letters, digits and . _ - = (it ends the name of the instance's reply topic)", c.InstanceID))
	}
	if c.GCHeapMiB < 0 || c.GCHeapMiB > 1<<20 {
		errs = append(errs, errors.New("--gc-heap-mib must be between 0 and 1048576"))
	}
	if c.GRPCWorkers < 0 {
		errs = append(errs, errors.New("--grpc-workers must not be negative"))
	}
	if c.MaxInFlight <= 0 {
		errs = append(errs, errors.New("--max-in-flight must be positive"))
	}
	if c.MaxInFlightPerService < 0 {
		errs = append(errs, errors.New("--max-in-flight-per-service must not be negative"))
	}
	if c.ServiceQueueWait < 0 {
		errs = append(errs, errors.New("--service-queue-wait must not be negative"))
	}
	if c.StreamWindow < 0 || c.StreamWindow > 4000 {
		errs = append(errs, errors.New("--stream-window must be between 0 and 4000"))
	}
	if c.OperationTTL <= 0 {
		errs = append(errs, errors.New("--operation-ttl must be positive"))
	}
	if c.MaxOperationsPerCaller <= 0 {
		errs = append(errs, errors.New("--max-operations-per-caller must be positive"))
	}
	if c.Operations {
		errs = append(errs, c.validateOperations()...)
	}
	if c.Core.StreamIdle < 0 {
		errs = append(errs, errors.New("--stream-idle-timeout must not be negative"))
	}
	if c.Limits.BodyTimeout < 0 {
		errs = append(errs, errors.New("--body-timeout must not be negative"))
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		errs = append(errs, errors.New("--tls-cert and --tls-key go together"))
	}
	if c.ClientCA != "" && c.TLSCert == "" {
		errs = append(errs, errors.New("--client-ca needs --tls-cert and --tls-key: client certificates travel over TLS"))
	}
	if c.RateLimit < 0 || c.RateBurst < 1 {
		errs = append(errs, errors.New("--rate-limit must not be negative and --rate-burst must be at least 1"))
	}
	if c.Quota.RedisURL != "" {
		if c.Quota.Rules == "" {
			errs = append(errs, errors.New("--quota-redis-url keeps the counts of --quota-rules: give it too"))
		}
		if u, err := url.Parse(c.Quota.RedisURL); err != nil || (u.Scheme != "redis" && u.Scheme != "rediss" && u.Scheme != "unix") {
			errs = append(errs, fmt.Errorf("--quota-redis-url %q: want redis://host:port, rediss://host:port or unix:///path", c.Quota.RedisURL))
		}
	}
	if c.Quota.RedisTimeout <= 0 {
		errs = append(errs, errors.New("--quota-redis-timeout must be a positive duration such as 250ms"))
	}
	if c.HTTP.SSEHeartbeat <= 0 {
		errs = append(errs, errors.New("--sse-heartbeat must be a positive duration such as 15s"))
	}
	for _, o := range c.HTTP.CORSOrigins {
		if o != "*" && !strings.HasPrefix(o, "http://") && !strings.HasPrefix(o, "https://") {
			errs = append(errs, fmt.Errorf("--cors-origins %q: want origins such as https://app.example.com, or *", o))
		}
	}
	if r := c.MCPOAuth.Resource; r != "" {
		if err := mcp.CheckResource(r); err != nil {
			errs = append(errs, fmt.Errorf("--mcp-resource %q: %w", r, err))
		}
		if !c.MCP {
			errs = append(errs, errors.New("--mcp-resource needs --mcp: the resource is the MCP endpoint"))
		}
		if len(c.MCPOAuth.AuthorizationServers) == 0 {
			errs = append(errs, errors.New("--mcp-resource needs --mcp-authorization-servers or --jwt-issuer: clients must learn where to get tokens"))
		}
		if c.Auth.JWTSecretFile == "" && c.Auth.JWTJWKSFile == "" {
			errs = append(errs, errors.New("--mcp-resource needs --jwt-jwks-file or --jwt-hs256-secret-file: the authorization servers' tokens are JWTs the gateway checks"))
		}
	} else if len(c.MCPOAuth.AuthorizationServers) > 0 || len(c.MCPOAuth.Scopes) > 0 {
		errs = append(errs, errors.New("--mcp-authorization-servers and --mcp-scopes describe --mcp-resource: give it too"))
	}
	for _, a := range c.MCPOAuth.AuthorizationServers {
		if u, err := url.Parse(a); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			errs = append(errs, fmt.Errorf("--mcp-authorization-servers %q: want issuer URLs such as https://auth.example.com", a))
		}
	}
	if c.MCPCacheTTL < 0 {
		errs = append(errs, errors.New("--mcp-cache-ttl must not be negative"))
	}
	if c.Limits.MaxBodyBytes < 1 || c.Limits.MaxBodyBytes > 1<<30 {
		errs = append(errs, errors.New("--max-body-bytes must be between 1 and 1073741824"))
	}
	if c.Limits.MaxHeaderBytes < 1024 || c.Limits.MaxHeaderBytes > 16<<20 {
		errs = append(errs, errors.New("--max-header-bytes must be between 1024 and 16777216"))
	}
	if c.Auth.APIKeys == "" && c.Auth.JWTSecretFile == "" && c.Auth.JWTJWKSFile == "" && c.ClientCA == "" && !c.Auth.AllowAnonymous {
		errs = append(errs, errors.New("no way to authenticate callers: give --api-keys, --jwt-hs256-secret-file, --jwt-jwks-file or --client-ca, or --allow-anonymous to serve everyone as --default-user"))
	}
	if c.Announcements && !strings.HasPrefix(c.AnnounceTopic, "persistent://") {
		errs = append(errs, fmt.Errorf("--announce-topic %q must be a persistent:// topic (announcements are read from its compacted view)", c.AnnounceTopic))
	}
	if c.Announce.ClaimGrace < 0 {
		errs = append(errs, fmt.Errorf("--announce-claim-grace %v: want 0 or more", c.Announce.ClaimGrace))
	}
	if c.Announcements {
		errs = append(errs, c.validateAnnounce()...)
	}
	if c.TrustGraphConfig && c.TrustGraphWorkspace == "" {
		errs = append(errs, errors.New("--trustgraph-workspace must not be empty"))
	}
	if c.Registry == "" && !c.Announcements && !c.TrustGraphConfig {
		errs = append(errs, errors.New("no registry source: give --registry (a JSON or YAML file with tool-service and tool sections), or turn on --announcements or --trustgraph-config"))
	} else if c.Registry == "" {
		// the other sources are enough
	} else if _, err := os.Stat(c.Registry); err != nil {
		errs = append(errs, fmt.Errorf("--registry: %w", err))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"default-timeout", c.Core.DefaultTimeout}, {"max-timeout", c.Core.MaxTimeout}, {"shutdown-grace", c.ShutdownGrace}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("--%s must be a positive duration such as 30s", d.name))
		}
	}
	if c.Core.DefaultTimeout > c.Core.MaxTimeout && c.Core.MaxTimeout > 0 {
		errs = append(errs, errors.New("--default-timeout must not exceed --max-timeout"))
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		errs = append(errs, fmt.Errorf("--log-format %q: want text or json", c.LogFormat))
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("--log-level %q: want debug, info, warn or error", c.LogLevel))
	}
	return errors.Join(errs...)
}

// validateOperations checks the settings of --operations: a key to protect
// the records with, and the topics.
func (c Config) validateOperations() []error {
	var errs []error
	if c.OperationsKeyFile == "" {
		errs = append(errs, errors.New("--operations needs --operations-key-file: the gateways encrypt and sign the operations' records with a key they share, and refuse records without it (make one with: openssl rand -base64 48 > operations.key)"))
	}
	for _, f := range []struct{ name, topic string }{
		{"operations-state-topic", c.OperationsTopics.State},
		{"operations-chunk-topic", c.OperationsTopics.Chunks},
		{"operations-reply-topic", c.OperationsTopics.Replies},
	} {
		if err := wire.ValidateTopic(f.topic); err != nil || !strings.HasPrefix(f.topic, "persistent://") {
			errs = append(errs, fmt.Errorf("--%s %q: want a persistent:// topic (tenant/namespace/name)", f.name, f.topic))
		}
	}
	// Services answer only within their response topic's namespace.
	if !wire.ReplyToAllowed(c.OperationsTopics.Replies, wire.ResponseTopic("any")) {
		errs = append(errs, fmt.Errorf("--operations-reply-topic %q: want a persistent topic of the response namespace (%s/%s), where tool services may answer",
			c.OperationsTopics.Replies, wire.Tenant, wire.ResponseNamespace))
	}
	if s := c.OperationsTopics; s.State == s.Chunks || s.State == s.Replies || s.Chunks == s.Replies {
		errs = append(errs, errors.New("--operations-state-topic, --operations-chunk-topic and --operations-reply-topic must be three different topics"))
	}
	return errs
}

// namespaceRE is a Pulsar tenant/namespace.
var namespaceRE = regexp.MustCompile(`^[A-Za-z0-9_.\-=]+/[A-Za-z0-9_.\-=]+$`)

// validateAnnounce checks the announced-topic namespaces: well formed,
// not empty, and never the namespace of the announcements themselves.
func (c Config) validateAnnounce() []error {
	var errs []error
	own := ""
	if _, rest, ok := strings.Cut(c.AnnounceTopic, "://"); ok {
		if i := strings.LastIndexByte(rest, '/'); i >= 0 {
			own = rest[:i]
		}
	}
	for _, f := range []struct {
		name string
		list []string
	}{{"announce-request-namespaces", c.Announce.RequestNamespaces}, {"announce-response-namespaces", c.Announce.ResponseNamespaces}} {
		if len(f.list) == 0 {
			errs = append(errs, fmt.Errorf("--%s must name at least one namespace (tenant/namespace)", f.name))
		}
		for _, ns := range f.list {
			switch {
			case !namespaceRE.MatchString(ns):
				errs = append(errs, fmt.Errorf("--%s %q: want tenant/namespace, such as tg/request", f.name, ns))
			case ns == own:
				errs = append(errs, fmt.Errorf("--%s %q: that is the namespace of --announce-topic; services must not be announced onto it", f.name, ns))
			}
		}
	}
	return errs
}

// instanceIDRE is what may end a Pulsar topic name.
var instanceIDRE = regexp.MustCompile(`^[A-Za-z0-9_.\-=]{1,200}$`)

// defaultInstanceID is the host name, cut to the characters a topic name
// may hold, and 6 random hex digits: replicas on one host, or restarts of
// one replica, never share a reply topic.
func defaultInstanceID() string {
	host, _ := os.Hostname()
	host = strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		case r == '.':
			return '-'
		}
		return -1
	}, host)
	if len(host) > 60 {
		host = host[:60]
	}
	if host == "" {
		host = "toolgate"
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	return host + "-" + hex.EncodeToString(b[:])
}

func envName(flagName string) string {
	return "TOOLGATE_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// configPath finds --config in args, else TOOLGATE_CONFIG.
func configPath(args []string, getenv func(string) string) string {
	for i, a := range args {
		if a == "--" {
			break
		}
		for _, p := range []string{"--config", "-config"} {
			if a == p && i+1 < len(args) {
				return args[i+1]
			}
			if v, ok := strings.CutPrefix(a, p+"="); ok {
				return v
			}
		}
	}
	return getenv("TOOLGATE_CONFIG")
}

// loadFile reads a config file into environment-variable form.
func loadFile(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("--config %s: not a YAML or JSON mapping: %w", path, err)
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		switch v.(type) {
		case map[string]any, []any, nil:
			return nil, fmt.Errorf("--config %s: %q must be a single value", path, k)
		}
		out[envName(k)] = fmt.Sprint(v)
	}
	return out, nil
}

func envBool(getenv func(string) string, name string, def bool, errs *[]error) bool {
	v := getenv(envName(name))
	if v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		*errs = append(*errs, fmt.Errorf("%s=%q: want true or false", envName(name), v))
		return def
	}
	return b
}

func envFloat(getenv func(string) string, name string, def float64, errs *[]error) float64 {
	v := getenv(envName(name))
	if v == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		*errs = append(*errs, fmt.Errorf("%s=%q: want a number", envName(name), v))
		return def
	}
	return f
}

func envInt(getenv func(string) string, name string, def int, errs *[]error) int {
	v := getenv(envName(name))
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		*errs = append(*errs, fmt.Errorf("%s=%q: want a whole number", envName(name), v))
		return def
	}
	return n
}

func envOr(getenv func(string) string, name, def string) string {
	if v := getenv(envName(name)); v != "" {
		return v
	}
	return def
}
