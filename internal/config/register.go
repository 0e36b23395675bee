package config

import (
	"fmt"
	"time"

	"github.com/toolgate/toolgate/internal/audit"
	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/internal/callerassert"
	"github.com/toolgate/toolgate/internal/doorconf"
	"github.com/toolgate/toolgate/internal/gcgoal"
	"github.com/toolgate/toolgate/internal/idempotency"
	"github.com/toolgate/toolgate/internal/limits"
	"github.com/toolgate/toolgate/internal/operations"
	"github.com/toolgate/toolgate/internal/quota"
	"github.com/toolgate/toolgate/internal/registry"
	"github.com/toolgate/toolgate/internal/registry/pulsarsrc"
	"github.com/toolgate/toolgate/internal/toolcall"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/wire"
)

// Each sub-config registers its own flags; Parse calls them all.

// register registers the settings of the process itself: the admin
// listener, the instance's name, the garbage collector, shutdown.
func (c *Config) register(f *flags) {
	f.str(&c.AdminAddr, "admin-addr", DefaultAdminAddr, "admin listen address: /metrics, /readyz with its details, /healthz and the Go profiles (/debug/pprof/), none of them on the public HTTP listener; off (or \"\") turns it off. Keep it off the internet: it asks for no credentials")
	f.int(&c.GCHeapMiB, "gc-heap-mib", gcgoal.DefaultHeapMiB, "heap size in MiB below which the garbage collector runs less often (GOGC up to 500 while the live heap is small, Go's default 100 once it reaches half this); 0 turns it off, and a GOGC environment variable overrides it")
	f.str(&c.InstanceID, "instance-id", defaultInstanceID(), "name of this gateway replica, unique among the replicas on one Pulsar cluster: in logs, metrics, /readyz and its reply topic non-persistent://tg/response/toolgate.<id> (default: host name and a random suffix)")
	f.dur(&c.ShutdownGrace, "shutdown-grace", 10*time.Second, "how long calls in flight may finish after SIGTERM")
	f.then(func() {
		if c.AdminAddr == "off" {
			c.AdminAddr = ""
		}
	})
}

func (g *GRPC) register(f *flags) {
	f.str(&g.Addr, "grpc-addr", "127.0.0.1:9090", "gRPC listen address")
	f.int(&g.Workers, "grpc-workers", DefaultGRPCWorkers, "gRPC handler goroutines kept for reuse (their stacks stay grown; calls beyond them get a goroutine each); 0 starts a goroutine per call as grpc-go does")
}

func (h *HTTP) register(f *flags) {
	f.str(&h.Addr, "http-addr", "127.0.0.1:8081", "HTTP/JSON listen address")
	f.list(&h.CORSOrigins, "cors-origins", nil, "comma-separated origins browsers may call the HTTP API from (\"*\" for any); empty = CORS off")
	f.dur(&h.SSEHeartbeat, "sse-heartbeat", doorconf.SSEHeartbeat, "a quiet Server-Sent Events stream gets a keep-alive comment this often")
}

func (k *Core) register(f *flags) {
	f.dur(&k.StreamIdle, "stream-idle-timeout", 0, "end a stream whose next chunk takes longer than this; 0 = only the call's deadline")
	f.dur(&k.DefaultTimeout, "default-timeout", toolcall.DefaultTimeout, "deadline of a call when neither caller nor tool service sets one")
	f.dur(&k.MaxTimeout, "max-timeout", toolcall.DefaultMaxTimeout, "the longest deadline a caller may ask for")
	f.str(&k.DefaultUser, "default-user", toolcall.DefaultUser, "envelope user for calls without an authenticated identity")
}

