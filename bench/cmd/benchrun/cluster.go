package main

// The scale point on a two-broker Pulsar cluster (scripts/pulsar-cluster.sh:
// one ZooKeeper, one bookie and two brokers on this machine). Two gateway
// replicas, each given both brokers in its service URL, and two echo
// services sharing one topic take the closed loop of the scale points,
// split evenly over the replicas, in two layouts of the topics:
//
//	one-broker  every namespace the calls use on broker 1
//	spread      tg/request (and tg/config) on broker 1, tg/response (the
//	            service's response topic and the replicas' reply topics)
//	            on broker 2
//
// A namespace has one bundle in this cluster and bundles move only when
// unloaded (the script turns load shedding off), so a layout is made by
// unloading each namespace's bundle to the broker chosen, and checked by
// looking its topics up before and after the window. Each window gets
// fresh replicas and services. The result is the cluster field of
// scale.json and a section of scale.md.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/toolgate/toolgate/toolservice"
	"github.com/toolgate/toolgate/wire"
)

// ClusterOwner is the broker (1 or 2) that owns a topic a call uses.
type ClusterOwner struct {
	Role   string `json:"role"` // request, response, reply, announcements
	Topic  string `json:"topic"`
	Broker int    `json:"broker"`
}

// ClusterPoint is one window in one layout.
type ClusterPoint struct {
	Round  int    `json:"round"`
	Layout string `json:"layout"`
	// Owners are the topics' brokers, looked up before the window (and
	// found the same after it).
	Owners []ClusterOwner `json:"owners,omitempty"`
	Calls  int64          `json:"calls"`
	Errors int64          `json:"errors"`
	RPS    float64        `json:"rps"`
	P50Ms  float64        `json:"p50_ms"`
	P99Ms  float64        `json:"p99_ms"`
	// GatewayCPUMsPerCall is both replicas' CPU time over the window per
	// call; BrokerCPUMsPerCall each broker's ([0] broker 1, [1] broker 2).
	GatewayCPUMsPerCall float64    `json:"gateway_cpu_ms_per_call"`
	BrokerCPUMsPerCall  [2]float64 `json:"broker_cpu_ms_per_call"`
	Failed              string     `json:"failed,omitempty"`
}

// ClusterReport is the cluster field of scale.json.
type ClusterReport struct {
	Date        string         `json:"date"`
	ServiceURL  string         `json:"service_url"`
	Replicas    int            `json:"replicas"`
	Services    int            `json:"services"`
	Concurrency int            `json:"concurrency"`
	ReplyTo     bool           `json:"reply_to"`
	MsgSize     int            `json:"msg_size"`
	WarmupS     float64        `json:"warmup_s"`
	DurationS   float64        `json:"duration_s"`
	Points      []ClusterPoint `json:"points"`
	// Failed: the cluster could not be started or measured at all.
	Failed string `json:"failed,omitempty"`
}

// clusterLayout places namespaces on brokers (0 = broker 1).
type clusterLayout struct {
	name  string
	place []nsPlace
}

type nsPlace struct {
	ns     string
	broker int
}

var clusterLayouts = []clusterLayout{
	{"one-broker", []nsPlace{{"tg/request", 0}, {"tg/response", 0}, {"tg/config", 0}}},
	{"spread", []nsPlace{{"tg/request", 0}, {"tg/response", 1}, {"tg/config", 0}}},
}

// clusterRun starts the cluster, measures each layout once per round
// (the order of the layouts rotating between rounds) and stops the
// cluster again, whatever happens; on ctx's end too.
func (e *env) clusterRun(ctx context.Context) *ClusterReport {
	rep := &ClusterReport{Date: time.Now().UTC().Format(time.RFC3339), Replicas: 2, Services: 2,
		Concurrency: scaleConcurrency, ReplyTo: true, MsgSize: e.cfg.MsgSize, WarmupS: 2, DurationS: e.cfg.DurationS}
	rounds := 2
	if e.cfg.Quick {
		rep.DurationS, rounds = 3, 1
	}
	fail := func(err error) *ClusterReport {
		e.failures++
		rep.Failed = err.Error()
		logf("cluster: %v", err)
		return rep
	}
	key, err := os.ReadFile(e.keyFile)
	if err != nil {
		return fail(err)
	}
	c, err := newCluster(e.repo)
	if err != nil {
		return fail(err)
	}
	rep.ServiceURL = c.ServiceURL(0)
	keepLogs := true
	defer func() { c.stop(keepLogs && ctx.Err() == nil) }() // nothing to look into after an interrupt
	if err := c.start(ctx); err != nil {
		return fail(err)
	}
	var pids [2]int
	for i := range pids {
		if pids[i], err = c.pid(i); err != nil {
			return fail(err)
		}
	}
	failed := 0
	for r := range rounds {
		for _, l := range rotate(clusterLayouts, r) {
			p := e.clusterPoint(ctx, c, pids, l, strings.TrimSpace(string(key)), rep.WarmupS, rep.DurationS)
			p.Round = r + 1
			rep.Points = append(rep.Points, p)
			if p.Failed != "" {
				failed++
				e.failures++
				logf("cluster round %d %s: %s", p.Round, p.Layout, p.Failed)
			} else {
				logf("cluster round %d %-10s %s  rps %7.1f  p50 %.2f p99 %.2f ms  gateways %.3f, broker1 %.3f, broker2 %.3f CPU-ms/call  errors %d",
					p.Round, p.Layout, ownersText(p.Owners), p.RPS, p.P50Ms, p.P99Ms, p.GatewayCPUMsPerCall, p.BrokerCPUMsPerCall[0], p.BrokerCPUMsPerCall[1], p.Errors)
			}
			if ctx.Err() != nil {
				return rep
			}
		}
	}
	keepLogs = failed > 0
	return rep
}

