package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"google.golang.org/protobuf/types/known/structpb"
)

// runInflight parks o.Concurrency calls on the echo service's sleep mode at
// once and reports the gateway's RSS growth per call.
func runInflight(ctx context.Context, o Options) (*Result, error) {
	if o.WatchPID == 0 {
		return nil, errors.New("inflight needs -watch-pid (the gateway)")
	}
	n := o.Concurrency
	conns, err := dialGRPC(o.GRPCAddr, o.Conns, o.APIKey)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	clients := make([]toolgatev1.ToolServiceClient, len(conns))
	for i, c := range conns {
		clients[i] = toolgatev1.NewToolServiceClient(c)
	}

	// Warm up: connections, the gateway's producer and pools.
	warm, _ := structpb.NewStruct(map[string]any{"msg": "warm-up"})
	var wg sync.WaitGroup
	var warmErr atomic.Value
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 25 {
				cctx, cancel := context.WithTimeout(ctx, o.Timeout)
				_, err := clients[w%len(clients)].InvokeTool(cctx, &toolgatev1.InvokeToolRequest{Name: o.Tool, Arguments: warm})
				cancel()
				if err != nil {
					warmErr.Store(err)
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := warmErr.Load().(error); err != nil {
		return nil, fmt.Errorf("warm-up call failed: %w", err)
	}
	time.Sleep(time.Second)
	idle, idleHWM, err := sampleRSS(o.WatchPID, 5, 100*time.Millisecond)
	if err != nil {
		return nil, err
	}
	var idleGo, parkedGo *GoMem
	if o.PprofURL != "" {
		if idleGo, err = goMem(o.PprofURL); err != nil {
			return nil, err
		}
		time.Sleep(500 * time.Millisecond)
	}
	cpu0, _ := procCPU(o.WatchPID)
	base, baseErr := topicMsgIn(o.AdminURL, o.Topic)

	sleepArgs, _ := structpb.NewStruct(map[string]any{"mode": "sleep", "ms": o.SleepMS, "msg": "parked"})
	var done, failed atomic.Int64
	var mu sync.Mutex
	var samples []string
	t0 := time.Now()
	interval := time.Second / time.Duration(max(o.RampRate, 1))
	for i := range n {
		if d := time.Until(t0.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, time.Duration(o.SleepMS)*time.Millisecond+o.Timeout)
			defer cancel()
			resp, err := clients[i%len(clients)].InvokeTool(cctx, &toolgatev1.InvokeToolRequest{Name: o.Tool, Arguments: sleepArgs})
			if err == nil && resp.GetOutput() != "parked" {
				err = errors.New("reply differs from the message sent")
			}
			done.Add(1)
			if err != nil {
				failed.Add(1)
				mu.Lock()
				if len(samples) < 5 && !slices.Contains(samples, err.Error()) {
					samples = append(samples, err.Error())
				}
				mu.Unlock()
			}
		}()
	}

	// Wait until the broker has seen every request: then each call is
	// parked in the gateway, waiting for its reply.
	reached := int64(-1)
	if baseErr == nil {
		deadline := time.Now().Add(15 * time.Second)
		for time.Now().Before(deadline) {
			if v, err := topicMsgIn(o.AdminURL, o.Topic); err == nil {
				reached = v - base
				if reached >= int64(n) {
					break
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
	} else {
		fmt.Fprintf(os.Stderr, "loadgen: cannot read topic stats (%v); sampling without confirmation\n", baseErr)
	}
	time.Sleep(o.Settle)
	parked, parkedHWM, err := sampleRSS(o.WatchPID, 5, 200*time.Millisecond)
	if err != nil {
		return nil, err
	}
	sampledAfter := time.Since(t0)
	doneAtSample := done.Load()
	if o.PprofURL != "" {
		if parkedGo, err = goMem(o.PprofURL); err != nil {
			return nil, err
		}
		if o.HeapOut != "" { // the heap profile as of the GC goMem forced: live objects
			if err := saveURL(o.PprofURL+"/debug/pprof/heap", o.HeapOut); err != nil {
				return nil, err
			}
		}
	}
	wg.Wait()
	cpu1, _ := procCPU(o.WatchPID)

	in := &Inflight{
		Calls: n, Conns: o.Conns, SleepMS: o.SleepMS,
		IdleRSSBytes: idle, ParkedRSSBytes: parked, BytesPerCall: (parked - idle) / int64(n),
		ReachedBroker: reached, DoneAtSample: doneAtSample, SampledAfterS: round(sampledAfter.Seconds(), 2),
		GatewayCPUS: round(cpu1-cpu0, 3), IdleHWMBytes: idleHWM, ParkedHWMBytes: parkedHWM,
		Idle: idleGo, Parked: parkedGo,
	}
	return &Result{
		Mode: "inflight", Concurrency: n, Calls: n - int(failed.Load()), Errors: int(failed.Load()),
		ErrorSamples: samples, Inflight: in,
	}, nil
}

// sampleRSS returns the largest VmRSS of k samples and the VmHWM after them.
func sampleRSS(pid, k int, every time.Duration) (int64, int64, error) {
	var peak, hwm int64
	for i := range k {
		if i > 0 {
			time.Sleep(every)
		}
		rss, h, err := procMem(pid)
		if err != nil {
			return 0, 0, err
		}
		peak, hwm = max(peak, rss), h
	}
	return peak, hwm, nil
}

// topicMsgIn reads how many messages the broker took on a request topic.
func topicMsgIn(adminURL, topic string) (int64, error) {
	url := adminURL + "/admin/v2/non-persistent/tg/request/" + topic + "/stats"
	c := http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s: HTTP %d", url, resp.StatusCode)
	}
	var st struct {
		MsgInCounter int64 `json:"msgInCounter"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return 0, err
	}
	return st.MsgInCounter, nil
}

// goMem reads the gateway's runtime memory statistics from net/http/pprof:
// first as they are, then after a forced GC (which gives the live heap).
func goMem(base string) (*GoMem, error) {
	hc := http.Client{Timeout: 30 * time.Second}
	get := func(path string) (string, error) {
		resp, err := hc.Get(base + path)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return "", err
		}
		if resp.StatusCode != http.StatusOK {
			return "", fmt.Errorf("%s%s: HTTP %d", base, path, resp.StatusCode)
		}
		return string(b), nil
	}
	stat := func(text, name string) int64 {
		for line := range strings.SplitSeq(text, "\n") {
			if v, ok := strings.CutPrefix(line, "# "+name+" = "); ok {
				v, _, _ = strings.Cut(v, " ")
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		return 0
	}
	m := &GoMem{}
	g, err := get("/debug/pprof/goroutine?debug=1")
	if err != nil {
		return nil, err
	}
	if _, err := fmt.Sscanf(g, "goroutine profile: total %d", &m.Goroutines); err != nil {
		return nil, fmt.Errorf("goroutine profile: %w", err)
	}
	h, err := get("/debug/pprof/heap?debug=1")
	if err != nil {
		return nil, err
	}
	m.StackBytes, m.HeapAlloc, m.Sys = stat(h, "Stack"), stat(h, "HeapAlloc"), stat(h, "Sys")
	if h, err = get("/debug/pprof/heap?debug=1&gc=1"); err != nil {
		return nil, err
	}
	m.HeapLive = stat(h, "HeapAlloc")
	return m, nil
}

func saveURL(url, file string) error {
	hc := http.Client{Timeout: 30 * time.Second}
	resp, err := hc.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: HTTP %d", url, resp.StatusCode)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
