package registry

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The registry is a function of the announcements' log: a merger that
// read a log live — its clock running between messages, the timer and
// the source's signs (Heard) moving the view, renewals taken by Renew —
// and one that is handed the whole log at the end (a gateway starting),
// in batches, serve the same tools and services, hold the same claims
// and report the same conflicts.

// modelMsg is one message of a generated log.
type modelMsg struct {
	unit, instance string
	doc            []byte // nil: a withdrawal
	lease          time.Duration
	at             time.Time // its publish time
	arrive         time.Time // when the live merger reads it (never before at)
	renewal        bool      // the same document again: the live merger tries Renew first
}

func (msg modelMsg) update() Update {
	return Update{Origin: OriginAnnouncement, Unit: msg.unit, Instance: msg.instance, Name: "model", Doc: msg.doc, Lease: msg.lease, At: msg.at}
}

func (msg modelMsg) String() string {
	what := "withdraw"
	switch {
	case msg.renewal:
		what = "renew"
	case msg.doc != nil:
		what = "announce " + string(msg.doc)
	}
	return fmt.Sprintf("+%v (read +%v) %s@%s lease %v: %s", msg.at.Sub(modelStart), msg.arrive.Sub(modelStart), msg.unit, msg.instance, msg.lease, what)
}

// modelConfig is how the gateways of one log are configured.
type modelConfig struct {
	takeover     bool
	released     []string
	grace        time.Duration
	maxServices  int // 0: the default
	maxInstances int
}

func (c modelConfig) options() []MergerOption {
	opts := []MergerOption{WithAnnounceTakeover(c.takeover), WithReleasedClaims(c.released...), WithClaimGrace(c.grace), withManualTimer()}
	if c.maxServices > 0 {
		opts = append(opts, WithMaxAnnouncedServices(c.maxServices))
	}
	if c.maxInstances > 0 {
		opts = append(opts, WithMaxAnnouncedInstances(c.maxInstances))
	}
	return opts
}

var modelStart = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

// modelDoc announces service id on a topic, with tools: ids share topics
// and tool names, so that claims conflict.
func modelDoc(id, topic string, tools []string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, `{"tool-service": {%q: {"request-queue": "non-persistent://tg/request/%s", "response-queue": "non-persistent://tg/response/%s"}}, "tool": {`, id, topic, topic)
	for i, tl := range tools {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, `%q: {"type": "tool-service", "service": %q}`, tl, id)
	}
	b.WriteString("}}")
	return []byte(b.String())
}

