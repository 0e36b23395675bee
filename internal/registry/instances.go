package registry

import (
	"bytes"
	"fmt"
	"maps"
	"time"
)

// Announced services are sets of instances (replicas). Each instance
// announces the service as itself (Update.Instance) with a lease it
// renews by announcing again; a graceful stop withdraws that instance
// only. The unit (service id) serves while at least one instance is
// there; an instance whose lease runs out has left as if it had
// withdrawn, and when that takes the last one the service is gone: its
// tools are no longer listed and calls to them fail at once
// (Snapshot.Gone). Once the last instance has left, the unit keeps its
// claims — its service id, topics and tool names — for the claim grace
// (WithClaimGrace), unless an operator released it (WithReleasedClaims):
// an instance announcing within it takes the unit's old place, and no
// announcement refused for those names is promoted meanwhile.

// applyAnnouncement applies an announcement or a withdrawal of one
// instance of an announced unit.
func (m *Merger) applyAnnouncement(u Update, label string) error {
	return m.applyAnnouncements([]Update{u}, []string{label})[0]
}

// ApplyBatch applies us in order, as Apply would one by one, and publishes
// one snapshot for all of them (Apply publishes one per update): a source
// that has many announcements at hand pays for one merge of the registry,
// not one per announcement. It returns what Apply would have for each.
func (m *Merger) ApplyBatch(us []Update) []error {
	errs := make([]error, len(us))
	var anns []Update
	var labels []string
	var at []int // index in us of each of anns
	flush := func() {
		if len(anns) == 0 {
			return
		}
		for i, err := range m.applyAnnouncements(anns, labels) {
			errs[at[i]] = err
		}
		anns, labels, at = anns[:0], labels[:0], at[:0]
	}
	for i, u := range us {
		if u.Origin != OriginAnnouncement {
			flush() // in order
			errs[i] = m.Apply(u)
			continue
		}
		anns, labels, at = append(anns, u), append(labels, labelOf(u)), append(at, i)
	}
	flush()
	return errs
}

// labelOf names u's unit in logs and errors.
func labelOf(u Update) string {
	label := string(u.Origin)
	if u.Unit != "" {
		label += " " + u.Unit
	} else if u.Name != "" {
		label += " " + u.Name
	}
	return label
}

// pendingAnn is one announcement of a batch on its way in.
type pendingAnn struct {
	i        int // in the batch
	u        Update
	label    string
	withdraw bool
	parsed   *part // nil for a withdrawal, or while it looks like a renewal
}

// applyAnnouncements applies announcements (of OriginAnnouncement) in
// order: the bounds checked and the documents parsed first, without the
// locks, then every one recorded and, when any changed what is served, one
// snapshot published.
func (m *Merger) applyAnnouncements(us []Update, labels []string) []error {
	errs := make([]error, len(us))
	todo := make([]pendingAnn, 0, len(us))
	for i, u := range us {
		pa := pendingAnn{i: i, u: u, label: labels[i], withdraw: u.Parsed == nil && len(bytes.TrimSpace(u.Doc)) == 0}
		if !pa.withdraw {
			err := m.admit(u, pa.label)
			if err == nil && u.Lease < 0 {
				err = fmt.Errorf("%w: %s: a negative lease (%v)", ErrRejected, pa.label, u.Lease)
			}
			if err != nil {
				m.reject(u.Origin, pa.label, err)
				errs[i] = err
				continue
			}
		}
		todo = append(todo, pa)
	}
	for pass := 0; len(todo) > 0; pass++ {
		// Parse what is not a document the unit has: its instance's
		// last or the one it serves — recorded, or announced earlier in
		// this batch. A renewal, another replica, is parsed once: a batch
		// of one service's renewals costs one parse, not one each.
		kept := todo[:0]
		seen := map[string][]byte{} // instance, or unit → its latest document earlier in todo
		for k, pa := range todo {
			inst, unit := unitInstance(pa.u), pa.u.Unit
			if pa.withdraw {
				delete(seen, inst)
				kept = append(kept, pa)
				continue
			}
			// The first of what recording gave back needs its parse.
			again := k == 0 && pass > 0
			if pa.parsed == nil && (again || pa.u.Parsed != nil || !m.hasDoc(pa.u, seen[inst], seen[unit])) {
				var err error
				if pa.parsed, err = m.parse(pa.u, pa.label); err != nil {
					m.reject(pa.u.Origin, pa.label, err)
					errs[pa.i] = err
					continue
				}
			}
			if pa.u.Parsed == nil {
				seen[inst], seen[unit] = pa.u.Doc, pa.u.Doc
			}
			kept = append(kept, pa)
		}
		todo = m.recordAnnouncements(kept, errs)
	}
	return errs
}

