package quota

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/toolgate/toolgate/internal/randid"
	"github.com/toolgate/toolgate/internal/ratelog"
	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Reasons of the ErrorInfo (domain toolcall.ErrorDomain) of refused calls.
const (
	// ReasonQuotaExceeded: a rule's bound was reached (RESOURCE_EXHAUSTED).
	ReasonQuotaExceeded = "QUOTA_EXCEEDED"
	// ReasonQuotaUnavailable: the store could not be asked and the
	// gateway fails closed (UNAVAILABLE).
	ReasonQuotaUnavailable = "QUOTA_UNAVAILABLE"
)

// Defaults of the Enforcer.
const (
	// DefaultMaxHold is the longest a call holds its slots: a little more
	// than the longest call. Past it its lease is renewed no more.
	DefaultMaxHold = 10*time.Minute + 30*time.Second
	// retrySlots is the retry hint of a call refused for its calls at
	// once, whose end nobody can tell.
	retrySlots = time.Second
	// retryUnavailable is the retry hint of a call refused because the
	// store could not be asked.
	retryUnavailable = time.Second
	// keyPrefix starts the key of every count.
	keyPrefix = "toolgate:quota:"
	// warnEvery spaces the warnings about an unreachable store: each
	// message at most once in it, then a line with the count of those
	// left out.
	warnEvery = 10 * time.Second
)

// Enforcer applies Rules with the counts in a Store.
type Enforcer struct {
	rules      *Rules
	store      Store
	failClosed bool
	log        *slog.Logger
	warnLog    *slog.Logger // log, rate-limited
	leases     leases

	refused     *prometheus.CounterVec
	storeErrors prometheus.Counter
	failedOpen  prometheus.Counter
	pending     prometheus.GaugeFunc
}

// Option configures an Enforcer.
type Option func(*Enforcer)

// WithFailClosed refuses calls a rule applies to while the store cannot
// be asked (UNAVAILABLE, reason QUOTA_UNAVAILABLE, with a RetryInfo); by
// default they are let through uncounted (fail open).
func WithFailClosed(closed bool) Option { return func(e *Enforcer) { e.failClosed = closed } }

// WithLease sets the longest a call holds its slots (default
// DefaultMaxHold): more than the longest call. A call running longer has
// its lease renewed no more, and its slots lapse within a slot lease.
func WithLease(d time.Duration) Option { return func(e *Enforcer) { e.leases.maxHold = d } }

// WithSlotLease sets how long a slot is held past its take or its last
// renewal (default DefaultSlotLease); a running call renews its slots
// every d/3. A slot nobody releases or renews lapses within d.
func WithSlotLease(d time.Duration) Option { return func(e *Enforcer) { e.leases.lease = d } }

// WithLogger logs refusals at debug level and an unreachable store as a
// warning (default: discard).
func WithLogger(log *slog.Logger) Option { return func(e *Enforcer) { e.log = log } }

// NewEnforcer returns an Enforcer of rules over store.
func NewEnforcer(rules *Rules, store Store, opts ...Option) *Enforcer {
	e := &Enforcer{rules: rules, store: store, log: slog.New(slog.DiscardHandler),
		leases: leases{store: store, lease: DefaultSlotLease, maxHold: DefaultMaxHold},
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolgate_quota_refused_total",
			Help: "Calls refused by a quota rule, by rule and bound (calls or concurrent).",
		}, []string{"rule", "bound"}),
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "toolgate_quota_store_errors_total",
			Help: "Exchanges with the quota store that failed: calls whose quotas could not be checked, calls whose slots were not released at once, renewals of running calls' slots.",
		}),
		failedOpen: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "toolgate_quota_failed_open_total",
			Help: "Calls let through unchecked while the quota store did not answer (fail open).",
		}),
	}
	for _, o := range opts {
		o(e)
	}
	if e.leases.lease <= 0 {
		e.leases.lease = DefaultSlotLease
	}
	if e.leases.maxHold <= 0 {
		e.leases.maxHold = DefaultMaxHold
	}
	e.warnLog = ratelog.New(e.log, warnEvery)
	e.leases.log, e.leases.failed = e.warnLog, e.storeErrors.Inc
	e.pending = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "toolgate_quota_releases_pending",
		Help: "Releases of calls' slots the quota store has not taken yet, retried until it does.",
	}, func() float64 { return float64(e.leases.Pending()) })
	return e
}

// Collectors are the Enforcer's metrics, for the gateway's registry.
func (e *Enforcer) Collectors() []prometheus.Collector {
	return []prometheus.Collector{e.refused, e.storeErrors, e.failedOpen, e.pending}
}

// counted are the ops a quota counts: those that run a tool.
func counted(op toolcall.Op) bool {
	return op == toolcall.OpInvoke || op == toolcall.OpStream || op == toolcall.OpStartTool
}

