package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// mallocsMetric is the Go runtime's count of heap allocations as
// Prometheus' Go collector names it (the gateway's /metrics); the floor
// gateway (bench/cmd/floorgw) serves the same name.
const mallocsMetric = "go_memstats_mallocs_total"

// gcCyclesMetric counts completed garbage collections (the count of
// Prometheus' GC pause summary); optional.
const gcCyclesMetric = "go_gc_duration_seconds_count"

// publishedMetric and hedgedMetric are the gateway's counts of requests
// published to the bus and of those published again for a silence
// (hedges); the floor serves neither.
const (
	publishedMetric = "toolgate_bridge_published_total"
	hedgedMetric    = "toolgate_bridge_hedged_total"
)

// counters are a server's runtime counters at one moment; gcCycles,
// published and hedged are -1 when the server does not report them.
type counters struct {
	mallocs, gcCycles, published, hedged int64
}

// allocProbe reads a server's allocation counter from its /metrics.
type allocProbe struct {
	ctx        context.Context
	url        string
	hc         http.Client
	scrapeCost int64 // allocations one scrape adds between two readings
}

// newAllocProbe checks the counter is there and measures what a scrape
// itself allocates: the least of a few back-to-back differences, taken
// before any load.
func newAllocProbe(ctx context.Context, url string) (*allocProbe, error) {
	p := &allocProbe{ctx: ctx, url: url, hc: http.Client{Timeout: 10 * time.Second}}
	prev, err := p.read()
	if err != nil {
		return nil, err
	}
	p.scrapeCost = -1
	for range 3 {
		v, err := p.read()
		if err != nil {
			return nil, err
		}
		if d := v.mallocs - prev.mallocs; p.scrapeCost < 0 || d < p.scrapeCost {
			p.scrapeCost = d
		}
		prev = v
	}
	return p, nil
}

func (p *allocProbe) read() (counters, error) {
	req, err := http.NewRequestWithContext(p.ctx, http.MethodGet, p.url, nil)
	if err != nil {
		return counters{}, err
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		return counters{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return counters{}, fmt.Errorf("%s: HTTP %d", p.url, resp.StatusCode)
	}
	return parseCounters(bufio.NewScanner(resp.Body), p.url)
}

// parseCounters finds the counters' samples in Prometheus text format:
// the allocation counter must be there, the GC count may be absent.
func parseCounters(sc *bufio.Scanner, src string) (counters, error) {
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	c := counters{mallocs: -1, gcCycles: -1, published: -1, hedged: -1}
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if !ok || (name != mallocsMetric && name != gcCyclesMetric && name != publishedMetric && name != hedgedMetric) {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || f < 0 {
			return counters{}, fmt.Errorf("%s: %s %q: want a non-negative number", src, name, v)
		}
		switch name {
		case mallocsMetric:
			c.mallocs = int64(f)
		case gcCyclesMetric:
			c.gcCycles = int64(f)
		case publishedMetric:
			c.published = int64(f)
		default:
			c.hedged = int64(f)
		}
	}
	if err := sc.Err(); err != nil {
		return counters{}, err
	}
	if c.mallocs < 0 {
		return counters{}, fmt.Errorf("%s: no %s sample", src, mallocsMetric)
	}
	return c, nil
}
