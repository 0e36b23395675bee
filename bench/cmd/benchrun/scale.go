package main

// The scaling points: R gateway replicas (separate processes) behind one
// load, with reply-to on and off, against the same Go echo service. Per
// point: gateway CPU per call (all replicas together) and the reply
// messages the broker delivered to gateways per call, read from the
// broker's topic statistics. Written to scale.json and scale.md in -out.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/wire"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"
)

// ScalePoint is one (replicas, reply-to) measurement.
type ScalePoint struct {
	Replicas int `json:"replicas"`
	// Loaded is how many of the replicas take the load; the others only
	// receive what the broker sends them.
	Loaded      int     `json:"loaded"`
	ReplyTo     bool    `json:"reply_to"`
	Concurrency int     `json:"concurrency"`
	Calls       int64   `json:"calls"`
	Errors      int64   `json:"errors"`
	RPS         float64 `json:"rps"`
	// GatewayCPUMsPerCall is the CPU time of all replicas over the window
	// divided by the calls completed in it.
	GatewayCPUMsPerCall float64 `json:"gateway_cpu_ms_per_call"`
	// BrokerCPUMsPerCall is the broker's CPU time per call (0 when its
	// process was not found).
	BrokerCPUMsPerCall float64 `json:"broker_cpu_ms_per_call"`
	// BystanderCPUMsPerCall is, when Loaded < Replicas, the CPU time of
	// one replica that takes no load, per call of the others: what
	// receiving (and dropping) their replies costs it.
	BystanderCPUMsPerCall float64 `json:"bystander_cpu_ms_per_call,omitempty"`
	// ReplyDeliveriesPerCall is the messages the broker delivered from
	// the service's response topic and the replicas' reply topics, per
	// call; ReplyBytesPerCall the same in bytes.
	ReplyDeliveriesPerCall float64 `json:"reply_deliveries_per_call"`
	ReplyBytesPerCall      float64 `json:"reply_bytes_per_call"`
	Failed                 string  `json:"failed,omitempty"`
}

// ScaleReport is scale.json.
type ScaleReport struct {
	Date      string       `json:"date"`
	Quick     bool         `json:"quick"`
	WarmupS   float64      `json:"warmup_s"`
	DurationS float64      `json:"duration_s"`
	MsgSize   int          `json:"msg_size"`
	Points    []ScalePoint `json:"points"`
	// Cluster is the point on a two-broker cluster (cluster.go), when run.
	Cluster *ClusterReport `json:"cluster,omitempty"`
}

const scaleConcurrency = 64