// Middleware checks every call that runs a tool against the rules that
// apply to it. Run it after authentication: rules name callers.
func (e *Enforcer) Middleware() toolcall.Middleware {
	return func(next toolcall.Handler) toolcall.Handler {
		if e.rules.Len() == 0 {
			return next
		}
		return func(ctx context.Context, c *toolcall.Call, emit toolcall.Emit) (toolcall.Result, error) {
			if !counted(c.Op) || !c.Authenticated {
				return next(ctx, c, emit)
			}
			rules := e.rules.matching(c.Caller, c.Name)
			if len(rules) == 0 {
				return next(ctx, c, emit)
			}
			t, held, bounds := e.take(c.Caller.Key(), rules)
			d, err := e.store.Take(ctx, t)
			if err != nil {
				if len(held.Keys) > 0 {
					// The take may have run, or may yet: give back what it took.
					e.leases.retry(held)
				}
				return e.unavailable(ctx, c, err, next, emit)
			}
			if !d.OK {
				b := bounds[d.Refused]
				e.refused.WithLabelValues(b.rule.Name, b.kind).Inc()
				e.log.DebugContext(ctx, "call refused: quota", "rpc", c.MethodName(), "tool", c.Name, "rule", b.rule.Name,
					"bound", b.kind, "retry_after", d.RetryAfter)
				return toolcall.Result{}, exceeded(c.Caller.Key(), b, d.RetryAfter)
			}
			if len(held.Keys) > 0 {
				e.leases.hold(held)
				defer e.leases.end(ctx, held)
			}
			return next(ctx, c, emit)
		}
	}
}

// bound is one bound of a Take: a rule's calls a window or calls at once.
type bound struct {
	rule *rule
	kind string // "calls" or "concurrent"
}

// take is what a call of the caller asks of the store under rules, the
// slots it would hold, and the bound each index of the answer stands for.
func (e *Enforcer) take(caller string, rules []*rule) (Take, Held, []bound) {
	var t Take
	var h Held
	var bounds, slots []bound
	for _, r := range rules {
		base := keyPrefix + r.Name + ":" + caller
		if r.Calls > 0 {
			t.Counters = append(t.Counters, Counter{Key: base + ":calls", Limit: r.Calls, Window: r.window})
			bounds = append(bounds, bound{r, "calls"})
		}
		if r.Concurrent > 0 {
			t.Slots = append(t.Slots, Slots{Key: base + ":concurrent", Limit: r.Concurrent})
			h.Keys = append(h.Keys, base+":concurrent")
			slots = append(slots, bound{r, "concurrent"})
		}
	}
	if len(t.Slots) > 0 {
		t.Lease, t.LeaseFor = randid.New(), min(e.leases.lease, e.leases.maxHold)
		h.Lease = t.Lease
	}
	return t, h, append(bounds, slots...)
}

// unavailable serves a call whose quotas could not be checked: through
// (fail open) or refused (fail closed).
func (e *Enforcer) unavailable(ctx context.Context, c *toolcall.Call, err error, next toolcall.Handler, emit toolcall.Emit) (toolcall.Result, error) {
	e.storeErrors.Inc()
	if e.failClosed {
		e.warnLog.WarnContext(ctx, "quota store unreachable: refusing calls under quota (fail closed)", "err", err)
		return toolcall.Result{}, unavailableStatus()
	}
	e.failedOpen.Inc()
	e.warnLog.WarnContext(ctx, "quota store unreachable: letting calls through unchecked (fail open)", "err", err)
	return next(ctx, c, emit)
}

// exceeded is the status of a call over a quota: RESOURCE_EXHAUSTED with
// a RetryInfo, an ErrorInfo naming the rule and a QuotaFailure.
func exceeded(caller string, b bound, wait time.Duration) error {
	md := map[string]string{"rule": b.rule.Name, "bound": b.kind}
	var msg, desc string
	if b.kind == "calls" {
		md["calls"], md["per"] = strconv.Itoa(b.rule.Calls), b.rule.Per
		desc = fmt.Sprintf("%d calls a %s", b.rule.Calls, b.rule.Per)
	} else {
		md["concurrent"] = strconv.Itoa(b.rule.Concurrent)
		desc = fmt.Sprintf("%d calls at once", b.rule.Concurrent)
		wait = retrySlots
	}
	if wait <= 0 {
		wait = time.Millisecond
	}
	msg = fmt.Sprintf("quota %q exceeded (%s): retry in %s", b.rule.Name, desc, roundUp(wait, time.Millisecond))
	st := status.New(codes.ResourceExhausted, msg)
	ds, err := st.WithDetails(
		&errdetails.RetryInfo{RetryDelay: durationpb.New(wait)},
		&errdetails.ErrorInfo{Reason: ReasonQuotaExceeded, Domain: toolcall.ErrorDomain, Metadata: md},
		&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{Subject: caller, Description: "quota " + b.rule.Name + ": " + desc}}},
	)
	if err != nil {
		return st.Err()
	}
	return ds.Err()
}

// unavailableStatus is the status of a call refused because its quotas
// could not be checked.
func unavailableStatus() error {
	st := status.New(codes.Unavailable, "quotas cannot be checked now: retry shortly")
	ds, err := st.WithDetails(
		&errdetails.RetryInfo{RetryDelay: durationpb.New(retryUnavailable)},
		&errdetails.ErrorInfo{Reason: ReasonQuotaUnavailable, Domain: toolcall.ErrorDomain},
	)
	if err != nil {
		return st.Err()
	}
	return ds.Err()
}

func roundUp(d, unit time.Duration) time.Duration {
	if r := d % unit; r != 0 {
		return d + unit - r
	}
	return d
}