func registerLimits(f *flags, l *limits.Requests) {
	var maxBody, maxHeader int
	f.int(&maxBody, "max-body-bytes", limits.DefaultMaxBody, "largest request body, and largest message, on every door, counted after decompression (a gzip body is inflated up to it, no further): REST and MCP answer 413, gRPC, Connect and gRPC-Web RESOURCE_EXHAUSTED")
	f.int(&maxHeader, "max-header-bytes", limits.DefaultMaxHeaderBytes, "largest request headers (gRPC: metadata) on every door: REST and MCP answer 431, gRPC, Connect and gRPC-Web RESOURCE_EXHAUSTED; above 4 times it the server refuses them at the protocol level")
	f.dur(&l.BodyTimeout, "body-timeout", limits.DefaultBodyTimeout, "time a request's body (gRPC: its first message) has to arrive in full on every door, from its headers: REST and MCP answer 408 and close the connection, gRPC, Connect and gRPC-Web DEADLINE_EXCEEDED; 0 = no limit; responses, streams included, are not limited")
	f.then(func() { l.MaxBodyBytes, l.MaxHeaderBytes = int64(maxBody), maxHeader })
	h := &l.HTTP2
	f.int(&h.MaxConcurrentStreams, "http2-max-streams", limits.DefaultMaxConcurrentStreams, "streams a client may have open at once on one HTTP/2 connection, on the gRPC and HTTP listeners; more are refused (REFUSED_STREAM); -1 = no bound")
	f.int(&h.MaxResets, "http2-max-resets", limits.DefaultMaxResets, "streams a client may reset (RST_STREAM) within 1 s of opening them, as rapid reset does, on one HTTP/2 connection per 10 s, on both listeners; over it the connection gets GOAWAY ENHANCE_YOUR_CALM and is closed; -1 = no bound")
	f.int(&h.MaxPings, "http2-max-pings", limits.DefaultMaxPings, "PINGs a client may send on one HTTP/2 connection per 10 s beyond those the gateway's answers earn back, on both listeners; over it: GOAWAY ENHANCE_YOUR_CALM; -1 = no bound")
	f.int(&h.MaxSettings, "http2-max-settings", limits.DefaultMaxSettings, "SETTINGS frames a client may send on one HTTP/2 connection per 10 s, on both listeners; over it: GOAWAY ENHANCE_YOUR_CALM; -1 = no bound")
	f.dur(&h.CalmHold, "http2-calm-hold", limits.DefaultCalmHold, "how long new connections from an address whose HTTP/2 connection was closed for going over a budget wait before they are read (TLS handshake included), doubled with each closing within 10 s up to 8×; connections already open are not touched; 0 = none")
}

func (p *Pulsar) register(f *flags) {
	f.str(&p.URL, "pulsar-url", transport.DefaultPulsarURL, "Pulsar broker URL")
	f.str(&p.AdminURL, "pulsar-admin-url", "", "Pulsar admin URL (e.g. http://127.0.0.1:8080; on a cluster several, comma-separated, tried in turn); when set, calls to a tool service nobody listens to fail at once with UNAVAILABLE, and calls whose service left or reconnected soon after")
	f.bool(&p.Batching, "pulsar-batching", true, "batch requests that gather while the previous batch awaits the broker's receipt; false sends each on its own")
	f.str(&p.TokenFile, "pulsar-token-file", "", "file holding a Pulsar authentication token (JWT), re-read on every connection")
	f.str(&p.TLSCA, "pulsar-tls-ca", "", "PEM CA bundle to trust for pulsar+ssl:// broker URLs")
}

func (b *Bridge) register(f *flags) {
	f.bool(&b.ReplyTo, "reply-to", true, "name this instance's own reply topic in every request (reply-to), so services that honour it answer this replica only; false leaves every reply on the shared response topics, received by every replica")
	f.int(&b.MaxInFlight, "max-in-flight", bridge.DefaultMaxInFlight, "calls waiting for replies at once; beyond it calls fail with RESOURCE_EXHAUSTED")
	f.int(&b.MaxInFlightPerService, "max-in-flight-per-service", bridge.DefaultMaxInFlightPerService, "calls in flight to one tool service from this instance, kept below the service's request queue so that the broker drops none; further calls wait up to --service-queue-wait, then fail with RESOURCE_EXHAUSTED and a retry hint; 0 = no bound")
	f.dur(&b.ServiceQueueWait, "service-queue-wait", bridge.DefaultServiceQueueWait, "how long a call waits for a free slot of its tool service (at most half its remaining deadline)")
	f.dur(&b.HedgeAfter, "hedge-after", bridge.DefaultHedgeAfter, "a call to a tool service that sends receipts (the Go and Python SDKs) that has heard nothing of it — no receipt, no reply — for this long at least (longer when the service is seen to speak up later) is published once more, same id, for another replica to answer; more than 250ms (when a service sends a call's receipt); 0 = off")
	f.int(&b.StreamWindow, "stream-window", bridge.DefaultStreamWindow, "flow control of streamed replies: chunks a tool service that honours it (the Go SDK) may send ahead of what the client has read; it waits for more instead of the broker dropping them; 0 = off")
}

