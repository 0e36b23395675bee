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
		if d := v - prev; p.scrapeCost < 0 || d < p.scrapeCost {
			p.scrapeCost = d
		}
		prev = v
	}
	return p, nil
}

func (p *allocProbe) read() (int64, error) {
	req, err := http.NewRequestWithContext(p.ctx, http.MethodGet, p.url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s: HTTP %d", p.url, resp.StatusCode)
	}
	return parseMallocs(bufio.NewScanner(resp.Body), p.url)
}

// parseMallocs finds the counter's sample in Prometheus text format.
func parseMallocs(sc *bufio.Scanner, src string) (int64, error) {
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), mallocsMetric+" ")
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %s %q: %w", src, mallocsMetric, v, err)
		}
		return int64(f), nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s: no %s sample", src, mallocsMetric)
}
