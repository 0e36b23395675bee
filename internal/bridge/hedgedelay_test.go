package bridge

import (
	"testing"
	"time"
)

// The hedges' delay is the p99 of the first words' times plus a quarter,
// within HedgeAfter and RepublishAfter, and follows the last wordSamples
// calls, reckoned again every reckonEvery words.
func TestHedgeDelayLearnt(t *testing.T) {
	t.Parallel()
	b := &Bridge{opts: Options{HedgeAfter: 350 * time.Millisecond, RepublishAfter: 2 * time.Second}}
	var w receiptTopic
	check := func(what string, want time.Duration) {
		t.Helper()
		if got := b.hedgeAfter(&w); got != want {
			t.Fatalf("%s: %v, want %v", what, got, want)
		}
	}
	check("no word yet", 350*time.Millisecond)
	if got := b.hedgeAfter(nil); got != 350*time.Millisecond {
		t.Fatalf("unknown service: %v", got)
	}
	add := func(n int, d time.Duration) {
		for range n {
			w.sample(int64(d))
		}
	}
	// Fast replies, and a few calls slower than wire.ReceiptAfter whose
	// receipt came: the floor.
	add(126, 2*time.Millisecond)
	add(2, 260*time.Millisecond)
	check("fast calls", 350*time.Millisecond)
	// The service queues its calls: their first words come late.
	add(100, 600*time.Millisecond)
	check("queued calls", 750*time.Millisecond)
	// Later still: not past RepublishAfter.
	add(128, 5*time.Second)
	check("queued for long", 2*time.Second)
	// Fewer than reckonEvery new words: the delay reckoned last holds.
	add(reckonEvery-1, time.Millisecond)
	check("a few fast words", 2*time.Second)
	// The queue drains.
	add(wordSamples, time.Millisecond)
	check("drained", 350*time.Millisecond)
	// A floor above the ceiling wins.
	b.opts.RepublishAfter = 100 * time.Millisecond
	add(reckonEvery, time.Millisecond)
	check("floor above the ceiling", 350*time.Millisecond)
}

// The hedges' wheel files a call apart from its deadline, under one
// lock, and unfile takes it out of both; emptied ticks' buckets are kept
// for later ticks.
func TestHedgeWheel(t *testing.T) {
	t.Parallel()
	var d deadlines
	d.init()
	base := time.Unix(1_000_000, 0)
	k := tickOf(base)
	a, c := &Call{deadline: base.Add(time.Second), receipt: &receiptState{}}, &Call{receipt: &receiptState{}}
	d.fileAt(a, tickOf(a.deadline), k+1)
	d.fileAt(c, 0, k+1)
	if d.w[dlWheel].n != 1 || d.w[hedgeWheel].n != 2 || a.place(hedgeWheel).tick() != k+1 || c.place(hedgeWheel).pos != 1 {
		t.Fatalf("filed: %d deadlines, %d hedges, a at %v, c at %v", d.w[dlWheel].n, d.w[hedgeWheel].n, *a.place(hedgeWheel), *c.place(hedgeWheel))
	}
	d.unfile(a)
	if d.w[dlWheel].n != 0 || d.w[hedgeWheel].n != 1 || c.place(hedgeWheel).pos != 1 {
		t.Fatalf("after unfiling a: %d deadlines, %d hedges, c at %v", d.w[dlWheel].n, d.w[hedgeWheel].n, *c.place(hedgeWheel))
	}
	dl, hedges := d.due(k+1, nil, nil)
	if len(dl) != 0 || len(hedges) != 1 || hedges[0] != c || c.place(hedgeWheel).tick() != 0 || d.w[hedgeWheel].n != 0 {
		t.Fatalf("due: %v, %v", dl, hedges)
	}
	if len(d.spare) != 1 || len(d.w[dlWheel].ticks) != 1 {
		t.Fatalf("%d spare buckets kept, want 1 (the hedges' tick); %d deadlines' ticks, want 1 (a's, empty, till it comes)", len(d.spare), len(d.w[dlWheel].ticks))
	}
	d.fileAt(c, 0, k+5)
	if len(d.spare) != 0 || len(d.w[hedgeWheel].ticks[k+5].calls) != 1 {
		t.Fatalf("a spare bucket not reused: %d kept", len(d.spare))
	}
	if d.rest() {
		t.Fatal("the goroutine rests with a hedge filed")
	}
}