func (m *MCP) register(f *flags) {
	f.bool(&m.Enabled, "mcp", true, "serve the tools over the Model Context Protocol (Streamable HTTP, stateless) at /mcp on the HTTP listener")
	f.dur(&m.CacheTTL, "mcp-cache-ttl", doorconf.MCPMaxCacheTTL, "longest time MCP clients may cache tools/list (the ttlMs hint of protocol 2026-07-28: a tenth of the time since the tool list last changed, up to this); 0 = never")
	f.str(&m.OAuth.Resource, "mcp-resource", "", "the MCP endpoint's URL as OAuth clients reach it (e.g. https://gateway.example.com/mcp): publishes its protected resource metadata (RFC 9728) at /.well-known/oauth-protected-resource[/mcp], names it in 401 challenges, and is the audience JWTs must carry unless --jwt-audience says otherwise")
	f.list(&m.OAuth.AuthorizationServers, "mcp-authorization-servers", nil, "comma-separated issuer URLs of the authorization servers of --mcp-resource (default: --jwt-issuer)")
	f.list(&m.OAuth.Scopes, "mcp-scopes", nil, "comma-separated scopes MCP clients should ask for (scopes_supported of --mcp-resource)")
}

func (o *Operations) register(f *flags) {
	f.bool(&o.Enabled, "operations", false, "serve durable operations (POST /v1/tools/{name}:start, /v1/operations): their state is kept on the broker (persistent://tg/operations/state, the namespace tg/operations must exist) so any replica answers for them")
	f.dur(&o.TTL, "operation-ttl", operations.DefaultTTL, "how long a durable operation is kept once it ended")
	f.str(&o.KeyFile, "operations-key-file", "", "file holding the key (at least 32 bytes, e.g. openssl rand -base64 48) with which the deployment's gateways encrypt and sign the records of durable operations and check those they read; records not signed with it are refused. Required with --operations; every replica needs the same")
	f.str(&o.PreviousKeyFile, "operations-previous-key-file", "", "file holding a key whose records are still accepted, written with only for the operations started with it: the key --operations-key-file replaces, while the replicas move to the new one")
	f.str(&o.Topics.State, "operations-state-topic", operations.DefaultStateTopic, "compacted topic of the durable operations' state table; one deployment's gateways share it")
	f.str(&o.Topics.Chunks, "operations-chunk-topic", operations.DefaultChunkTopic, "topic keeping the chunks of durable operations' answers that come in several messages")
	f.str(&o.Topics.Replies, "operations-reply-topic", wire.OperationsTopic, "persistent topic of the response namespace that tool services answer durable operations on (their reply-to): each key has its own, this name followed by \".\" and the key's id, and a gateway consumes those of the keys it holds")
	f.int(&o.MaxPerCaller, "max-operations-per-caller", operations.DefaultMaxPerOwner, "durable operations one caller may have running; one more is refused with RESOURCE_EXHAUSTED")
}

