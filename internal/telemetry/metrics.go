package telemetry

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/toolgate/toolgate/internal/toolcall"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
)

// UnknownTool is the tool label of calls that name a tool the known-tools
// function does not vouch for, so that callers cannot create series.
const UnknownTool = "unknown"

// DefaultDurationBuckets are the call latency histogram's upper bounds in
// seconds, from half a millisecond to a minute.
var DefaultDurationBuckets = []float64{
	0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
	0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
}

// BridgeStats are the bridge's counters, as WithBridgeStats reads them.
type BridgeStats struct {
	Pending       int64 // calls waiting for replies now
	Published     int64 // requests published
	PublishErrors int64 // requests the broker did not take
	Replies       int64 // reply chunks delivered to a waiting call
	OrphanReplies int64 // replies for no waiting call
	BadReplies    int64 // replies that could not be decoded
	// RefusedReplies: replies from where the call's are not expected,
	// replays, unnumbered ones from a numbering service.
	RefusedReplies int64
	// Resends: calls whose tool services were asked for their last
	// reply again, this gateway's consumer of it having been away.
	Resends int64
	// Receipts taken from tool services; Republished: requests published
	// again, nothing heard of them after an instance of their service
	// left or for the hedge delay; Hedged: those of them published again
	// for the hedge delay's silence alone.
	Receipts, Republished, Hedged int64
	// InstanceLost: calls ended UNAVAILABLE INSTANCE_LOST, the instance
	// that had taken them lost.
	InstanceLost int64
}

// OperationsStats are the durable operations' counters, as
// WithOperationsStats reads them.
type OperationsStats struct {
	Started int64 // operations started by this gateway
	// Done, Failed and Cancelled count the final states this gateway
	// recorded; Expired the operations it started whose deadline passed
	// with no reply.
	Done, Failed, Cancelled, Expired int64
	// CancelsSent counts the cancels this gateway sent to tool services.
	CancelsSent int64
	Running     int // running operations in this gateway's table
	Table       int // operations in this gateway's table, ended ones included
	// TableLag: how long the last record read took from its publish to
	// this gateway's table.
	TableLag time.Duration
	// RecordsRefused counts the messages refused on the operations'
	// state and chunk topics, by reason.
	RecordsRefused map[string]int64
}

// RegistryStats describe the tool registry, as WithRegistryStats reads them.
type RegistryStats struct {
	Version        int64 // the current snapshot's version
	Tools          int   // tools in the current snapshot
	ReloadFailures int64 // reloads that failed
	// Conflicts counts tool names and service ids defined by more than
	// one source.
	Conflicts int
	// Sources are the registry's sources, one per origin.
	Sources []RegistrySourceStats
}

// RegistrySourceStats describe one source of the registry.
type RegistrySourceStats struct {
	Source   string // its origin: file, config-service, announcement
	Up       bool   // it reaches what it reads
	Rejected int64  // updates refused as invalid
	Units    int    // units merged from it
}

// Metrics holds the gateway's Prometheus metrics in a registry of its own.
// It is safe for concurrent use.
type Metrics struct {
	reg      *prometheus.Registry
	calls    *prometheus.CounterVec
	duration *prometheus.HistogramVec
	inFlight *prometheus.GaugeVec
	// mcpDuration is mcp.server.operation.duration (GenAISemconvVersion)
	// as Prometheus names it: MCP requests by method, tool and error.
	mcpDuration *prometheus.HistogramVec
	known       func(tool string) bool
	// spans: calls have spans of their own (they are exported); else a
	// call has a span context only when it carried a traceparent.
	spans bool
	// series caches each (method, tool)'s children of the vectors above,
	// so a call costs one map lookup instead of three label hashes.
	series sync.Map // seriesKey → *callSeries
}

type seriesKey struct{ method, tool string }

// callSeries are one (method, tool)'s metrics. The per-code counters are
// created on first use, so that no code shows up before it happened.
type callSeries struct {
	inFlight prometheus.Gauge
	duration prometheus.Observer
	calls    [codes.Unauthenticated + 1]atomic.Pointer[prometheus.Counter]
}

func (m *Metrics) seriesFor(method, tool string) *callSeries {
	k := seriesKey{method, tool}
	if s, ok := m.series.Load(k); ok {
		return s.(*callSeries)
	}
	s, _ := m.series.LoadOrStore(k, &callSeries{
		inFlight: m.inFlight.WithLabelValues(method, tool),
		duration: m.duration.WithLabelValues(method, tool),
	})
	return s.(*callSeries)
}