// scaleRun measures R = 1, 2, 4 with reply-to off and on.
func (e *env) scaleRun(ctx context.Context) error {
	rep := ScaleReport{Date: time.Now().UTC().Format(time.RFC3339), Quick: e.cfg.Quick, MsgSize: e.cfg.MsgSize,
		WarmupS: 1, DurationS: e.cfg.DurationS}
	if e.cfg.Quick {
		rep.DurationS = 3
	}
	key, err := os.ReadFile(e.keyFile)
	if err != nil {
		return err
	}
	// R replicas sharing the load, then 4 replicas of which only one is
	// loaded: the other three show what another replica's replies cost.
	plan := [][2]int{{1, 1}, {2, 2}, {4, 4}, {4, 1}}
	for _, rl := range plan {
		for _, on := range []bool{false, true} {
			p := e.scalePoint(ctx, rl[0], rl[1], on, strings.TrimSpace(string(key)), rep.WarmupS, rep.DurationS)
			rep.Points = append(rep.Points, p)
			if p.Failed != "" {
				e.failures++
				logf("scale R=%d (%d loaded) reply-to=%v: %s", rl[0], rl[1], on, p.Failed)
			} else {
				logf("scale R=%d (%d loaded) reply-to=%-5v rps %7.1f  gateways %.3f, one bystander %.4f, broker %.3f CPU-ms/call  reply deliveries %.3f/call (%.0f B/call)  errors %d",
					rl[0], rl[1], on, p.RPS, p.GatewayCPUMsPerCall, p.BystanderCPUMsPerCall, p.BrokerCPUMsPerCall, p.ReplyDeliveriesPerCall, p.ReplyBytesPerCall, p.Errors)
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}
	if e.cluster == "on" {
		rep.Cluster = e.clusterRun(ctx)
	}
	return e.writeScale(rep)
}

// clusterOnly runs the cluster point alone and puts it into the
// scale.json already in -out (a new one when there is none), keeping its
// replica points.
func (e *env) clusterOnly(ctx context.Context) error {
	rep := ScaleReport{Date: time.Now().UTC().Format(time.RFC3339), Quick: e.cfg.Quick, MsgSize: e.cfg.MsgSize}
	b, err := os.ReadFile(filepath.Join(e.out, "scale.json"))
	switch {
	case err == nil:
		if err := json.Unmarshal(b, &rep); err != nil {
			return fmt.Errorf("%s: %w", filepath.Join(e.out, "scale.json"), err)
		}
	case !errors.Is(err, os.ErrNotExist):
		return err
	}
	rep.Cluster = e.clusterRun(ctx)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return e.writeScale(rep)
}

// writeScale writes scale.json and scale.md into -out.
func (e *env) writeScale(rep ScaleReport) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(e.out, "scale.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(e.out, "scale.md"), []byte(rep.markdown()), 0o644); err != nil {
		return err
	}
	logf("wrote %s and %s", filepath.Join(e.out, "scale.json"), filepath.Join(e.out, "scale.md"))
	return nil
}

func (r ScaleReport) markdown() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "# Gateway replicas and reply-to (%s)\n\n", r.Date)
	if len(r.Points) > 0 {
		r.replicasMarkdown(&sb)
	} else {
		sb.WriteString("The replica points were not run.\n")
	}
	if r.Cluster != nil {
		r.Cluster.markdown(&sb)
	}
	return sb.String()
}

func (r ScaleReport) replicasMarkdown(sb *strings.Builder) {
	fmt.Fprintf(sb, "Closed-loop gRPC load, concurrency %d spread evenly over the loaded ones of R gateway processes, all calling one Go echo service (%d-byte messages); %.0f s window after %.0f s warm-up. Gateway CPU is the sum over the replicas; a bystander is a replica that takes no load, its CPU per call of the others what their replies cost it; reply deliveries are the broker's msgOutCounter on the service's response topic and the replicas' reply topics.\n\n",
		scaleConcurrency, r.MsgSize, r.DurationS, r.WarmupS)
	sb.WriteString("| R | loaded | reply-to | calls/s | gateway CPU ms/call | one bystander CPU ms/call | broker CPU ms/call | reply deliveries/call | reply bytes/call | errors |\n|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, p := range r.Points {
		if p.Failed != "" {
			fmt.Fprintf(sb, "| %d | %d | %v | failed: %s | | | | | | |\n", p.Replicas, p.Loaded, p.ReplyTo, p.Failed)
			continue
		}
		by := "–"
		if p.Loaded < p.Replicas {
			by = fmt.Sprintf("%.4f", p.BystanderCPUMsPerCall)
		}
		fmt.Fprintf(sb, "| %d | %d | %v | %.0f | %.3f | %s | %.3f | %.3f | %.0f | %d |\n", p.Replicas, p.Loaded, p.ReplyTo, p.RPS, p.GatewayCPUMsPerCall, by, p.BrokerCPUMsPerCall, p.ReplyDeliveriesPerCall, p.ReplyBytesPerCall, p.Errors)
	}
}