// recordAnnouncements records announcements parsed (or found the same
// document again) and publishes the snapshot they make, if they changed
// what is served. It stops at one that turns out to need parsing (its
// instance changed since it was compared) and returns it with those after
// it, for the caller to parse and record in turn.
func (m *Merger) recordAnnouncements(todo []pendingAnn, errs []error) []pendingAnn {
	if len(todo) == 0 {
		return nil
	}
	m.swapMu.Lock()
	defer m.swapMu.Unlock()
	m.mu.Lock()
	now := m.now()
	changed := false
	var left []string // request topics of instances that withdrew
	var rejected []pendingAnn
	var rest []pendingAnn
	for k, pa := range todo {
		// Each announcement at its time in the log: what ran out before
		// it is gone first, as it was for a gateway that read it live.
		at, ran := m.stepLocked(pa.u, now)
		changed = changed || ran
		// What was published by then has been read — no more: a reader
		// catching up has yet to read what came after, renewals among it.
		m.heardLocked(at)
		if pa.withdraw {
			c, l := m.withdrawLocked(pa.u, at)
			changed = changed || c
			left = append(left, l...)
			continue
		}
		done, c, err := m.putLocked(pa.u, pa.label, pa.parsed, at)
		if !done {
			rest = todo[k:]
			break
		}
		changed = changed || c
		if err != nil {
			errs[pa.i] = err
			rejected = append(rejected, pa)
		}
	}
	snap := m.publishLocked(now, changed)
	lost := m.takeLostLocked()
	m.mu.Unlock()
	m.tellLost(lost)
	for _, pa := range rejected {
		m.reject(pa.u.Origin, pa.label, errs[pa.i])
	}
	if snap != nil {
		by := todo[0].label
		if n := len(todo) - len(rest); n > 1 {
			by = fmt.Sprintf("%d announcements", n)
		}
		m.swapped(snap, by)
	}
	if m.instanceLeft != nil {
		for _, t := range left {
			m.instanceLeft(t)
		}
	}
	return rest
}

// unitInstance names u's instance among every announced one.
func unitInstance(u Update) string { return u.Unit + "\x00" + u.Instance }