func (r *Registry) register(f *flags) {
	f.str(&r.File, "registry", "", "tool registry file (JSON or YAML); optional when --announcements or --trustgraph-config is on. Its entries win over the other sources'")
	f.bool(&r.Announcements, "announcements", true, "register the tools that tool services announce on --announce-topic")
	f.str(&r.AnnounceTopic, "announce-topic", pulsarsrc.DefaultAnnounceTopic, "compacted topic of tool service announcements, keyed by service id")
	f.bool(&r.TrustGraph, "trustgraph-config", false, "read tool-service and tool descriptors from TrustGraph's config service over Pulsar; its entries win over announcements")
	f.list(&r.Announce.RequestNamespaces, "announce-request-namespaces", registry.DefaultAnnounceRequestNamespaces, "comma-separated namespaces (tenant/namespace) an announced service's request topic must be in; announcements naming another are refused")
	f.list(&r.Announce.ResponseNamespaces, "announce-response-namespaces", registry.DefaultAnnounceResponseNamespaces, "comma-separated namespaces (tenant/namespace) an announced service's response topic must be in")
	f.bool(&r.Announce.Takeover, "announce-takeover", false, "let a later announcement take a tool name or topic from the service that announced it first; by default the first keeps it and the later one is a conflict, logged and shown in /readyz")
	f.dur(&r.Announce.ClaimGrace, "announce-claim-grace", registry.DefaultClaimGrace, "how long an announced service whose instances have all left (withdrawn, or leases run out) keeps its tool names and topics: a restart within it keeps its place, and no announcement refused for them is promoted meanwhile; 0 = none")
	f.list(&r.Announce.Release, "announce-release", nil, "comma-separated announced service ids whose tool names and topics are handed over (to announcements refused for them) as soon as their last instance leaves, without --announce-claim-grace; logged")
	f.str(&r.TrustGraphWorkspace, "trustgraph-workspace", pulsarsrc.DefaultWorkspace, "TrustGraph config workspace holding the descriptors")
}

func (l *Log) register(f *flags) {
	f.str(&l.Format, "log-format", "text", "log format: text or json")
	f.str(&l.Level, "log-level", "info", "log level: debug, info, warn or error")
}

func (t *TLS) register(f *flags) {
	f.str(&t.Cert, "tls-cert", "", "PEM certificate for TLS on the gRPC and HTTP listeners")
	f.str(&t.Key, "tls-key", "", "PEM private key of --tls-cert")
	f.str(&t.ClientCA, "client-ca", "", "PEM CA bundle: verify client certificates (mTLS) and accept them as identities; needs --tls-cert")
}

func registerAuth(f *flags, a *Auth) {
	f.str(&a.APIKeys, "api-keys", "", "file of hashed API keys (key hash → user, roles)")
	f.str(&a.JWTSecretFile, "jwt-hs256-secret-file", "", "file holding the HS256 secret of JWT bearer tokens")
	f.str(&a.JWTJWKSFile, "jwt-jwks-file", "", "JWKS file with the public keys of RS/ES/PS/EdDSA JWT bearer tokens")
	f.str(&a.JWTIssuer, "jwt-issuer", "", "required JWT issuer (iss)")
	f.str(&a.JWTAudience, "jwt-audience", "", "required JWT audience (aud)")
	f.str(&a.JWTUserClaim, "jwt-user-claim", auth.DefaultUserClaim, "JWT claim holding the user")
	f.str(&a.JWTRolesClaim, "jwt-roles-claim", "", "JWT claim holding the roles (dots reach into objects)")
	f.str(&a.Policy, "policy", "", "authorization policy file: which users/roles (api-key:alice, jwt(<issuer>):alice, mtls:alice) may list and invoke which tools, and which identities are one; none = every authenticated caller may do everything")
	f.bool(&a.AllowAnonymous, "allow-anonymous", false, "serve callers without credentials as --default-user")
}

func (r *Rate) register(f *flags) {
	f.float(&r.Limit, "rate-limit", 0, "calls per second per caller — user and source of its identity (token bucket); 0 = no limit")
	f.int(&r.Burst, "rate-burst", limits.DefaultBurst, "burst of the per-user rate limit")
}