func (m *Metrics) counter(s *callSeries, method, tool string, code codes.Code) prometheus.Counter {
	if int(code) >= len(s.calls) {
		return m.calls.WithLabelValues(method, tool, code.String())
	}
	if c := s.calls[code].Load(); c != nil {
		return *c
	}
	c := m.calls.WithLabelValues(method, tool, code.String())
	s.calls[code].Store(&c)
	return c
}

type metricsConfig struct {
	known    func(string) bool
	bridge   func() BridgeStats
	registry func() RegistryStats
	ops      func() OperationsStats
	buckets  []float64
	runtime  bool
	instance string
	broker   func() bool
	spans    bool
}

// MetricsOption configures NewMetrics.
type MetricsOption func(*metricsConfig)

// WithKnownTools says which tool names may become label values: calls that
// name another tool are counted under tool="unknown". It is called on
// every call, so it must be fast and safe for concurrent use (a lookup in
// the current registry snapshot). Without it every named tool is counted
// as "unknown".
func WithKnownTools(known func(tool string) bool) MetricsOption {
	return func(c *metricsConfig) { c.known = known }
}

// WithBridgeStats exports the bridge's counters, read from f at each scrape.
func WithBridgeStats(f func() BridgeStats) MetricsOption {
	return func(c *metricsConfig) { c.bridge = f }
}

// WithRegistryStats exports the registry's version, size, reload
// failures, conflicts and the state of its sources, read from f at each
// scrape.
func WithRegistryStats(f func() RegistryStats) MetricsOption {
	return func(c *metricsConfig) { c.registry = f }
}

// WithOperationsStats exports the durable operations' counters, read
// from f at each scrape (--operations).
func WithOperationsStats(f func() OperationsStats) MetricsOption {
	return func(c *metricsConfig) { c.ops = f }
}

// WithBrokerConnected exports toolgate_broker_connected: 1 while
// connected() says the broker takes this gateway's messages, else 0 (read
// at each scrape).
func WithBrokerConnected(connected func() bool) MetricsOption {
	return func(c *metricsConfig) { c.broker = connected }
}

// WithInstance exports toolgate_instance_info{instance=id} 1, which names
// the gateway replica the metrics come from (join on it to label others).
func WithInstance(id string) MetricsOption {
	return func(c *metricsConfig) { c.instance = id }
}

// WithSpans says that every call has a span (they are exported), whose
// trace the call's duration is an exemplar of. Without it only a call that
// carried a trace context (traceparent) is looked at for one.
func WithSpans() MetricsOption {
	return func(c *metricsConfig) { c.spans = true }
}

// WithoutRuntimeMetrics leaves out the Go runtime and process collectors
// (for tests that compare whole expositions).
func WithoutRuntimeMetrics() MetricsOption {
	return func(c *metricsConfig) { c.runtime = false }
}

// NewMetrics returns the gateway's metrics, registered in a new registry
// together with the Go runtime and process collectors.
func NewMetrics(opts ...MetricsOption) *Metrics {
	c := metricsConfig{buckets: DefaultDurationBuckets, runtime: true}
	for _, o := range opts {
		o(&c)
	}
	m := &Metrics{
		reg:   prometheus.NewRegistry(),
		known: c.known,
		spans: c.spans,
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolgate_calls_total",
			Help: "gRPC calls (REST calls included) finished, by method, tool and gRPC code.",
		}, []string{"method", "tool", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "toolgate_call_duration_seconds",
			Help:    "Time from a call's start to its end (the last chunk for streams), by method and tool.",
			Buckets: c.buckets,
		}, []string{"method", "tool"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "toolgate_calls_in_flight",
			Help: "Calls being served now, by method and tool (a stream's tool is known from its first message).",
		}, []string{"method", "tool"}),
	}
	m.mcpDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "mcp_server_operation_duration_seconds",
		Help: "OpenTelemetry's mcp.server.operation.duration (semantic conventions " + GenAISemconvVersion +
			"): MCP requests served, by mcp.method.name, gen_ai.tool.name, gen_ai.operation.name and error.type.",
		Buckets: c.buckets,
	}, []string{"mcp_method_name", "gen_ai_tool_name", "gen_ai_operation_name", "error_type"})
	m.reg.MustRegister(m.calls, m.duration, m.inFlight, m.mcpDuration)
	if c.bridge != nil {
		m.reg.MustRegister(newBridgeCollector(c.bridge))
	}
	if c.registry != nil {
		m.reg.MustRegister(newRegistryCollector(c.registry))
	}
	if c.ops != nil {
		m.reg.MustRegister(newOperationsCollector(c.ops))
	}
	if c.broker != nil {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "toolgate_broker_connected",
			Help: "1 while the broker takes this gateway's messages (its response topics subscribed, the last probe answered), else 0.",
		}, func() float64 {
			if c.broker() {
				return 1
			}
			return 0
		}))
	}
	if c.instance != "" {
		info := prometheus.NewGauge(prometheus.GaugeOpts{
			Name:        "toolgate_instance_info",
			Help:        "Always 1; its instance label names this gateway replica (--instance-id).",
			ConstLabels: prometheus.Labels{"instance": c.instance},
		})
		info.Set(1)
		m.reg.MustRegister(info)
	}
	if c.runtime {
		m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	return m
}