// genLog makes a log from seed: services announcing as instances (and
// without one, as an operator's script), renewing every third of their
// lease, re-announcing other descriptors, withdrawing an instance or the
// whole service, crashing (they stop renewing), coming back; with quiet
// spells longer than leases and claim graces, readers lagging behind and
// announcers' clocks behind the others'.
func genLog(seed uint64) (modelConfig, []modelMsg, time.Time) {
	r := rand.New(rand.NewPCG(seed, seed*0x9e3779b97f4a7c15+1))
	ids := []string{"a", "b", "c", "d"}[:2+r.IntN(3)]
	cfg := modelConfig{takeover: r.IntN(4) == 0, grace: []time.Duration{0, 5 * time.Second, 30 * time.Second, 15 * time.Minute}[r.IntN(4)]}
	if r.IntN(4) == 0 {
		cfg.released = []string{ids[r.IntN(len(ids))]}
	}
	if r.IntN(6) == 0 {
		cfg.maxServices = 1 + r.IntN(3)
	}
	if r.IntN(6) == 0 {
		cfg.maxInstances = 1 + r.IntN(4)
	}
	topics := []string{"t1", "t2", "t3"}
	toolNames := []string{"echo", "ping", "pong"}
	type inst struct {
		unit, instance string
		doc            []byte
		lease          time.Duration
		renewed        time.Time
		crashed        bool
	}
	var insts []*inst
	var msgs []modelMsg
	now, arrived := modelStart, modelStart
	emit := func(msg modelMsg) {
		msg.at = now
		if r.IntN(10) == 0 {
			msg.at = now.Add(-time.Duration(r.IntN(5000)) * time.Millisecond) // a clock behind
		}
		delay := time.Duration(r.IntN(50)) * time.Millisecond
		if r.IntN(8) == 0 {
			delay = time.Duration(r.IntN(4000)) * time.Millisecond // a reader lagging
		}
		arrived = maxTime(arrived, msg.at.Add(delay))
		msg.arrive = arrived
		msgs = append(msgs, msg)
	}
	newDoc := func(unit string) []byte {
		tools := []string{toolNames[r.IntN(len(toolNames))]}
		if r.IntN(3) == 0 {
			tools = append(tools, toolNames[r.IntN(len(toolNames))])
			slices.Sort(tools)
			tools = slices.Compact(tools)
		}
		return modelDoc(unit, topics[r.IntN(len(topics))], tools)
	}
	n := 4 + r.IntN(28)
	for len(msgs) < n {
		if r.IntN(12) == 0 {
			now = now.Add(time.Duration(10+r.IntN(1200)) * time.Second) // a quiet spell
		} else {
			now = now.Add(time.Duration(r.IntN(3000)) * time.Millisecond)
		}
		// Renewals due.
		for _, in := range insts {
			if in.lease > 0 && !in.crashed && now.Sub(in.renewed) >= in.lease/3 && r.IntN(6) != 0 {
				in.renewed = now
				emit(modelMsg{unit: in.unit, instance: in.instance, doc: in.doc, lease: in.lease, renewal: true})
			}
		}
		pick := func() *inst {
			if len(insts) == 0 {
				return nil
			}
			return insts[r.IntN(len(insts))]
		}
		switch k := r.IntN(10); {
		case k < 3: // a new instance (or service)
			in := &inst{unit: ids[r.IntN(len(ids))], instance: fmt.Sprint(r.IntN(3)), lease: 8 * time.Second, renewed: now}
			if r.IntN(8) == 0 {
				in.instance, in.lease = "", 0 // an operator's script
			}
			in.doc = newDoc(in.unit)
			if old := slices.IndexFunc(insts, func(o *inst) bool { return o.unit == in.unit && o.instance == in.instance }); old >= 0 {
				insts = slices.Delete(insts, old, old+1)
			}
			if r.IntN(3) == 0 { // the same descriptors as another of its instances
				for _, o := range insts {
					if o.unit == in.unit {
						in.doc = o.doc
					}
				}
			}
			insts = append(insts, in)
			emit(modelMsg{unit: in.unit, instance: in.instance, doc: in.doc, lease: in.lease})
		case k == 3: // other descriptors
			if in := pick(); in != nil {
				in.doc, in.renewed = newDoc(in.unit), now
				emit(modelMsg{unit: in.unit, instance: in.instance, doc: in.doc, lease: in.lease})
			}
		case k == 4: // a graceful stop
			if in := pick(); in != nil {
				insts = slices.DeleteFunc(insts, func(o *inst) bool { return o == in })
				emit(modelMsg{unit: in.unit, instance: in.instance})
			}
		case k == 5: // the operator withdraws the service as a whole
			unit := ids[r.IntN(len(ids))]
			insts = slices.DeleteFunc(insts, func(o *inst) bool { return o.unit == unit })
			emit(modelMsg{unit: unit})
		case k < 8: // a crash
			if in := pick(); in != nil {
				in.crashed = true
			}
		case k == 8: // a crashed one comes back (a frozen process resumes)
			if in := pick(); in != nil && in.crashed {
				in.crashed, in.renewed = false, now
				emit(modelMsg{unit: in.unit, instance: in.instance, doc: in.doc, lease: in.lease, renewal: true})
			}
		default: // a malformed announcement
			emit(modelMsg{unit: ids[r.IntN(len(ids))], instance: "9", doc: []byte(`{"tool": {}}`), lease: 8 * time.Second})
		}
	}
	end := arrived.Add(time.Duration(r.IntN(40000)) * time.Millisecond)
	if r.IntN(4) == 0 {
		end = end.Add(time.Duration(r.IntN(1200)) * time.Second)
	}
	return cfg, msgs, end
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// runLive applies msgs as a gateway reading them live: its clock runs to
// each message's arrival, the source says it heard every second and the
// timer fires in between; at end, it has heard.
func runLive(cfg modelConfig, msgs []modelMsg, end time.Time) *Merger {
	c := &clock{now: modelStart}
	m := NewMerger(nil, nil, append(cfg.options(), withClock(c.Now))...)
	defer m.Close()
	observe := func(until time.Time) {
		for i := 0; i < 4 && c.Now().Add(time.Second).Before(until); i++ {
			c.add(time.Second)
			m.Heard(OriginAnnouncement, c.Now())
			m.tick()
		}
		c.mu.Lock()
		c.now = until
		c.mu.Unlock()
		m.tick()
	}
	for _, msg := range msgs {
		observe(msg.arrive)
		u := msg.update()
		if msg.renewal && m.Renew(u) {
			continue
		}
		_ = m.Apply(u) // refusals are part of the log
	}
	observe(end)
	m.Heard(OriginAnnouncement, end)
	m.tick()
	return m
}

// runReplay hands msgs to a gateway started at end, in batches of sizes
// drawn from seed (one at a time for some).
func runReplay(cfg modelConfig, msgs []modelMsg, end time.Time, seed uint64) *Merger {
	m := NewMerger(nil, nil, append(cfg.options(), withClock(func() time.Time { return end }))...)
	defer m.Close()
	r := rand.New(rand.NewPCG(seed, 7))
	for i := 0; i < len(msgs); {
		n := 1 + r.IntN(len(msgs))
		if r.IntN(4) == 0 {
			n = 1
		}
		n = min(n, len(msgs)-i)
		us := make([]Update, n)
		for k := range us {
			us[k] = msgs[i+k].update()
		}
		m.ApplyBatch(us)
		i += n
	}
	m.Heard(OriginAnnouncement, end)
	return m
}

// picture is what a merger serves and holds: tools and their services,
// services, the tools gone, conflicts (who won), and the status's counts.
func picture(m *Merger) string {
	snap := m.Registry().Snapshot()
	var lines []string
	for _, tl := range snap.Tools() {
		lines = append(lines, fmt.Sprintf("tool %s: %s on %s", tl.Name, tl.Service.ID, tl.Service.RequestTopic))
	}
	for _, sv := range snap.Services() {
		lines = append(lines, fmt.Sprintf("service %s: %s %s", sv.ID, sv.RequestTopic, sv.ResponseTopic))
	}
	for _, name := range []string{"echo", "ping", "pong"} {
		if tl, ok := snap.Gone(name); ok {
			lines = append(lines, fmt.Sprintf("gone %s: %s", name, tl.Service.ID))
		}
	}
	for _, c := range m.Conflicts() {
		lines = append(lines, "conflict "+c.String())
	}
	for _, st := range m.Status() {
		lines = append(lines, fmt.Sprintf("status %s: %d units, %d instances, %d departed", st.Origin, st.Units, st.Instances, st.Departed))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// modelDiff is "" when the live and the replaying merger agree on msgs.
func modelDiff(cfg modelConfig, msgs []modelMsg, end time.Time, seed uint64) string {
	live, replay := picture(runLive(cfg, msgs, end)), picture(runReplay(cfg, msgs, end, seed))
	if live == replay {
		return ""
	}
	return "live:\n" + live + "\nreplayed:\n" + replay
}

// shrink drops messages from msgs while the mergers still disagree.
func shrink(cfg modelConfig, msgs []modelMsg, end time.Time, seed uint64) []modelMsg {
	for changed := true; changed; {
		changed = false
		for i := 0; i < len(msgs); i++ {
			fewer := slices.Delete(slices.Clone(msgs), i, i+1)
			if modelDiff(cfg, fewer, end, seed) != "" {
				msgs, changed = fewer, true
				i--
			}
		}
	}
	return msgs
}

// TestReplayMatchesLive: 10,000 generated logs, each applied live and
// replayed, give the same registry. The logs are shared out among a
// worker per CPU; the first that differs (by seed) is reported.
func TestReplayMatchesLive(t *testing.T) {
	const logs = 10000
	var next, msgsSeen atomic.Int64
	failed := atomic.Uint64{} // the smallest seed found failing; 0: none
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for {
				seed := uint64(next.Add(1))
				if seed > logs || (failed.Load() != 0 && seed > failed.Load()) {
					return
				}
				cfg, msgs, end := genLog(seed)
				msgsSeen.Add(int64(len(msgs)))
				if modelDiff(cfg, msgs, end, seed) == "" {
					continue
				}
				lower(&failed, seed)
			}
		})
	}
	wg.Wait()
	if seed := failed.Load(); seed != 0 {
		cfg, msgs, end := genLog(seed)
		small := shrink(cfg, msgs, end, seed)
		var b strings.Builder
		for _, msg := range small {
			b.WriteString("  " + msg.String() + "\n")
		}
		t.Fatalf("seed %d (config %+v, read until +%v): replaying the log gives another registry than reading it live.\nA smallest log that does (%d of %d messages):\n%s%s",
			seed, cfg, end.Sub(modelStart), len(small), len(msgs), b.String(), modelDiff(cfg, small, end, seed))
	}
	t.Logf("%d logs, %d messages: replayed as read live", logs, msgsSeen.Load())
}