func (q *Quota) register(f *flags) {
	var failure string
	f.str(&q.Rules, "quota-rules", "", "quota rules file (YAML or JSON): calls a second, minute, hour or day and calls at once, per caller, for the users and roles and tools each rule names; a call over one is refused with RESOURCE_EXHAUSTED (429) and a retry delay; none = no quotas")
	f.str(&q.RedisURL, "quota-redis-url", "", "Redis that keeps the quotas' counts, shared by every replica pointing at it (redis://[user:password@]host:port[/db], rediss:// for TLS); empty = in this gateway's memory, for one replica")
	f.dur(&q.RedisTimeout, "quota-redis-timeout", quota.DefaultRedisTimeout, "longest wait for Redis on a call under quota; past it the store counts as unreachable (see --quota-redis-failure)")
	f.str(&failure, "quota-redis-failure", "open", "calls under quota while Redis does not answer: open lets them through uncounted, closed refuses them with UNAVAILABLE (503) and a retry delay; both are counted in toolgate_quota_store_errors_total")
	f.then(func() {
		switch failure {
		case "open", "closed":
			q.FailClosed = failure == "closed"
		default:
			f.errs = append(f.errs, fmt.Errorf("--quota-redis-failure %q: want open or closed", failure))
		}
	})
}

func (i *Idempotency) register(f *flags) {
	f.str(&i.RedisURL, "idempotency-redis-url", "", "Redis that keeps calls' idempotency keys and answers, shared by every replica pointing at it (redis://[user:password@]host:port[/db], rediss:// for TLS; may be the quotas' Redis); empty = no store: a call with an Idempotency-Key is refused (FAILED_PRECONDITION)")
	f.dur(&i.RedisTimeout, "idempotency-redis-timeout", idempotency.DefaultRedisTimeout, "longest wait for Redis on a call with an idempotency key; past it the call is refused with UNAVAILABLE (503) and a retry delay, never run unprotected")
	f.dur(&i.Window, "idempotency-window", idempotency.DefaultWindow, "how long a call's answer is kept for retries with its idempotency key, from when the call ended")
	f.int(&i.MaxAnswerBytes, "idempotency-max-answer-bytes", idempotency.DefaultMaxAnswerBytes, "the largest answer kept for an idempotency key (output, chunks or error); a call whose answer is larger is answered, and its retries are refused (FAILED_PRECONDITION IDEMPOTENCY_ANSWER_NOT_KEPT), not run again")
}

func (t *Tracing) register(f *flags) {
	f.str(&t.OTLPEndpoint, "otlp-endpoint", "", "OTLP/gRPC trace collector (host:port or http(s)://…); empty = tracing off")
	f.bool(&t.OTLPInsecure, "otlp-insecure", false, "no TLS to the OTLP collector")
}

func (c *Callers) register(f *flags) {
	f.str(&c.KeyFile, "caller-key-file", "", "PEM PKCS#8 private key (Ed25519: openssl genpkey -algorithm ed25519; or P-256) with which the gateway signs a caller assertion for every call's request (the toolgate-caller word: who the caller is, for which service and tool, until the deadline), which tool services check against the public keys served at "+wire.CallerJWKSPath+" on the admin listener; every replica needs the same; empty = no assertions")
	f.str(&c.PreviousKeyFile, "caller-previous-key-file", "", "the key --caller-key-file replaces (its PEM private or public key): still in the served public keys, never signed with, while tool services move to the new one")
	f.str(&c.Issuer, "caller-issuer", callerassert.DefaultIssuer, "issuer (iss) of the caller assertions: names the deployment, which tool services may require")
	f.bool(&c.JWKSPublic, "caller-jwks-public", false, "serve the caller assertions' public keys at "+wire.CallerJWKSPath+" on the public HTTP listener too, not only on the admin listener")
}

func (a *Audit) register(f *flags) {
	f.str(&a.File, "audit", "", "audit log: one JSON line per call on every door, refusals included, each line carrying the SHA-256 of the line before (gateway audit verify FILE checks the chain); a file to append to (mode 0600, one gateway a file; rotate it by renaming, never copytruncate), or - for the standard output; empty = off")
	f.bool(&a.Arguments, "audit-arguments", false, "write each call's arguments (their compact JSON text) to the audit log, not only their SHA-256")
	f.int(&a.Queue, "audit-queue", audit.DefaultQueue, "calls waiting to be written to the audit log; beyond them a call's line is dropped, never waited for: counted (toolgate_audit_dropped_total) and written into the log as a dropped line")
}