// Registry is the registry the metrics live in, to add more or gather them.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics in the Prometheus text format, or OpenMetrics
// (with trace exemplars) when the scraper asks for it.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg, EnableOpenMetrics: true})
}

// toolLabel bounds the tool label's values to the known tools.
func (m *Metrics) toolLabel(name string) string {
	switch {
	case name == "":
		return ""
	case m.known != nil && m.known(name):
		return name
	default:
		return UnknownTool
	}
}

func (m *Metrics) observeSeries(ctx context.Context, c *toolcall.Call, s *callSeries, method, tool string, code codes.Code, d time.Duration) {
	m.counter(s, method, tool, code).Inc()
	h := s.duration
	if !m.spans && len(c.Header.Values(traceparentKey)) == 0 {
		h.Observe(d.Seconds()) // no trace to be an exemplar of
		return
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsSampled() {
		if eo, ok := h.(prometheus.ExemplarObserver); ok {
			eo.ObserveWithExemplar(d.Seconds(), prometheus.Labels{"trace_id": sc.TraceID().String()})
			return
		}
	}
	h.Observe(d.Seconds())
}

// Middleware counts calls, times them and tracks those in flight. Run it
// before authentication so refused calls count too.
func (m *Metrics) Middleware() toolcall.Middleware {
	return func(next toolcall.Handler) toolcall.Handler {
		return func(ctx context.Context, c *toolcall.Call, emit toolcall.Emit) (res toolcall.Result, err error) {
			name := c.Name
			method, tool := c.MethodName(), m.toolLabel(name)
			switch c.Op {
			case toolcall.OpGetService, toolcall.OpGetOperation, toolcall.OpCancelOperation,
				toolcall.OpDeleteOperation, toolcall.OpWaitOperation, toolcall.OpStreamOperation:
				tool = "" // Name is a service or operation id
			}
			s := m.seriesFor(method, tool)
			s.inFlight.Inc()
			start := time.Now()
			defer func() {
				d := time.Since(start)
				s.inFlight.Dec()
				if tool != "" && runsTool(c.Op) && c.Name != "" && c.Name != name {
					// In a tool set the call named the tool as the set
					// shows it; it is counted under the registry's name.
					if resolved := m.toolLabel(c.Name); resolved != tool {
						tool, s = resolved, m.seriesFor(method, resolved)
					}
				}
				m.observeSeries(ctx, c, s, method, tool, codeOf(err), d)
				if mm, ok := mcpMethod(c); ok {
					m.observeMCP(c, mm.Value.AsString(), codeOf(err), d)
				}
			}()
			return next(ctx, c, emit)
		}
	}
}

// observeMCP records an MCP request in mcp_server_operation_duration_seconds.
func (m *Metrics) observeMCP(c *toolcall.Call, method string, code codes.Code, d time.Duration) {
	tool, op, errType := "", "", ""
	if runsTool(c.Op) {
		tool, op = m.toolLabel(c.Name), "execute_tool"
	}
	if code != codes.OK {
		errType = code.String()
	}
	m.mcpDuration.WithLabelValues(method, tool, op, errType).Observe(d.Seconds())
}

// funcCollector exports values read from a function once per scrape.
type funcCollector struct {
	descs   []*prometheus.Desc
	collect func(ch chan<- prometheus.Metric)
}

func (c *funcCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *funcCollector) Collect(ch chan<- prometheus.Metric) { c.collect(ch) }

func newBridgeCollector(f func() BridgeStats) prometheus.Collector {
	pending := prometheus.NewDesc("toolgate_bridge_pending", "Calls waiting for replies from tool services.", nil, nil)
	published := prometheus.NewDesc("toolgate_bridge_published_total", "Requests published to tool services.", nil, nil)
	pubErrs := prometheus.NewDesc("toolgate_bridge_publish_errors_total", "Requests the broker did not take.", nil, nil)
	replies := prometheus.NewDesc("toolgate_bridge_replies_total", "Reply chunks delivered to a waiting call.", nil, nil)
	orphans := prometheus.NewDesc("toolgate_bridge_orphan_replies_total", "Replies for no waiting call (late, cancelled, or another instance's).", nil, nil)
	bad := prometheus.NewDesc("toolgate_bridge_bad_replies_total", "Replies that could not be decoded.", nil, nil)
	refused := prometheus.NewDesc("toolgate_bridge_refused_replies_total",
		"Replies refused for a waiting call: from a topic where its replies are not expected, a replayed sequence number, or none from a service that numbers its replies.", nil, nil)
	resends := prometheus.NewDesc("toolgate_bridge_resends_total",
		"Calls whose tool services were asked for their last reply again: this gateway's consumer of the topic it went to had connected again (the topic moved to another broker).", nil, nil)
	receipts := prometheus.NewDesc("toolgate_bridge_receipts_total",
		"Receipts taken from tool services for calls not answered within 250 ms (toolgate-receipt).", nil, nil)
	republished := prometheus.NewDesc("toolgate_bridge_republished_total",
		"Requests published again: nothing was heard of them after an instance of their service withdrew (a stopping replica may have dropped them), or for the hedge delay (toolgate_bridge_hedged_total).", nil, nil)
	hedged := prometheus.NewDesc("toolgate_bridge_hedged_total",
		"Requests published again because no instance of their service said a word of them within the hedge delay (--hedge-after, or the service's p99 plus a quarter).", nil, nil)
	lost := prometheus.NewDesc("toolgate_bridge_instance_lost_total",
		"Calls ended UNAVAILABLE INSTANCE_LOST: the instance that had taken them was lost (its lease ran out, or it left the broker).", nil, nil)
	return &funcCollector{
		descs: []*prometheus.Desc{pending, published, pubErrs, replies, orphans, bad, refused, resends, receipts, republished, hedged, lost},
		collect: func(ch chan<- prometheus.Metric) {
			s := f()
			ch <- prometheus.MustNewConstMetric(pending, prometheus.GaugeValue, float64(s.Pending))
			ch <- prometheus.MustNewConstMetric(published, prometheus.CounterValue, float64(s.Published))
			ch <- prometheus.MustNewConstMetric(pubErrs, prometheus.CounterValue, float64(s.PublishErrors))
			ch <- prometheus.MustNewConstMetric(replies, prometheus.CounterValue, float64(s.Replies))
			ch <- prometheus.MustNewConstMetric(orphans, prometheus.CounterValue, float64(s.OrphanReplies))
			ch <- prometheus.MustNewConstMetric(bad, prometheus.CounterValue, float64(s.BadReplies))
			ch <- prometheus.MustNewConstMetric(refused, prometheus.CounterValue, float64(s.RefusedReplies))
			ch <- prometheus.MustNewConstMetric(resends, prometheus.CounterValue, float64(s.Resends))
			ch <- prometheus.MustNewConstMetric(receipts, prometheus.CounterValue, float64(s.Receipts))
			ch <- prometheus.MustNewConstMetric(republished, prometheus.CounterValue, float64(s.Republished))
			ch <- prometheus.MustNewConstMetric(hedged, prometheus.CounterValue, float64(s.Hedged))
			ch <- prometheus.MustNewConstMetric(lost, prometheus.CounterValue, float64(s.InstanceLost))
		},
	}
}

func newRegistryCollector(f func() RegistryStats) prometheus.Collector {
	version := prometheus.NewDesc("toolgate_registry_version", "Version of the registry snapshot in use (counts loads from 1).", nil, nil)
	tools := prometheus.NewDesc("toolgate_registry_tools", "Tools in the registry snapshot in use.", nil, nil)
	failures := prometheus.NewDesc("toolgate_registry_reload_failures_total", "Registry reloads that failed (the previous snapshot stayed in use).", nil, nil)
	conflicts := prometheus.NewDesc("toolgate_registry_conflicts",
		"Tool names and service ids defined by more than one registry source (the higher-precedence one is served).", nil, nil)
	rejected := prometheus.NewDesc("toolgate_registry_rejected_total",
		"Registry updates refused as invalid, by source (for the config service: invalid descriptors); what was there stayed.", []string{"source"}, nil)
	up := prometheus.NewDesc("toolgate_registry_source_up",
		"1 when a registry source reaches what it reads, by source.", []string{"source"}, nil)
	units := prometheus.NewDesc("toolgate_registry_source_units",
		"Units merged from each registry source (announcing services, for announcements).", []string{"source"}, nil)
	return &funcCollector{
		descs: []*prometheus.Desc{version, tools, failures, conflicts, rejected, up, units},
		collect: func(ch chan<- prometheus.Metric) {
			s := f()
			ch <- prometheus.MustNewConstMetric(version, prometheus.GaugeValue, float64(s.Version))
			ch <- prometheus.MustNewConstMetric(tools, prometheus.GaugeValue, float64(s.Tools))
			ch <- prometheus.MustNewConstMetric(failures, prometheus.CounterValue, float64(s.ReloadFailures))
			ch <- prometheus.MustNewConstMetric(conflicts, prometheus.GaugeValue, float64(s.Conflicts))
			for _, src := range s.Sources {
				isUp := 0.0
				if src.Up {
					isUp = 1
				}
				ch <- prometheus.MustNewConstMetric(rejected, prometheus.CounterValue, float64(src.Rejected), src.Source)
				ch <- prometheus.MustNewConstMetric(up, prometheus.GaugeValue, isUp, src.Source)
				ch <- prometheus.MustNewConstMetric(units, prometheus.GaugeValue, float64(src.Units), src.Source)
			}
		},
	}
}

func newOperationsCollector(f func() OperationsStats) prometheus.Collector {
	started := prometheus.NewDesc("toolgate_operations_started_total", "Durable operations started by this gateway.", nil, nil)
	ended := prometheus.NewDesc("toolgate_operations_ended_total",
		"Durable operations ended, by final state: done, failed and cancelled as this gateway recorded them, expired (the deadline passed with no reply) for those it started.",
		[]string{"state"}, nil)
	cancels := prometheus.NewDesc("toolgate_operations_cancels_sent_total", "Cancels of durable operations this gateway sent to tool services (on their cancel topics).", nil, nil)
	running := prometheus.NewDesc("toolgate_operations_running", "Running durable operations in this gateway's copy of the state table.", nil, nil)
	table := prometheus.NewDesc("toolgate_operations_table", "Durable operations in this gateway's copy of the state table, ended ones kept for their TTL included.", nil, nil)
	lag := prometheus.NewDesc("toolgate_operations_table_lag_seconds",
		"How long the last record read from the state table took from its writer's publish to this gateway's copy (by the writer's clock).", nil, nil)
	refused := prometheus.NewDesc("toolgate_operations_records_refused_total",
		"Messages read from the durable operations' state and chunk topics and refused, by reason: unsigned or bad_signature (not signed with the deployment's key), malformed, topic_not_allowed (names a request topic outside the announcements' allow-list).",
		[]string{"reason"}, nil)
	return &funcCollector{
		descs: []*prometheus.Desc{started, ended, cancels, running, table, lag, refused},
		collect: func(ch chan<- prometheus.Metric) {
			s := f()
			ch <- prometheus.MustNewConstMetric(started, prometheus.CounterValue, float64(s.Started))
			ch <- prometheus.MustNewConstMetric(ended, prometheus.CounterValue, float64(s.Done), "done")
			ch <- prometheus.MustNewConstMetric(ended, prometheus.CounterValue, float64(s.Failed), "failed")
			ch <- prometheus.MustNewConstMetric(ended, prometheus.CounterValue, float64(s.Cancelled), "cancelled")
			ch <- prometheus.MustNewConstMetric(ended, prometheus.CounterValue, float64(s.Expired), "expired")
			ch <- prometheus.MustNewConstMetric(cancels, prometheus.CounterValue, float64(s.CancelsSent))
			ch <- prometheus.MustNewConstMetric(running, prometheus.GaugeValue, float64(s.Running))
			ch <- prometheus.MustNewConstMetric(table, prometheus.GaugeValue, float64(s.Table))
			ch <- prometheus.MustNewConstMetric(lag, prometheus.GaugeValue, s.TableLag.Seconds())
			for _, reason := range slices.Sorted(maps.Keys(s.RecordsRefused)) {
				ch <- prometheus.MustNewConstMetric(refused, prometheus.CounterValue, float64(s.RecordsRefused[reason]), reason)
			}
		},
	}
}
