// Package loadresult is the JSON a benchmark load client (bench/cmd/loadgen, and
// bench/python/tg_load.py in the same shape) prints for one measured point,
// and that the benchmark orchestrator (bench/cmd/benchrun) reads.
package loadresult

// Result is what loadgen prints.
type Result struct {
	Mode        string  `json:"mode"`
	Concurrency int     `json:"concurrency"`
	DurationS   float64 `json:"duration_s"`
	WarmupS     float64 `json:"warmup_s"`
	// Rate is the paced rate asked for (loadgen -rate), 0 for a closed
	// loop.
	Rate   float64 `json:"rate,omitempty"`
	Calls  int     `json:"calls"`
	RPS    float64 `json:"rps"`
	P50    float64 `json:"p50_ms"`
	P90    float64 `json:"p90_ms"`
	P99    float64 `json:"p99_ms"`
	P999   float64 `json:"p999_ms"`
	Max    float64 `json:"max_ms"`
	Mean   float64 `json:"mean_ms"`
	Errors int     `json:"errors"`
	// WarmupErrors are failed calls outside the measured window.
	WarmupErrors int      `json:"warmup_errors"`
	ErrorSamples []string `json:"error_samples,omitempty"`
	// Stream modes: Chunks received in the window; ChunksPerS is one
	// stream's rate (-stream-n over the median call time), WindowChunksPerS
	// all chunks of the calls completed in the window over its length.
	Chunks           int     `json:"chunks,omitempty"`
	ChunksPerS       float64 `json:"chunks_per_s,omitempty"`
	WindowChunksPerS float64 `json:"window_chunks_per_s,omitempty"`
	// ClientCPUS is loadgen's own CPU time over the window.
	ClientCPUS float64     `json:"client_cpu_s"`
	Gateway    *ProcResult `json:"gateway,omitempty"`
	// Procs are all watched processes (-watch-pid as "gateway", -watch).
	Procs    map[string]*ProcResult `json:"procs,omitempty"`
	Inflight *Inflight              `json:"inflight,omitempty"`
	// Turns: with loadgen -turns, each target's calls apart, in the
	// order given.
	Turns []Turn `json:"turns,omitempty"`
}

// Turn is one target's calls in a run where targets take turns.
type Turn struct {
	Name   string  `json:"name"`
	Mode   string  `json:"mode"`
	Calls  int     `json:"calls"`
	P50    float64 `json:"p50_ms"`
	P90    float64 `json:"p90_ms"`
	P99    float64 `json:"p99_ms"`
	Mean   float64 `json:"mean_ms"`
	Errors int     `json:"errors"`
}

// ProcResult is what was seen of the watched process during the window.
type ProcResult struct {
	PID           int     `json:"pid"`
	CPUS          float64 `json:"cpu_s"`
	CPUSPer1kCall float64 `json:"cpu_s_per_1k_calls"`
	PeakRSSBytes  int64   `json:"peak_rss_bytes,omitempty"` // largest VmRSS sampled in the window
	HWMBytes      int64   `json:"hwm_bytes,omitempty"`      // VmHWM at the end: peak since the process started
	// With loadgen -metrics-url (the gateway only): heap allocations over
	// the window from its go_memstats_mallocs_total, less MallocsScrape
	// (what one scrape of /metrics allocates, measured before the load),
	// and per call completed in the window.
	Mallocs        int64   `json:"mallocs,omitempty"`
	MallocsScrape  int64   `json:"mallocs_scrape,omitempty"`
	MallocsPerCall float64 `json:"mallocs_per_call,omitempty"`
	// GCCycles: its garbage collections over the window (from
	// go_gc_duration_seconds_count), and per 10,000 calls.
	GCCycles      int64   `json:"gc_cycles,omitempty"`
	GCPer10kCalls float64 `json:"gc_per_10k_calls,omitempty"`
	// PublishedPerCall: requests the gateway published to the bus over
	// the window (toolgate_bridge_published_total), per call completed;
	// HedgedPerCall: those published again for a silence
	// (toolgate_bridge_hedged_total). Absent for a server without them.
	PublishedPerCall *float64 `json:"published_per_call,omitempty"`
	HedgedPerCall    *float64 `json:"hedged_per_call,omitempty"`
}

// Inflight is the memory-per-parked-call measurement.
type Inflight struct {
	Calls          int     `json:"calls"`
	Conns          int     `json:"conns"`
	SleepMS        int     `json:"sleep_ms"`
	IdleRSSBytes   int64   `json:"idle_rss_bytes"`
	ParkedRSSBytes int64   `json:"parked_rss_bytes"`
	BytesPerCall   int64   `json:"bytes_per_call"`
	ReachedBroker  int64   `json:"reached_broker"`   // requests the broker counted on the topic (-1: unknown)
	DoneAtSample   int64   `json:"done_at_sample"`   // calls already finished when RSS was sampled (want 0)
	SampledAfterS  float64 `json:"sampled_after_s"`  // from the first call to the RSS sample
	GatewayCPUS    float64 `json:"gateway_cpu_s"`    // gateway CPU to take and release the calls
	IdleHWMBytes   int64   `json:"idle_hwm_bytes"`   // VmHWM before parking
	ParkedHWMBytes int64   `json:"parked_hwm_bytes"` // VmHWM after parking
	// With -pprof-url (bench/cmd/gatewayprof): the Go runtime's view,
	// idle and parked, to split the growth into stacks and heap.
	Idle   *GoMem `json:"idle_go,omitempty"`
	Parked *GoMem `json:"parked_go,omitempty"`
}

// GoMem is what the gateway's runtime says about its memory.
type GoMem struct {
	Goroutines int   `json:"goroutines"`
	StackBytes int64 `json:"stack_inuse_bytes"`
	HeapAlloc  int64 `json:"heap_alloc_bytes"` // live and not yet collected
	HeapLive   int64 `json:"heap_live_bytes"`  // HeapAlloc right after a forced GC
	Sys        int64 `json:"sys_bytes"`
}