func (e *env) clusterPoint(ctx context.Context, c *pulsarCluster, brokerPIDs [2]int, l clusterLayout, key string, warmupS, durS float64) ClusterPoint {
	p := ClusterPoint{Layout: l.name}
	topicOf := map[string]string{
		"tg/request":  wire.RequestTopic(e.topicGW),
		"tg/response": wire.ResponseTopic(e.topicGW),
		"tg/config":   toolservice.DefaultAnnounceTopic,
	}
	want := map[string]int{} // namespace → broker (0 or 1)
	for _, pl := range l.place {
		want[pl.ns] = pl.broker
		if err := c.Place(ctx, pl.ns, topicOf[pl.ns], pl.broker); err != nil {
			p.Failed = err.Error()
			return p
		}
	}
	var procs []*child
	defer func() {
		for _, pc := range procs {
			pc.stop(15 * time.Second)
		}
	}()
	// Each process gets both brokers, a different one first (the client
	// looks topics up at the first that answers).
	for i := range 2 {
		s, err := e.startEchoOn(fmt.Sprintf("cluster-echo-%d", i), c.ServiceURL(i), e.topicGW)
		if err != nil {
			p.Failed = err.Error()
			return p
		}
		procs = append(procs, s)
	}
	var gws []*child
	owners := []ClusterOwner{
		{Role: "request", Topic: topicOf["tg/request"]},
		{Role: "response", Topic: topicOf["tg/response"]},
	}
	for i := range 2 {
		id := fmt.Sprintf("bench-cl-%s-%d", randHex(3), i)
		g, err := e.startReplica(ctx, c.ServiceURL(i), id, true)
		if err != nil {
			p.Failed = err.Error()
			return p
		}
		procs, gws = append(procs, g), append(gws, g)
		owners = append(owners, ClusterOwner{Role: "reply", Topic: wire.ReplyTopic(id)})
	}
	owners = append(owners, ClusterOwner{Role: "announcements", Topic: topicOf["tg/config"]})
	for i := range owners {
		o, err := c.Owner(owners[i].Topic)
		if err != nil {
			p.Failed = err.Error()
			return p
		}
		owners[i].Broker = o + 1
	}
	p.Owners = owners
	for _, o := range owners {
		if w := want[namespaceOf(o.Topic)]; o.Broker != w+1 {
			p.Failed = fmt.Sprintf("%s is owned by broker%d, want broker%d", o.Topic, o.Broker, w+1)
			return p
		}
	}
	clients, closeClients, err := grpcClients(gws)
	if err != nil {
		p.Failed = err.Error()
		return p
	}
	defer closeClients()
	var gw0, gw1 float64
	var b0, b1 [2]float64
	var errs []error
	snap := func(gw *float64, b *[2]float64) {
		var err error
		*gw, err = cpuOf(gws)
		errs = append(errs, err)
		for i, pid := range brokerPIDs {
			b[i], err = pidCPU(pid)
			errs = append(errs, err)
		}
	}
	w, err := e.closedLoop(ctx, clients, key, warmupS, durS, func(start bool) {
		if start {
			snap(&gw0, &b0)
		} else {
			snap(&gw1, &b1)
		}
	})
	if err := errors.Join(append(errs, err)...); err != nil {
		p.Failed = err.Error()
		return p
	}
	for _, o := range owners {
		if now, err := c.Owner(o.Topic); err != nil || now+1 != o.Broker {
			p.Failed = fmt.Sprintf("the owner of %s changed during the window: broker%d, then broker%d (%v)", o.Topic, o.Broker, now+1, err)
			return p
		}
	}
	p.Calls, p.Errors = w.calls, w.errors
	if p.Calls == 0 {
		p.Failed = fmt.Sprintf("no call completed (%d errors)", p.Errors)
		return p
	}
	n := float64(p.Calls)
	p.RPS = round(n/w.elapsed.Seconds(), 1)
	p.P50Ms, p.P99Ms = percentileMs(w.latencies, 0.50), percentileMs(w.latencies, 0.99)
	p.GatewayCPUMsPerCall = round((gw1-gw0)*1000/n, 4)
	for i := range b0 {
		p.BrokerCPUMsPerCall[i] = round((b1[i]-b0[i])*1000/n, 4)
	}
	return p
}

// namespaceOf is "tenant/namespace" of a full topic name.
func namespaceOf(topic string) string {
	_, rest, _ := strings.Cut(topic, "://")
	parts := strings.SplitN(rest, "/", 3)
	if len(parts) < 2 {
		return ""
	}
	return parts[0] + "/" + parts[1]
}