// lower sets v to seed unless it holds a smaller one (0: none).
func lower(v *atomic.Uint64, seed uint64) {
	for {
		old := v.Load()
		if (old != 0 && old <= seed) || v.CompareAndSwap(old, seed) {
			return
		}
	}
}

// logRecorder keeps the messages logged, by level.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Level.String()+" "+r.Message)
	return nil
}
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecorder) WithGroup(string) slog.Handler      { return l }

func (l *logRecorder) matching(s string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, m := range l.msgs {
		if strings.Contains(m, s) {
			out = append(out, m)
		}
	}
	return out
}

// A gateway started after 20 minutes of history — a holder of echo
// renewing all along, another service id that announced echo (refused),
// renewed and withdrew 2 minutes before — serves echo from its holder,
// as the gateways that ran throughout do; it logs no lease running out
// (every renewal is in the log), and replaying the renewals publishes a
// snapshot per batch, not per message.
func TestReplayOfRenewals(t *testing.T) {
	lease := 8 * time.Second
	var log []Update
	holder, claimant := announcement("echo-service", "echo"), announcementOn("aaa-evil", "echo", "non-persistent://tg/request/evil", "non-persistent://tg/response/evil")
	for at := modelStart; at.Before(modelStart.Add(20 * time.Minute)); at = at.Add(lease / 3) {
		log = append(log, Update{Origin: OriginAnnouncement, Unit: "echo-service", Instance: "h1", Lease: lease, At: at, Doc: holder})
		switch since := at.Sub(modelStart); {
		case since >= time.Minute && since < 18*time.Minute:
			log = append(log, Update{Origin: OriginAnnouncement, Unit: "aaa-evil", Instance: "e1", Lease: lease, At: at.Add(time.Millisecond), Doc: claimant})
		case since >= 18*time.Minute && since < 18*time.Minute+lease/3:
			log = append(log, Update{Origin: OriginAnnouncement, Unit: "aaa-evil", Instance: "e1", At: at.Add(time.Millisecond)})
		}
	}
	start := log[len(log)-1].At.Add(time.Second)
	for _, batched := range []bool{true, false} {
		rec := &logRecorder{}
		swaps := 0
		m := NewMerger(slog.New(rec), func(*Snapshot) { swaps++ }, withClock(func() time.Time { return start }))
		batches := 0
		if batched { // as the source catches up, in smaller batches
			for i := 0; i < len(log); i += 100 {
				m.ApplyBatch(log[i:min(i+100, len(log))])
				batches++
			}
		} else {
			for _, u := range log {
				_ = m.Apply(u)
			}
		}
		m.Heard(OriginAnnouncement, start)
		m.Close()
		if got := served(m, "echo"); got != "echo-service" {
			t.Errorf("batched %v: echo served by %q after replaying the log, want echo-service (its holder throughout)", batched, got)
		}
		if c := m.Conflicts(); len(c) != 1 || c[0].Winner != "announcement echo-service" {
			t.Errorf("batched %v: conflicts %v; want the claimant's, refused within its claim grace", batched, c)
		}
		if ran := rec.matching("lease ran out"); len(ran) > 0 {
			t.Errorf("batched %v: replaying %d messages logged %d leases running out, every one renewed in the log: %q", batched, len(log), len(ran), ran[:min(3, len(ran))])
		}
		// Applied one by one: a snapshot per change of what is served
		// (the holder, the claimant, its withdrawal), none per renewal.
		if want := max(batches, 3); swaps > want {
			t.Errorf("batched %v: replaying %d messages published %d snapshots, want at most %d", batched, len(log), swaps, want)
		}
	}
}