func (e *env) scalePoint(ctx context.Context, replicas, loaded int, replyTo bool, key string, warmupS, durS float64) ScalePoint {
	p := ScalePoint{Replicas: replicas, Loaded: loaded, ReplyTo: replyTo, Concurrency: scaleConcurrency}
	var gws []*child
	var ids []string
	defer func() {
		for _, g := range gws {
			g.stop(15 * time.Second)
		}
	}()
	for i := range replicas {
		id := fmt.Sprintf("bench-%s-%d", randHex(3), i)
		g, err := e.startReplica(ctx, e.pulsarURL, id, replyTo)
		if err != nil {
			p.Failed = err.Error()
			return p
		}
		gws, ids = append(gws, g), append(ids, id)
	}
	clients, closeClients, err := grpcClients(gws)
	if err != nil {
		p.Failed = err.Error()
		return p
	}
	defer closeClients()
	topics := []string{wire.ResponseTopic(e.topicGW)}
	for _, id := range ids {
		topics = append(topics, wire.ReplyTopic(id))
	}
	var cpu0, cpu1, by0, by1, broker0, broker1 float64
	var msgs0, bytes0, msgs1, bytes1 int64
	var err1, err2, err3, err4 error
	w, err := e.closedLoop(ctx, clients[:loaded], key, warmupS, durS, func(start bool) {
		if start {
			cpu0, err1 = cpuOf(gws)
			by0, _ = cpuOf(gws[loaded:])
			broker0 = e.brokerCPU()
			msgs0, bytes0, err2 = e.deliveredFrom(topics)
			return
		}
		cpu1, err3 = cpuOf(gws)
		by1, _ = cpuOf(gws[loaded:])
		broker1 = e.brokerCPU()
		msgs1, bytes1, err4 = e.deliveredFrom(topics)
	})
	if err := errors.Join(err, err1, err2, err3, err4); err != nil {
		p.Failed = err.Error()
		return p
	}
	p.Calls, p.Errors = w.calls, w.errors
	if p.Calls == 0 {
		p.Failed = fmt.Sprintf("no call completed (%d errors)", p.Errors)
		return p
	}
	n := float64(p.Calls)
	p.RPS = round(n/w.elapsed.Seconds(), 1)
	p.GatewayCPUMsPerCall = round((cpu1-cpu0)*1000/n, 4)
	p.BrokerCPUMsPerCall = round((broker1-broker0)*1000/n, 4)
	if bystanders := replicas - loaded; bystanders > 0 {
		p.BystanderCPUMsPerCall = round((by1-by0)*1000/n/float64(bystanders), 5)
	}
	p.ReplyDeliveriesPerCall = round(float64(msgs1-msgs0)/n, 3)
	p.ReplyBytesPerCall = round(float64(bytes1-bytes0)/n, 1)
	time.Sleep(300 * time.Millisecond) // let the last replies drain
	return p
}

// startReplica starts one gateway replica on free ports, with instance id
// id, against the brokers of pulsarURL.
func (e *env) startReplica(ctx context.Context, pulsarURL, id string, replyTo bool) (*child, error) {
	e.gwSeq++
	ga, ha, _, err := freeAddrs(false)
	if err != nil {
		return nil, err
	}
	aa, err := freeAddr()
	if err != nil {
		return nil, err
	}
	args := []string{"--grpc-addr", ga, "--http-addr", ha, "--admin-addr", aa, "--pulsar-url", pulsarURL,
		"--registry", e.registry, "--log-level", "warn", "--api-keys", e.keysFile,
		"--instance-id", id, "--reply-to=" + strconv.FormatBool(replyTo)}
	return e.startServer(ctx, fmt.Sprintf("gateway-%03d", e.gwSeq), e.gwBin, ga, ha, "", append(args, strings.Fields(e.gwArgs)...))
}

// grpcClients opens one gRPC connection to each server; close closes them.
func grpcClients(srvs []*child) (clients []toolgatev1.ToolServiceClient, closeAll func(), err error) {
	var conns []*grpc.ClientConn
	closeAll = func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}
	for _, s := range srvs {
		conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		conns = append(conns, conn)
		clients = append(clients, toolgatev1.NewToolServiceClient(conn))
	}
	return clients, closeAll, nil
}

// loopWindow is what a closed loop counted in its measured window.
type loopWindow struct {
	calls, errors int64
	elapsed       time.Duration
	latencies     []time.Duration // of the calls completed in the window
}