// hasDoc reports whether u's document is one its unit has: that of its
// instance's last announcement, that the unit serves, or one of those
// announced earlier in the same batch (inst, unit). Recording it then
// needs no parse (putLocked); if it turns out to, it is parsed then.
func (m *Merger) hasDoc(u Update, inst, unit []byte) bool {
	if (inst != nil && bytes.Equal(inst, u.Doc)) || (unit != nil && bytes.Equal(unit, u.Doc)) {
		return true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.parts[OriginAnnouncement][u.Unit]
	if p == nil {
		return false
	}
	if in := p.instances[u.Instance]; in != nil && bytes.Equal(in.doc, u.Doc) {
		return true
	}
	return p.doc != nil && bytes.Equal(p.doc, u.Doc)
}

// msgTimeLocked is an announcement's time in the log: when it was made
// (At; zero: now), never later than now, and never earlier than the
// latest announcement applied — the log's clock only goes forward, so an
// announcer whose clock runs behind cannot date a claim or a lease back.
func (m *Merger) msgTimeLocked(u Update, now time.Time) time.Time {
	at := u.At
	if at.IsZero() || at.After(now) {
		at = now
	}
	if at.Before(m.logAt) {
		at = m.logAt
	}
	return at
}

// stepLocked moves the log's clock to u's time and commits what ran out
// by then (leases, claims); it returns that time and whether anything ran
// out.
func (m *Merger) stepLocked(u Update, now time.Time) (time.Time, bool) {
	at := m.msgTimeLocked(u, now)
	m.logAt = at
	return at, m.commitLocked(at, now)
}

// expiryOf is when an announcement's instance runs out, made at at (its
// time in the log): its lease, at most the maximum, from then; zero
// without a lease.
func (m *Merger) expiryOf(u Update, at time.Time) time.Time {
	if u.Lease <= 0 {
		return time.Time{}
	}
	return at.Add(min(u.Lease, m.maxLease))
}

// renewLocked makes in hold until expires (zero: until withdrawn), unless
// it holds longer already.
func (m *Merger) renewLocked(in *instance, expires time.Time) {
	if expires.IsZero() || expires.After(in.expires) || in.expires.IsZero() {
		in.expires = expires
	}
	in.told = false
	m.noteEventLocked(in.expires)
}

// noteEventLocked records that something may run out at at (zero:
// nothing): the next commit looks, and the timer is set when that is
// sooner than the view's next event. A renewal moves an expiry later and
// leaves both as they are: when they come, nothing has run out, and they
// are set for the next. Renewals so cost no walk over every instance.
func (m *Merger) noteEventLocked(at time.Time) {
	if at.IsZero() {
		return
	}
	if m.nextCommit.IsZero() || at.Before(m.nextCommit) {
		m.nextCommit = at
	}
	if m.viewNext.IsZero() || at.Before(m.viewNext) {
		m.viewNext = at
		m.scheduleLocked()
	}
}

// Renew applies u at once when it is a renewal: an announcement of an
// announced instance with the document the instance announced last,
// whose lease had not run out by u's time. It reports whether it was one;
// anything else is left for Apply. Renewing costs no new snapshot, so a
// source renews known instances as it reads their announcements.
func (m *Merger) Renew(u Update) bool {
	if u.Origin != OriginAnnouncement || u.Parsed != nil || u.Lease < 0 || len(bytes.TrimSpace(u.Doc)) == 0 {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.parts[OriginAnnouncement][u.Unit]
	if p == nil {
		return false
	}
	cur := p.instances[u.Instance]
	if cur == nil || !bytes.Equal(cur.doc, u.Doc) {
		return false
	}
	now := m.now()
	at := m.msgTimeLocked(u, now)
	if !cur.expires.IsZero() && (!at.Before(cur.expires) || !m.viewAt.Before(cur.expires)) {
		// It ran out before this renewal (it comes back as a new
		// instance), or the registry shows it run out: Apply publishes.
		return false
	}
	// What else ran out by at is committed with the next update: it
	// runs out at its own time whenever that is (commitLocked).
	m.logAt = at
	m.heardLocked(at) // what was published by then was read
	m.renewLocked(cur, m.expiryOf(u, at))
	return true
}

// Known reports whether u concerns an announced service the merger holds
// (announcing, or departed and holding its claims) in a way that costs no
// new claim: a withdrawal, an announcement of one of its instances, or a
// new instance announcing the document the service serves (another
// replica, a restart). Anything else — a new service id, a new instance
// with other descriptors — is new. Updates of other origins are known.
func (m *Merger) Known(u Update) bool {
	if u.Origin != OriginAnnouncement {
		return true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.parts[OriginAnnouncement][u.Unit]
	switch {
	case p == nil:
		return false
	case u.Parsed == nil && len(bytes.TrimSpace(u.Doc)) == 0:
		return true
	case p.instances[u.Instance] != nil:
		return true
	}
	return u.Parsed == nil && p.doc != nil && bytes.Equal(p.doc, u.Doc)
}

// putLocked records an instance's announcement, made at at (its time in
// the log): parsed, or when nil the same document as the instance's last
// (a renewal). done is false when a renewal finds the instance changed
// meanwhile (it must be parsed); changed says whether what is served may
// have changed. A refusal is returned, not reported (reject takes the
// lock).
func (m *Merger) putLocked(u Update, label string, parsed *part, at time.Time) (done, changed bool, err error) {
	expires := m.expiryOf(u, at)
	units := m.parts[OriginAnnouncement]
	p := units[u.Unit]
	var cur *instance
	if p != nil {
		cur = p.instances[u.Instance]
	}
	if u.Parsed == nil && cur != nil && bytes.Equal(cur.doc, u.Doc) {
		// A renewal (parsed or not): the instance holds until its new
		// expiry. What is served changes only if the registry showed it
		// run out.
		shown := cur.expires.IsZero() || m.viewAt.Before(cur.expires)
		m.renewLocked(cur, expires)
		return true, !shown, nil
	}
	if parsed == nil && p != nil && p.doc != nil && bytes.Equal(p.doc, u.Doc) {
		// An instance (new, back after its lease ran out, or changing
		// its descriptors) announcing those the service serves: nothing
		// to parse.
		parsed = &part{doc: p.doc, services: p.services, tools: p.tools}
	}
	if parsed == nil {
		return false, false, nil
	}
	if cur == nil && m.instanceCount >= m.maxAllInstances {
		return true, false, fmt.Errorf("%w: %s: %d instances of announced services are there already, the limit", ErrRejected, label, m.instanceCount)
	}
	if p == nil {
		if err := m.admitLocked(u, label, true); err != nil {
			return true, false, err
		}
		m.seq++
		p = &part{origin: OriginAnnouncement, unit: u.Unit, seq: m.seq, label: label, instances: map[string]*instance{}}
		units[u.Unit] = p
	} else if cur == nil && len(p.instances) >= m.maxInstances {
		return true, false, fmt.Errorf("%w: %s: %d instances announce the service already, the limit", ErrRejected, label, len(p.instances))
	}
	// A move to other topics is legitimate (a service reconfigured) but is
	// how a hijack would look (the key is all that names the announcer),
	// so it is logged loudly.
	for id, sv := range parsed.services {
		if was := p.services[id]; was != nil && (was.RequestTopic != sv.RequestTopic || was.ResponseTopic != sv.ResponseTopic) {
			m.log.Warn("an announcement moves a service to other topics", "service", id, "instance", u.Instance,
				"request_topic", sv.RequestTopic, "was", was.RequestTopic, "response_topic", sv.ResponseTopic, "response_was", was.ResponseTopic)
		}
	}
	m.seq++
	in := &instance{seq: m.seq, doc: parsed.doc, services: parsed.services, tools: parsed.tools, expires: expires}
	if cur != nil {
		in.seq = cur.seq // the same instance, announcing other descriptors
	}
	if m.takeover && (cur == nil || !bytes.Equal(cur.doc, parsed.doc)) {
		// With takeover on, the latest to announce holds contested names.
		p.seq = m.seq
	}
	if cur == nil {
		m.log.Info("announced instance", "service", u.Unit, "instance", u.Instance, "instances", len(p.instances)+1, "lease", u.Lease)
		m.instanceCount++
	}
	p.instances[u.Instance] = in
	m.settleLocked(p, at, false)
	m.noteEventLocked(expires)
	return true, true, nil
}

// withdrawLocked removes the instance u names, at at (the withdrawal's
// time in the log); the unit is served while others remain. A withdrawal
// without an instance (keyed by the service id alone, as an operator
// sends it) removes every instance: live ones come back with their next
// renewal, dead ones are gone at once. Either way the unit keeps its
// claims for the claim grace, from at. It reports whether anything was
// removed, and the request topics of what was.
func (m *Merger) withdrawLocked(u Update, at time.Time) (bool, []string) {
	p := m.parts[OriginAnnouncement][u.Unit]
	if p == nil || len(p.instances) == 0 || (u.Instance != "" && p.instances[u.Instance] == nil) {
		return false, nil
	}
	var left []string // the request topics of the instances that leave
	for k, in := range p.instances {
		if u.Instance == "" || k == u.Instance {
			for _, svc := range in.services {
				left = append(left, svc.RequestTopic)
			}
		}
	}
	if u.Instance == "" {
		m.instanceCount -= len(p.instances)
		clear(p.instances)
		m.log.Info("announced service withdrawn with every instance", "service", u.Unit)
	} else {
		delete(p.instances, u.Instance)
		m.instanceCount--
		m.log.Info("announced instance withdrawn", "service", u.Unit, "instance", u.Instance, "instances_left", len(p.instances))
	}
	m.settleLocked(p, at, false)
	return true, left
}

// settleLocked makes p serve its newest instance's descriptor, or, when
// none is left, records when the last left (at) and how (crashed); it
// keeps the descriptor it served, whose claims it holds.
func (m *Merger) settleLocked(p *part, at time.Time, crashed bool) {
	m.settleViewLocked(p, p, at, crashed, false)
}

// settleViewLocked is settleLocked of p, the unit orig or its copy in a
// view: orig remembers what was logged, so that each departure is logged
// once; historical says the departure is from the log's history (a
// gateway catching up), logged quietly.

func (m *Merger) settleViewLocked(p, orig *part, at time.Time, crashed, historical bool) {
	var newest *instance
	for _, in := range p.instances {
		if newest == nil || in.seq > newest.seq {
			newest = in
		}
	}
	if newest == nil {
		if p.leftAt.IsZero() {
			p.leftAt, p.crashed = at, crashed
			m.noteEventLocked(at.Add(m.claimGraceOf(p)))
			if orig.toldLeft {
				return
			}
			orig.toldLeft = true
			until := at.Add(m.claimGraceOf(p))
			switch {
			case !crashed:
				m.log.Info("every instance of an announced service withdrew", "service", p.unit, "claims_held_until", until)
			case historical:
				m.log.Info("every instance of an announced service had let its lease run out (the announcements' history)",
					"service", p.unit, "left", at, "claims_held_until", until)
			default:
				m.log.Warn("every instance of an announced service let its lease run out: its tools are no longer listed, calls to them fail",
					"service", p.unit, "claims_held_until", until)
			}
		}
		return
	}
	p.leftAt, p.crashed = time.Time{}, false
	orig.toldLeft = false
	p.doc, p.services, p.tools = newest.doc, newest.services, newest.tools
}

func (m *Merger) claimGraceOf(p *part) time.Duration {
	if m.released[p.unit] {
		return 0
	}
	return m.claimGrace
}

// The registry is a function of the announcements' log. Every decision —
// a lease running out, a claim lapsing, which of two claims wins, a
// release, a takeover — is taken at the time the log gives (each
// announcement's publish time, Update.At, never earlier than the one
// before) and in its order, never by this process's clock when the
// message happens to be applied: a gateway that read the log live and one
// that replays it at start-up hold the same units, instances, claims and
// winners (TestReplayMatchesLive). What the log commits (commitLocked)
// changes only with a message.
//
// The clock is read for one thing: what runs out after the log's last
// message, while no new one comes (a crash, a claim grace ending on a
// quiet topic). That is the view (viewLocked): the committed state as it
// stands at the later of the log's time and now — provided the
// announcements are known to be readable (Heard), else at the time they
// last were. The view is what is published, and it is never committed: a
// message then commits what ran out by its own time, so a late renewal
// dated before its lease ran out keeps the instance, as it would for a
// gateway that replayed the log.

// unheardAfter is how long the announcements may go without a sign that
// they are readable (Heard) before the view stops moving: the source
// gives one at least every second while the topic is reachable.
const unheardAfter = 3 * time.Second

// recentLoss is how old an expiry may be when it is found to be logged
// as a loss and told to WithInstanceLost: older ones are the log's
// history (a crashed instance's key stays on the topic), read by a
// gateway catching up, and are logged quietly.
const recentLoss = time.Minute

// Heard tells the merger that the source of origin o could read at time at
// (it asked the broker, or caught up): announcements made by then have
// been received. The view (what runs out after the log's last message)
// moves only while such signs are recent; after a silence longer than
// unheardAfter (the broker unreachable, renewals unheard) it stays where
// it was until the announcements are heard again. A message applied is
// such a sign too, for its own time in the log: a source catching up
// (reading what was published long ago) moves the view only as far as
// what it has read, and says Heard once it has caught up.
func (m *Merger) Heard(o Origin, at time.Time) {
	if o != OriginAnnouncement {
		return
	}
	m.swapMu.Lock()
	defer m.swapMu.Unlock()
	m.mu.Lock()
	m.heardLocked(at)
	snap := m.publishLocked(m.now(), false)
	lost := m.takeLostLocked()
	m.mu.Unlock()
	m.tellLost(lost)
	if snap != nil {
		m.swapped(snap, "leases")
	}
}

// heardLocked records a sign of readable announcements at time at.
func (m *Merger) heardLocked(at time.Time) {
	if at.After(m.heardAt) {
		m.heardAt = at
	}
}

// viewTimeLocked is the time the view is taken at, as of now: now, while
// the last sign of readable announcements is at most unheardAfter old;
// else that sign's time — for a gateway catching up, the time of what it
// has read. Never before the log's time nor the view published (the
// view never goes back).
func (m *Merger) viewTimeLocked(now time.Time) time.Time {
	v := now
	if !m.heardAt.IsZero() && now.Sub(m.heardAt) > unheardAfter {
		v = m.heardAt
	}
	if v.Before(m.logAt) {
		v = m.logAt
	}
	if v.Before(m.viewAt) {
		v = m.viewAt
	}
	return v
}

// viewDueLocked reports whether the view taken now differs from the one
// published: something in it runs out by then.
func (m *Merger) viewDueLocked(now time.Time) bool {
	return !m.viewNext.IsZero() && !m.viewTimeLocked(now).Before(m.viewNext)
}

// nextEventOf is when something of p runs out next: an instance's lease,
// or its claims once no instance is left; zero: nothing.
func (m *Merger) nextEventOf(p *part) time.Time {
	if len(p.instances) == 0 {
		return p.leftAt.Add(m.claimGraceOf(p))
	}
	var next time.Time
	for _, in := range p.instances {
		if !in.expires.IsZero() && (next.IsZero() || in.expires.Before(next)) {
			next = in.expires
		}
	}
	return next
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// runOutLocked removes from p the instances whose lease ran out by at and
// reports whether any did, and whether p's claims have lapsed by at. p is
// orig itself when the log commits it, or orig's copy in a view. A loss
// is logged and told once, when first found (by the view as it happens,
// or by a commit) — quietly when the expiry is the log's history.
func (m *Merger) runOutLocked(p, orig *part, at, now time.Time) (changed, lapsed bool) {
	commit := p == orig
	var last time.Time
	var lastIn *instance // the one to run out last: its descriptor is kept
	for inst, in := range p.instances {
		if in.expires.IsZero() || at.Before(in.expires) {
			continue
		}
		delete(p.instances, inst)
		if commit {
			m.instanceCount--
		}
		if lastIn == nil || in.expires.After(last) || (in.expires.Equal(last) && in.seq > lastIn.seq) {
			last, lastIn = in.expires, in
		}
		changed = true
		if in.told {
			continue
		}
		in.told = true
		if now.Sub(in.expires) > recentLoss {
			m.log.Info("an announced instance's lease had run out (the announcements' history)", "service", p.unit, "instance", inst, "expired", in.expires)
			continue
		}
		m.log.Warn("an announced instance's lease ran out", "service", p.unit, "instance", inst, "expired", in.expires)
		if m.instanceLost != nil && inst != "" {
			for _, svc := range in.services {
				m.lost = append(m.lost, lostInstance{svc.RequestTopic, inst})
			}
		}
	}
	if len(p.instances) == 0 && lastIn != nil {
		// As if they had run out one by one, each at its time: the
		// service is left with the descriptor of the last.
		p.doc, p.services, p.tools = lastIn.doc, lastIn.services, lastIn.tools
	}
	if !last.IsZero() {
		m.settleViewLocked(p, orig, last, true, now.Sub(last) > recentLoss)
	}
	return changed, len(p.instances) == 0 && !at.Before(p.leftAt.Add(m.claimGraceOf(p)))
}

// commitLocked commits what ran out by at, the log's time: instances whose
// lease ran out, units whose claims lapsed. It reports whether anything
// changed.
func (m *Merger) commitLocked(at, now time.Time) bool {
	if m.nextCommit.IsZero() || at.Before(m.nextCommit) {
		return false
	}
	changed := false
	var next time.Time
	units := m.parts[OriginAnnouncement]
	for id, p := range units {
		if ev := m.nextEventOf(p); ev.IsZero() || at.Before(ev) {
			next = earliest(next, ev)
			continue
		}
		c, lapsed := m.runOutLocked(p, p, at, now)
		changed = changed || c
		if lapsed {
			delete(units, id)
			changed = true
			switch {
			case m.released[id]:
				m.log.Warn("an announced service's claims are released by the operator; refused announcements may take its names", "service", id)
			case !p.toldLapsed: // else the view said so
				m.log.Info("an announced service's claims lapsed: no instance came back within the claim grace", "service", id, "left", p.leftAt)
			}
			continue
		}
		next = earliest(next, m.nextEventOf(p))
	}
	m.nextCommit = next
	return changed
}

// viewLocked is the announced units as they stand at v (viewTimeLocked):
// the committed ones, with what ran out between the log's time and v
// taken out of copies (nil when nothing did: the committed ones are the
// view); and when something of them runs out next.
func (m *Merger) viewLocked(v, now time.Time) (map[string]*part, time.Time) {
	units := m.parts[OriginAnnouncement]
	if m.nextCommit.IsZero() || v.Before(m.nextCommit) {
		return nil, m.nextCommit // nothing runs out by v
	}
	var view map[string]*part
	var next time.Time
	for id, p := range units {
		ev := m.nextEventOf(p)
		if ev.IsZero() || v.Before(ev) {
			next = earliest(next, ev)
			continue
		}
		if view == nil {
			view = maps.Clone(units)
		}
		q := *p
		q.instances = maps.Clone(p.instances)
		if _, lapsed := m.runOutLocked(&q, p, v, now); lapsed {
			if !p.toldLapsed {
				p.toldLapsed = true
				m.log.Info("an announced service's claims lapsed: no instance came back within the claim grace", "service", id, "left", q.leftAt)
			}
			delete(view, id)
			continue
		}
		view[id] = &q
		next = earliest(next, m.nextEventOf(&q))
	}
	if view == nil {
		m.nextCommit = next // found exactly: a renewal had moved it on
	}
	return view, next
}

// refreshViewLocked takes the view as of now and reports whether it may
// differ from the one published (else it only moves its time on).
func (m *Merger) refreshViewLocked(now time.Time) bool {
	v := m.viewTimeLocked(now)
	view, next := m.viewLocked(v, now)
	copied := view != nil
	if view == nil {
		view = m.parts[OriginAnnouncement]
	}
	same := !copied && !m.viewCopied
	m.view, m.viewAt, m.viewNext, m.viewCopied = view, v, next, copied
	return !same
}

// publishLocked publishes the view as of now, when the log changed what
// is held (changed) or the view differs from the one published, and sets
// the timer for its next change. It returns the snapshot published, nil
// when there was nothing new.
func (m *Merger) publishLocked(now time.Time, changed bool) *Snapshot {
	var snap *Snapshot
	if changed || m.viewDueLocked(now) {
		if differs := m.refreshViewLocked(now); changed || differs {
			snap = m.mergeLocked()
		}
	}
	m.scheduleLocked()
	return snap
}

// scheduleLocked sets the timer for the view's next change.
func (m *Merger) scheduleLocked() {
	if m.closed {
		return
	}
	stop := func() {
		if m.timer != nil {
			m.timer.Stop()
		}
		m.timerAt = time.Time{}
	}
	now := m.now()
	if m.viewNext.IsZero() || (!m.heardAt.IsZero() && now.Sub(m.heardAt) > unheardAfter) {
		stop() // nothing to run out, or unheard: the view waits for the next sign (Heard)
		return
	}
	if m.timerAt.Equal(m.viewNext) {
		return
	}
	m.timerAt = m.viewNext
	d := max(m.viewNext.Sub(now), 0)
	if m.manualTimer {
		return // a test calls tick
	}
	if m.timer == nil {
		m.timer = time.AfterFunc(d, m.tick)
		return
	}
	m.timer.Reset(d)
}

// tick publishes the view once something in it ran out.
func (m *Merger) tick() {
	m.swapMu.Lock()
	defer m.swapMu.Unlock()
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.timerAt = time.Time{}
	snap := m.publishLocked(m.now(), false)
	lost := m.takeLostLocked()
	m.mu.Unlock()
	m.tellLost(lost)
	if snap != nil {
		m.swapped(snap, "leases")
	}
}

// Close stops the merger's timer: leases and claims no longer run out.
func (m *Merger) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	if m.timer != nil {
		m.timer.Stop()
	}
}

// swapped logs a new snapshot and tells onSwap; swapMu is held.
func (m *Merger) swapped(snap *Snapshot, by string) {
	m.log.Info("registry updated", "by", by, "version", snap.Version,
		"tools", len(snap.Tools()), "tool_services", len(snap.Services()))
	if m.onSwap != nil {
		m.onSwap(snap)
	}
}
