package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// ProfileSummary is what the pprof step found.
type ProfileSummary struct {
	Mode            string  `json:"mode"`
	Concurrency     int     `json:"concurrency"`
	Seconds         int     `json:"seconds"`
	RPS             float64 `json:"rps"`
	GatewayCPUPer1k float64 `json:"gateway_cpu_s_per_1k_calls"`
	SampledCPUS     float64 `json:"sampled_cpu_s"`
	// Allocation per call over the profiled seconds (calls ≈ rps × seconds).
	AllocBytesPerCall   float64   `json:"alloc_bytes_per_call"`
	AllocObjectsPerCall float64   `json:"alloc_objects_per_call"`
	Areas               []Area    `json:"areas"`
	TopCum              []FnCost  `json:"top_cum"`
	TopFlat             []FnCost  `json:"top_flat"`
	TopAlloc            []FnAlloc `json:"top_alloc_space"`
	Files               []string  `json:"files"`
}

// Area is a share of the sampled CPU by where the time was spent (by the
// function on top of the stack).
type Area struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"seconds"`
	Percent float64 `json:"percent"`
}

// FnCost is one line of pprof -top.
type FnCost struct {
	Func    string  `json:"func"`
	FlatS   float64 `json:"flat_s"`
	FlatPct float64 `json:"flat_pct"`
	CumS    float64 `json:"cum_s"`
	CumPct  float64 `json:"cum_pct"`
}

// FnAlloc is one line of pprof -top on alloc_space.
type FnAlloc struct {
	Func    string  `json:"func"`
	Flat    string  `json:"flat"`
	FlatPct float64 `json:"flat_pct"`
	Cum     string  `json:"cum"`
	CumPct  float64 `json:"cum_pct"`
}

// profile runs mode at conc against gatewayprof and pulls a CPU and an
// allocation profile over ProfileSeconds of the load.
func (e *env) profile(ctx context.Context, mode string, conc int) (*ProfileSummary, error) {
	g, err := e.startGateway(ctx, e.profBin, true)
	if err != nil {
		return nil, err
	}
	defer g.stop(15 * time.Second)
	secs := e.cfg.ProfileSeconds
	warm := 3 * time.Second
	s := &Sample{}
	loadDone := make(chan error, 1)
	go func() {
		loadDone <- runJSON(ctx, time.Duration(secs)*time.Second+2*time.Minute, s, filepath.Join(e.bin, "loadgen"),
			"-mode", mode, "-concurrency", strconv.Itoa(conc), "-warmup", warm.String(),
			"-duration", (time.Duration(secs+2) * time.Second).String(),
			"-grpc-addr", g.grpcAddr, "-http-addr", g.httpAddr, "-api-key-file", e.keyFile, "-conns", strconv.Itoa(e.cfg.GRPCConns),
			"-msg-size", strconv.Itoa(e.cfg.MsgSize), "-watch-pid", strconv.Itoa(g.pid()))
	}()
	time.Sleep(warm + 500*time.Millisecond)
	base := filepath.Join(e.out, fmt.Sprintf("profile-%s-c%d", mode, conc))
	cpuFile, allocFile := base+".cpu.pb.gz", base+".allocs.pb.gz"
	fetched := make(chan error, 2)
	for url, file := range map[string]string{
		fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", g.pprofAddr, secs): cpuFile,
		fmt.Sprintf("http://%s/debug/pprof/allocs?seconds=%d", g.pprofAddr, secs):  allocFile,
	} {
		go func() { fetched <- fetch(ctx, url, file, time.Duration(secs)*time.Second+30*time.Second) }()
	}
	for range 2 {
		if err := <-fetched; err != nil {
			return nil, errors.Join(err, <-loadDone)
		}
	}
	if err := <-loadDone; err != nil {
		return nil, err
	}
	p := &ProfileSummary{Mode: mode, Concurrency: conc, Seconds: secs, RPS: s.RPS}
	if s.Gateway != nil {
		p.GatewayCPUPer1k = s.Gateway.CPUSPer1kCall
	}
	if err := p.analyze(e.profBin, base, cpuFile, allocFile); err != nil {
		return nil, err
	}
	logf("profile %s c=%d: %.0f calls/s, %d s sampled; top areas: %s", mode, conc, s.RPS, secs, p.areaLine(4))
	return p, nil
}

func fetch(ctx context.Context, url, file string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		return fmt.Errorf("%s: HTTP %d: %s", url, resp.StatusCode, b)
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

func goTool() string {
	if g := os.Getenv("GO"); g != "" {
		return g
	}
	return "go"
}

func pprofTop(bin, file string, args ...string) (string, error) {
	a := append([]string{"tool", "pprof", "-top"}, args...)
	if bin != "" { // Go profiles carry their symbols; the binary only adds source lines
		a = append(a, bin)
	}
	a = append(a, file)
	out, err := exec.Command(goTool(), a...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go %s: %w\n%s", strings.Join(a, " "), err, lastLines(string(out), 10))
	}
	return string(out), nil
}

var totalRE = regexp.MustCompile(`Total samples = ([\d.]+)`)

var topLine = regexp.MustCompile(`^\s*(\S+)\s+([\d.]+)%\s+[\d.]+%\s+(\S+)\s+([\d.]+)%\s+(.+?)\s*$`)

func parseTop(text string) [][5]string {
	var out [][5]string
	for line := range strings.SplitSeq(text, "\n") {
		m := topLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		out = append(out, [5]string{m[1], m[2], m[3], m[4], m[5]})
	}
	return out
}

func secs(s string) float64 {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0
	}
	return d.Seconds()
}

func pct(s string) float64 { f, _ := strconv.ParseFloat(s, 64); return f }

func (p *ProfileSummary) analyze(bin, base, cpuFile, allocFile string) error {
	p.SampledCPUS, p.Areas, p.TopFlat, p.TopCum, p.TopAlloc = 0, nil, nil, nil, nil
	flat, err := pprofTop(bin, cpuFile, "-nodecount=40")
	if err != nil {
		return err
	}
	cum, err := pprofTop(bin, cpuFile, "-cum", "-nodecount=60")
	if err != nil {
		return err
	}
	all, err := pprofTop(bin, cpuFile, "-nodecount=1000000", "-nodefraction=0", "-edgefraction=0")
	if err != nil {
		return err
	}
	alloc, err := pprofTop(bin, allocFile, "-sample_index=alloc_space", "-nodecount=30")
	if err != nil {
		return err
	}
	allocCum, err := pprofTop(bin, allocFile, "-sample_index=alloc_space", "-cum", "-nodecount=40")
	if err != nil {
		return err
	}
	calls := p.RPS * float64(p.Seconds)
	for _, idx := range []string{"alloc_space", "alloc_objects"} {
		out, err := pprofTop(bin, allocFile, "-sample_index="+idx, "-unit=B", "-nodecount=1")
		if err != nil {
			return err
		}
		if m := totalRE.FindStringSubmatch(out); m != nil && calls > 0 {
			v, _ := strconv.ParseFloat(m[1], 64)
			if idx == "alloc_space" {
				p.AllocBytesPerCall = round(v/calls, 0)
			} else {
				p.AllocObjectsPerCall = round(v/calls, 1)
			}
		}
	}
	text := "# CPU, by flat time\n" + flat + "\n# CPU, by cumulative time\n" + cum +
		"\n# Allocated bytes (alloc_space), flat\n" + alloc + "\n# Allocated bytes (alloc_space), cumulative\n" + allocCum
	if err := os.WriteFile(base+".txt", []byte(text), 0o644); err != nil {
		return err
	}
	p.Files = []string{filepath.Base(base + ".txt"), filepath.Base(cpuFile), filepath.Base(allocFile)}

	areas := map[string]float64{}
	for _, f := range parseTop(all) {
		s := secs(f[0])
		p.SampledCPUS += s
		areas[area(f[4])] += s
	}
	p.SampledCPUS = round(p.SampledCPUS, 2)
	for name, s := range areas {
		if s == 0 {
			continue
		}
		p.Areas = append(p.Areas, Area{Name: name, Seconds: round(s, 2), Percent: round(100*s/p.SampledCPUS, 1)})
	}
	sort.Slice(p.Areas, func(i, j int) bool { return p.Areas[i].Seconds > p.Areas[j].Seconds })
	for i, f := range parseTop(flat) {
		if i >= 15 {
			break
		}
		p.TopFlat = append(p.TopFlat, FnCost{Func: f[4], FlatS: secs(f[0]), FlatPct: pct(f[1]), CumS: secs(f[2]), CumPct: pct(f[3])})
	}
	for _, f := range parseTop(cum) {
		if len(p.TopCum) >= 25 {
			break
		}
		if !interesting(f[4]) {
			continue
		}
		p.TopCum = append(p.TopCum, FnCost{Func: f[4], FlatS: secs(f[0]), FlatPct: pct(f[1]), CumS: secs(f[2]), CumPct: pct(f[3])})
	}
	for i, f := range parseTop(alloc) {
		if i >= 12 {
			break
		}
		p.TopAlloc = append(p.TopAlloc, FnAlloc{Func: f[4], Flat: f[0], FlatPct: pct(f[1]), Cum: f[2], CumPct: pct(f[3])})
	}
	return nil
}

// interesting leaves the runtime's and the standard scheduler's frames
// out of the cumulative list, where they only say "goroutines run".
func interesting(fn string) bool {
	for _, p := range []string{"runtime.goexit", "runtime.main", "runtime.mcall", "runtime.park_m", "runtime.schedule",
		"runtime.findRunnable", "runtime.systemstack", "runtime.gcBgMarkWorker", "runtime.gcBgMarkWorker.func2", "runtime.morestack", "runtime.newstack"} {
		if fn == p {
			return false
		}
	}
	return true
}

// area classifies a function on top of the stack.
func area(fn string) string {
	has := func(prefixes ...string) bool {
		for _, p := range prefixes {
			if strings.HasPrefix(fn, p) {
				return true
			}
		}
		return false
	}
	switch {
	case has("syscall.", "internal/runtime/syscall", "runtime/internal/syscall", "golang.org/x/sys/"):
		return "syscalls (socket reads/writes)"
	case has("runtime.gcBgMarkWorker", "runtime.scanobject", "runtime.greyobject", "runtime.markroot", "runtime.gcDrain",
		"runtime.findObject", "runtime.scanblock", "runtime.wbBuf", "runtime.bulkBarrier", "runtime.sweepone",
		"runtime.(*gcWork)", "runtime.(*mspan)", "runtime.(*gcBits)", "runtime.typePointers", "runtime.(*mheap)",
		"runtime.gcmarknewobject", "runtime.spanOf", "runtime.heapBits", "runtime.(*sweepLocked)", "runtime.gcWriteBarrier",
		"runtime.scanstack", "runtime.scanframe", "runtime.pcvalue", "runtime.(*unwinder)", "runtime.step",
		"runtime.funcspdelta", "runtime.readvarint", "runtime.markBits", "runtime.(*mcentral)", "runtime.(*pageAlloc)",
		"runtime.(*spanSet)", "runtime.tryDeferToSpanScan", "runtime.scanObject", "runtime.scanSpan", "runtime.(*spanInlineMarkBits)",
		"runtime.(*spanQueue)", "runtime.(*gcCPULimiterState)"):
		return "garbage collection"
	case has("runtime.mallocgc", "runtime.nextFreeFast", "runtime.(*mcache)", "runtime.memclrNoHeapPointers",
		"runtime.newobject", "runtime.makeslice", "runtime.growslice", "runtime.makemap", "runtime.mapassign",
		"runtime.heapSetType", "runtime.publicationBarrier", "runtime.roundupsize", "runtime.memmove",
		"runtime.concatstring", "runtime.rawstring", "runtime.slicebytetostring", "runtime.stringtoslicebyte",
		"runtime.mapaccess", "runtime.mapiter", "runtime.mapdelete", "internal/runtime/maps.", "runtime.efaceeq",
		"runtime.convT", "runtime.(*itabTableType)", "runtime.getitab", "runtime.assertE2I", "runtime.typeAssert",
		"aeshashbody", "memeqbody", "indexbytebody", "cmpbody", "runtime.memequal", "runtime.nilinterhash",
		"runtime.strhash"):
		return "allocation, maps, copies (runtime)"
	case has("runtime."):
		return "scheduler, timers, locks (runtime)"
	case has("google.golang.org/grpc", "golang.org/x/net/http2"):
		return "gRPC and HTTP/2"
	case has("google.golang.org/protobuf", "github.com/golang/protobuf"):
		return "protobuf (incl. protojson)"
	case has("github.com/grpc-ecosystem/", "net/http.", "net/textproto.", "net/url.", "mime"):
		return "grpc-gateway and net/http"
	case has("github.com/apache/pulsar-client-go", "github.com/gogo/protobuf", "github.com/bits-and-blooms", "github.com/RoaringBitmap"):
		return "Pulsar client"
	case has("encoding/json", "encoding/base64"):
		return "encoding/json"
	case has("github.com/toolgate/"):
		return "toolgate's own code"
	case has("context.", "sync.", "time.", "internal/sync.", "sync/atomic."):
		return "context, sync, time"
	case has("net.", "internal/poll.", "bufio.", "io."):
		return "net, poll, bufio"
	case has("crypto/", "vendor/golang.org/x/crypto", "hash/", "math/rand"):
		return "crypto/rand, hashing"
	case has("log/slog", "fmt.", "strconv.", "strings.", "unicode", "bytes.", "sort.", "slices.", "reflect.", "internal/"):
		return "other standard library"
	}
	return "other"
}

func (p *ProfileSummary) areaLine(n int) string {
	var parts []string
	for i, a := range p.Areas {
		if i >= n {
			break
		}
		parts = append(parts, fmt.Sprintf("%s %.0f%%", a.Name, a.Percent))
	}
	return strings.Join(parts, ", ")
}

func (p *ProfileSummary) markdown(b *strings.Builder) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	w("## Profile: %s at c=%d\n\n", p.Mode, p.Concurrency)
	w("`bench/cmd/gatewayprof` (the gateway plus net/http/pprof) under %s load at concurrency %d: %.0f calls/s, %.3f gateway CPU-s per 1,000 calls; %.1f s of CPU sampled over %d s; about %.0f bytes in %.0f heap allocations per call. Full listings, in the run's output directory: ", p.Mode, p.Concurrency, p.RPS, p.GatewayCPUPer1k, p.SampledCPUS, p.Seconds, p.AllocBytesPerCall, p.AllocObjectsPerCall)
	for i, f := range p.Files {
		if i > 0 {
			w(", ")
		}
		w("`%s`", f)
	}
	w(".\n\n| where the CPU went (function on top of the stack) | CPU s | share |\n|---|---:|---:|\n")
	for _, a := range p.Areas {
		if a.Percent < 0.5 {
			continue
		}
		w("| %s | %.2f | %.1f%% |\n", a.Name, a.Seconds, a.Percent)
	}
	w("\n<details><summary>Top functions by cumulative CPU</summary>\n\n| function | cum s | cum %% |\n|---|---:|---:|\n")
	for _, f := range p.TopCum {
		w("| `%s` | %.2f | %.1f%% |\n", f.Func, f.CumS, f.CumPct)
	}
	w("\n</details>\n\n<details><summary>Top allocators (bytes allocated)</summary>\n\n| function | flat | flat %% | cum |\n|---|---:|---:|---:|\n")
	for _, f := range p.TopAlloc {
		w("| `%s` | %s | %.1f%% | %s |\n", f.Func, f.Flat, f.FlatPct, f.Cum)
	}
	w("\n</details>\n\n")
}