// closedLoop calls echo back to back from scaleConcurrency callers spread
// evenly over clients: warmupS seconds unmeasured, then a window of durS
// seconds. mark(true) runs just before the window opens, mark(false) right
// after it closes (the snapshots of CPU and counters).
func (e *env) closedLoop(ctx context.Context, clients []toolgatev1.ToolServiceClient, key string, warmupS, durS float64, mark func(start bool)) (loopWindow, error) {
	args, err := structpb.NewStruct(map[string]any{"msg": strings.Repeat("x", e.cfg.MsgSize)})
	if err != nil {
		return loopWindow{}, err
	}
	var counting atomic.Bool
	var calls, errs atomic.Int64
	lctx, stop := context.WithCancel(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+key))
	defer stop()
	lat := make([][]time.Duration, scaleConcurrency)
	var wg sync.WaitGroup
	for w := range scaleConcurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := clients[w%len(clients)]
			for lctx.Err() == nil {
				t0 := time.Now()
				cctx, cancel := context.WithTimeout(lctx, 10*time.Second)
				_, err := c.InvokeTool(cctx, &toolgatev1.InvokeToolRequest{Name: "echo", Arguments: args})
				cancel()
				if !counting.Load() {
					continue
				}
				if err != nil && lctx.Err() == nil {
					errs.Add(1)
				} else if err == nil {
					calls.Add(1)
					lat[w] = append(lat[w], time.Since(t0))
				}
			}
		}()
	}
	time.Sleep(time.Duration(warmupS * float64(time.Second)))
	mark(true)
	t0 := time.Now()
	counting.Store(true)
	time.Sleep(time.Duration(durS * float64(time.Second)))
	counting.Store(false)
	elapsed := time.Since(t0)
	mark(false)
	stop()
	wg.Wait()
	out := loopWindow{calls: calls.Load(), errors: errs.Load(), elapsed: elapsed}
	for _, l := range lat {
		out.latencies = append(out.latencies, l...)
	}
	return out, nil
}

// cpuOf sums utime+stime of the processes, in seconds.
func cpuOf(cs []*child) (float64, error) {
	var sum float64
	for _, c := range cs {
		s, err := pidCPU(c.pid())
		if err != nil {
			return 0, err
		}
		sum += s
	}
	return sum, nil
}

// brokerCPU is the broker process's CPU seconds (0 when unknown).
func (e *env) brokerCPU() float64 {
	if e.brokerPID == 0 {
		return 0
	}
	s, _ := pidCPU(e.brokerPID)
	return s
}

// pidCPU is utime+stime of pid in seconds.
func pidCPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return float64(ut+st) / 100, nil // USER_HZ
}

// deliveredFrom sums msgOutCounter and bytesOutCounter over the
// subscriptions of the topics (full names).
func (e *env) deliveredFrom(topics []string) (msgs, bytes int64, err error) {
	hc := http.Client{Timeout: 3 * time.Second}
	for _, t := range topics {
		scheme, rest, _ := strings.Cut(t, "://")
		resp, err := hc.Get(e.adminURL + "/admin/v2/" + scheme + "/" + rest + "/stats")
		if err != nil {
			return 0, 0, err
		}
		var st struct {
			Subscriptions map[string]struct {
				MsgOutCounter   int64 `json:"msgOutCounter"`
				BytesOutCounter int64 `json:"bytesOutCounter"`
			} `json:"subscriptions"`
		}
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if resp.StatusCode == http.StatusNotFound {
			continue // no reply has used it: reply-to off
		}
		if resp.StatusCode != http.StatusOK {
			return 0, 0, fmt.Errorf("stats of %s: HTTP %d", t, resp.StatusCode)
		}
		if err != nil {
			return 0, 0, fmt.Errorf("stats of %s: %w", t, err)
		}
		for _, s := range st.Subscriptions {
			msgs += s.MsgOutCounter
			bytes += s.BytesOutCounter
		}
	}
	return msgs, bytes, nil
}