// percentileMs is the q-quantile of ds (nearest rank) in milliseconds,
// rounded to 0.01; 0 for none.
func percentileMs(ds []time.Duration, q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := min(max(int(math.Ceil(q*float64(len(s))))-1, 0), len(s)-1)
	return round(float64(s[i])/float64(time.Millisecond), 2)
}

// ownersText says which broker owns which topics, e.g.
// "b1: request, announcements; b2: response, reply ×2".
func ownersText(owners []ClusterOwner) string {
	var parts []string
	for b := 1; b <= 2; b++ {
		var roles []string
		count := map[string]int{}
		for _, o := range owners {
			if o.Broker != b {
				continue
			}
			if count[o.Role] == 0 {
				roles = append(roles, o.Role)
			}
			count[o.Role]++
		}
		if len(roles) == 0 {
			continue
		}
		for i, r := range roles {
			if count[r] > 1 {
				roles[i] = fmt.Sprintf("%s ×%d", r, count[r])
			}
		}
		parts = append(parts, fmt.Sprintf("b%d: %s", b, strings.Join(roles, ", ")))
	}
	return strings.Join(parts, "; ")
}

// clusterMeans are a layout's figures over its windows: calls/s and
// percentiles averaged, CPU per call over all its calls.
type clusterMeans struct {
	windows                   int
	rps, p50, p99, gw, b1, b2 float64
	errors                    int64
}

func (r *ClusterReport) means(layout string) clusterMeans {
	var m clusterMeans
	var calls float64
	for _, p := range r.Points {
		if p.Layout != layout || p.Failed != "" {
			continue
		}
		n := float64(p.Calls)
		m.windows++
		m.rps += p.RPS
		m.p50 += p.P50Ms
		m.p99 += p.P99Ms
		m.gw += p.GatewayCPUMsPerCall * n
		m.b1 += p.BrokerCPUMsPerCall[0] * n
		m.b2 += p.BrokerCPUMsPerCall[1] * n
		m.errors += p.Errors
		calls += n
	}
	if m.windows == 0 {
		return m
	}
	k := float64(m.windows)
	m.rps, m.p50, m.p99 = round(m.rps/k, 1), round(m.p50/k, 2), round(m.p99/k, 2)
	m.gw, m.b1, m.b2 = round(m.gw/calls, 4), round(m.b1/calls, 4), round(m.b2/calls, 4)
	return m
}

// markdown is scale.md's section on the cluster point.
func (r *ClusterReport) markdown(sb *strings.Builder) {
	fmt.Fprintf(sb, "\n## Two brokers: topics on one broker or spread (%s)\n\n", r.Date)
	if r.Failed != "" {
		fmt.Fprintf(sb, "Not measured: %s\n", firstLine(r.Failed))
		return
	}
	fmt.Fprintf(sb, "A Pulsar cluster of scripts/pulsar-cluster.sh on this machine (one ZooKeeper, one bookie, two brokers), %d gateway replicas (reply-to %s) each given both brokers (`%s`; the second replica and service name broker 2 first) and %d echo services on one topic; closed-loop gRPC load at concurrency %d split evenly over the replicas, %d-byte messages, %.0f s window after %.0f s warm-up, fresh replicas and services per window. one-broker: tg/request, tg/response and tg/config on broker 1; spread: tg/response (the service's response topic and the replicas' reply topics) on broker 2. Owners are looked up (`/lookup/v2/topic`) before and after each window. Gateway CPU is both replicas' together; broker CPU each broker JVM's.\n\n",
		r.Replicas, onOff(r.ReplyTo), r.ServiceURL, r.Services, r.Concurrency, r.MsgSize, r.DurationS, r.WarmupS)
	sb.WriteString("| round | layout | owners | calls/s | p50 ms | p99 ms | gateway CPU ms/call | broker1 CPU ms/call | broker2 CPU ms/call | brokers together | errors |\n|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, p := range r.Points {
		if p.Failed != "" {
			fmt.Fprintf(sb, "| %d | %s | failed: %s | | | | | | | | |\n", p.Round, p.Layout, firstLine(p.Failed))
			continue
		}
		b := p.BrokerCPUMsPerCall
		fmt.Fprintf(sb, "| %d | %s | %s | %.0f | %.2f | %.2f | %.3f | %.3f | %.3f | %.3f | %d |\n",
			p.Round, p.Layout, ownersText(p.Owners), p.RPS, p.P50Ms, p.P99Ms, p.GatewayCPUMsPerCall, b[0], b[1], b[0]+b[1], p.Errors)
	}
	for _, l := range clusterLayouts {
		m := r.means(l.name)
		if m.windows < 2 {
			continue
		}
		fmt.Fprintf(sb, "| mean | %s | | %.0f | %.2f | %.2f | %.3f | %.3f | %.3f | %.3f | %d |\n",
			l.name, m.rps, m.p50, m.p99, m.gw, m.b1, m.b2, m.b1+m.b2, m.errors)
	}
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}
