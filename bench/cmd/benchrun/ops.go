package main

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The operations phase prices durable operations (docs/operations.md):
// after each repetition a fresh gateway with --operations serves, in
// turns on one gateway at one concurrency, plain REST invokes and the same
// calls as operations (loadgen -mode operation: :start, then :wait until
// done), and the broker's counters of the persistent topics operations
// write give the bus cost per operation. The latency of an operation is
// start → done as its client sees it.

// opsTopics are the persistent topics an operation writes to: the state
// table, the reply topic (the run's key's: opsReplies) and the chunk topic.
var opsTopics = []string{
	"persistent://tg/operations/state",
	opsRepliesStem + ".<key id>",
	"persistent://tg/operations/chunks",
}

// opsRepliesStem is the stem of the operations' reply topics, one per key
// (docs/operations.md).
const opsRepliesStem = "persistent://tg/response/toolgate.operations"

// opsReplies is the reply topic of the key the running repetition's
// gateway writes with, counted as opsTopics' second.
var opsReplies string

// keyID is an operations key's id (docs/operations.md): the first 8 bytes
// of HMAC-SHA256 under the key of "toolgate-operations-v1 key id", hex.
func keyID(key []byte) string {
	h := hmac.New(sha256.New, key)
	h.Write([]byte("toolgate-operations-v1 key id"))
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// OpsBus is what one window of operations wrote to opsTopics.
type OpsBus struct {
	Rep    int     `json:"rep"`
	Window int     `json:"window"`
	Calls  int64   `json:"calls"`
	Msgs   []int64 `json:"msgs_in"`  // per topic of opsTopics
	Bytes  []int64 `json:"bytes_in"` // per topic of opsTopics
}

// OpsRow sums up the operations phase: medians over repetitions.
type OpsRow struct {
	Concurrency int       `json:"concurrency"`
	Invoke      FloorSide `json:"invoke"`
	Operation   FloorSide `json:"operation"`
	// AddedP50MS is the operation's p50 (start → done) over the invoke's.
	AddedP50MS float64 `json:"added_p50_ms"`
	// P50Ratio and CPURatio: the operation's over the invoke's, medians
	// of the per-repetition ratios.
	P50Ratio *float64 `json:"p50_vs_invoke,omitempty"`
	CPURatio *float64 `json:"cpu_vs_invoke,omitempty"`
	// MsgsPerOp and BytesPerOp: written to each of OpsTopics per operation.
	OpsTopics  []string  `json:"topics"`
	MsgsPerOp  []float64 `json:"msgs_per_operation"`
	BytesPerOp []float64 `json:"bytes_per_operation"`
}

// opsWanted says whether the operations phase runs.
func (e *env) opsWanted() bool { return e.cfg.OpsConcurrency > 0 && e.cfg.OpsWindows > 0 }

// opsRep runs the operations phase of repetition r.
func (e *env) opsRep(ctx context.Context, rep *Report, r int) error {
	if !e.opsWanted() {
		return nil
	}
	if e.gateway != nil { // the matrix's server, when it is kept
		e.gateway.stop(15 * time.Second)
		e.gateway = nil
	}
	topic := fmt.Sprintf("%s-o%d", e.tag, r+1)
	echo, err := e.startEcho("echo-"+topic, topic)
	if err != nil {
		e.failures++
		logf("operations rep %d: echo service: %v", r+1, err)
		return nil
	}
	defer echo.stop(15 * time.Second)
	reg, err := e.registryFor("registry-"+topic+".yaml", topic)
	if err != nil {
		return err
	}
	// A short TTL: the table the gateways read stays small across runs.
	// The records' key: made afresh for this run's gateways.
	opsKey := filepath.Join(e.tmp, "operations.key")
	key := randHex(32)
	if err := os.WriteFile(opsKey, []byte(key+"\n"), 0o600); err != nil {
		return err
	}
	opsReplies = opsRepliesStem + "." + keyID([]byte(key))
	gw, err := e.startGatewayWith(ctx, e.gwBin, false, reg, "--operations", "--operations-key-file", opsKey, "--operation-ttl", "30s")
	if err != nil {
		e.failures++
		logf("operations rep %d: gateway: %v", r+1, err)
		return nil
	}
	defer gw.stop(15 * time.Second)
	winS := e.cfg.DurationS / float64(e.cfg.OpsWindows)
	warmS := min(e.cfg.WarmupS, 1)
	c := e.cfg.OpsConcurrency
	for i, mode := range doorsOrder([]string{"rest", "operation"}, e.cfg.OpsWindows, r) {
		var before OpsBus
		if mode == "operation" {
			if before, err = e.opsCounters(gw); err != nil {
				logf("operations rep %d: counters: %v", r+1, err)
			}
		}
		s := e.load(ctx, mode, c, warmS, winS, 0, 0, target{srv: gw, echo: echo, topic: topic})
		s.Rep, s.Window, s.Protocol = r, i, "operations"
		rep.OpsSamples = append(rep.OpsSamples, s)
		logf("operations rep %d %-9s c=%-3d window %d: %s", r+1, mode, c, i+1, s.line())
		if mode == "operation" && err == nil && s.Failed == "" {
			after, err := e.opsCounters(gw)
			if err != nil {
				logf("operations rep %d: counters: %v", r+1, err)
			} else {
				// The counters run over warm-up and window alike: the
				// gateway's count of operations started does too.
				d := OpsBus{Rep: r, Window: i, Calls: after.Calls - before.Calls}
				for k := range opsTopics {
					d.Msgs = append(d.Msgs, after.Msgs[k]-before.Msgs[k])
					d.Bytes = append(d.Bytes, after.Bytes[k]-before.Bytes[k])
				}
				rep.OpsBus = append(rep.OpsBus, d)
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

// opsCounters reads the broker's msgInCounter and bytesInCounter of
// opsTopics (0 for a topic that does not exist yet), and into Calls the
// gateway's toolgate_operations_started_total.
func (e *env) opsCounters(gw *child) (OpsBus, error) {
	var b OpsBus
	hc := http.Client{Timeout: 3 * time.Second}
	started, err := scrapeCounter(&hc, "http://"+gw.metricsAddr+"/metrics", "toolgate_operations_started_total")
	if err != nil {
		return b, err
	}
	b.Calls = int64(started)
	for i, t := range opsTopics {
		if i == 1 {
			t = opsReplies
		}
		scheme, rest, _ := strings.Cut(t, "://")
		resp, err := hc.Get(e.adminURL + "/admin/v2/" + scheme + "/" + rest + "/stats")
		if err != nil {
			return b, err
		}
		var st struct {
			MsgInCounter   int64 `json:"msgInCounter"`
			BytesInCounter int64 `json:"bytesInCounter"`
		}
		err = json.NewDecoder(resp.Body).Decode(&st)
		_ = resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusNotFound:
			st.MsgInCounter, st.BytesInCounter = 0, 0
		case resp.StatusCode != http.StatusOK:
			return b, fmt.Errorf("stats of %s: HTTP %d", t, resp.StatusCode)
		case err != nil:
			return b, fmt.Errorf("stats of %s: %w", t, err)
		}
		b.Msgs = append(b.Msgs, st.MsgInCounter)
		b.Bytes = append(b.Bytes, st.BytesInCounter)
	}
	return b, nil
}

// summarizeOps sets r.Ops and the ratios operation_p50_added_ms_c<c>,
// operation_p50_vs_invoke and operation_cpu_vs_invoke.
func (r *Report) summarizeOps() {
	r.Ops = nil
	c := r.Config.OpsConcurrency
	var inv, op sideVals
	var p50s, cpus []float64
	for _, rp := range repetitions(r.OpsSamples) {
		i, ok1 := sumWindows(r.OpsSamples, "operations", "rest", c, rp)
		o, ok2 := sumWindows(r.OpsSamples, "operations", "operation", c, rp)
		if !ok1 || !ok2 {
			continue
		}
		inv.add(i, nil)
		op.add(o, nil)
		if i.p50 > 0 {
			p50s = append(p50s, o.p50/i.p50)
		}
		if i.cpu1k > 0 {
			cpus = append(cpus, o.cpu1k/i.cpu1k)
		}
	}
	if len(inv.cpu) == 0 {
		return
	}
	row := OpsRow{Concurrency: c, Invoke: inv.side(), Operation: op.side(), OpsTopics: opsTopics,
		P50Ratio: medianOf(p50s), CPURatio: medianOf(cpus)}
	row.AddedP50MS = round(row.Operation.P50MS-row.Invoke.P50MS, 3)
	for k := range opsTopics {
		var msgs, bytes []float64
		for _, b := range r.OpsBus {
			if b.Calls > 0 && k < len(b.Msgs) {
				msgs = append(msgs, float64(b.Msgs[k])/float64(b.Calls))
				bytes = append(bytes, float64(b.Bytes[k])/float64(b.Calls))
			}
		}
		row.MsgsPerOp = append(row.MsgsPerOp, round(median(msgs), 2))
		row.BytesPerOp = append(row.BytesPerOp, round(median(bytes), 0))
	}
	r.Ops = &row
	r.setRatio("operation_p50_vs_invoke", row.P50Ratio)
	r.setRatio("operation_cpu_vs_invoke", row.CPURatio)
	added := row.AddedP50MS
	r.setRatio(fmt.Sprintf("operation_p50_added_ms_c%d", c), &added)
}

// opsMarkdown is the operations phase's table.
func (r *Report) opsMarkdown(b *strings.Builder) {
	if r.Ops == nil {
		return
	}
	o := r.Ops
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	w("### Durable operations against plain invokes, interleaved\n\n")
	w("After each repetition a fresh gateway with `--operations` serves REST invokes and the same calls as operations (`:start`, then `:wait` until done) in turn at c=%d, %d windows in all. An operation's latency is start → done as its client sees it; CPU is the gateway's per call.\n\n", o.Concurrency, r.Config.OpsWindows)
	w("| | p50 ms | p99 ms | calls/s | gateway CPU ms / call |\n|---|---:|---:|---:|---:|\n")
	w("| invoke | %.2f | %.2f | %.0f | %.3f |\n", o.Invoke.P50MS, o.Invoke.P99MS, o.Invoke.RPS, o.Invoke.CPUMSPerCall)
	w("| operation | %.2f | %.2f | %.0f | %.3f |\n", o.Operation.P50MS, o.Operation.P99MS, o.Operation.RPS, o.Operation.CPUMSPerCall)
	w("\nAdded p50 of an operation over an invoke: **%.2f ms** (× %s); gateway CPU × %s.\n\n", o.AddedP50MS, cell2(o.P50Ratio), cell2(o.CPURatio))
	w("What one operation writes to the broker's persistent topics (msgInCounter and bytesInCounter, medians over the operation windows; the request itself is non-persistent, as for an invoke):\n\n| topic | messages / operation | bytes / operation |\n|---|---:|---:|\n")
	for k, t := range o.OpsTopics {
		if k < len(o.MsgsPerOp) {
			w("| `%s` | %.2f | %.0f |\n", t, o.MsgsPerOp[k], o.BytesPerOp[k])
		}
	}
	w("\n")
}

// scrapeCounter reads one unlabelled series from a Prometheus text page.
func scrapeCounter(hc *http.Client, url, name string) (float64, error) {
	resp, err := hc.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s: HTTP %d", url, resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s has no %s", url, name)
}
