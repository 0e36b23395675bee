package main

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseTurns(t *testing.T) {
	o := Options{Mode: "grpc", GRPCAddr: "default:1", HTTPAddr: "default:2", Topic: "default"}
	ts, err := parseTurns("direct=direct@echo-d, gw=grpc@127.0.0.1:9 ,fl=rest@127.0.0.1:8", o)
	if err != nil {
		t.Fatal(err)
	}
	got := []string{}
	for _, x := range ts {
		got = append(got, x.name+" "+x.opts.Mode+" "+x.opts.Topic+" "+x.opts.GRPCAddr+" "+x.opts.HTTPAddr)
	}
	want := []string{"direct direct echo-d default:1 default:2", "gw grpc default 127.0.0.1:9 default:2", "fl rest default default:1 127.0.0.1:8"}
	if !slices.Equal(got, want) {
		t.Fatalf("targets %q, want %q", got, want)
	}
	for _, bad := range []string{"", "gw=grpc@a", "gw=grpc,fl=grpc@b", "gw=grpc@a,gw=rest@b", "=grpc@a,fl=grpc@b", "gw=grpc-stream@a,fl=grpc@b", "gw=inflight@a,fl=grpc@b"} {
		if _, err := parseTurns(bad, o); err == nil {
			t.Errorf("parseTurns(%q) took it", bad)
		}
	}
}

// named is a Caller that notes which target each call went to.
type named struct {
	name string
	log  *[]string
	fail bool
}

func (n named) Call(context.Context, int) (int, error) {
	*n.log = append(*n.log, n.name)
	if n.fail {
		return 0, errors.New("refused")
	}
	return 1, nil
}

func (named) Close() {}

func TestRoundRobinTurns(t *testing.T) {
	var log []string
	rr := &roundRobin{
		callers: []Caller{named{"a", &log, false}, named{"b", &log, false}, named{"c", &log, true}},
		stats:   [][]workerStats{make([]workerStats, 3)}, round: make([]int, 1), burst: 2, skip: 1,
	}
	now := time.Now()
	rr.window(now.Add(-time.Hour), now.Add(time.Hour))
	for range 12 {
		_, _ = rr.Call(context.Background(), 0)
	}
	// Turns of two calls; rounds start at a, b, c in turn.
	if got, want := strings.Join(log, ""), "aabbccbbccaa"; got != want {
		t.Fatalf("call order %s, want %s", got, want)
	}
	// The first call of each turn is not counted: a and b have two turns,
	// one counted call each; c's counted calls failed.
	st := rr.stats[0]
	if len(st[0].lat) != 2 || len(st[1].lat) != 2 || len(st[2].lat) != 0 || st[2].errors != 2 {
		t.Fatalf("counted a %d, b %d, c %d (errors %d); want 2, 2, 0 (2)", len(st[0].lat), len(st[1].lat), len(st[2].lat), st[2].errors)
	}
	// Calls ending outside the window count for no target.
	rr.window(now.Add(time.Hour), now.Add(2*time.Hour))
	for range 6 {
		_, _ = rr.Call(context.Background(), 0)
	}
	if len(st[0].lat)+len(st[1].lat)+st[2].errors != 6 {
		t.Fatalf("calls outside the window were counted")
	}
}
