package registry

import (
	"bytes"
	"fmt"
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
	for len(todo) > 0 {
		// Parse what is not the same document as its instance's last.
		kept := todo[:0]
		for _, pa := range todo {
			if !pa.withdraw && pa.parsed == nil && !m.sameDoc(pa.u) {
				var err error
				if pa.parsed, err = m.parse(pa.u, pa.label); err != nil {
					m.reject(pa.u.Origin, pa.label, err)
					errs[pa.i] = err
					continue
				}
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
	m.heardLocked(now) // messages were read
	changed := false
	var left []string // request topics of instances that withdrew
	var rejected []pendingAnn
	var rest []pendingAnn
	for k, pa := range todo {
		if pa.withdraw {
			c, l := m.withdrawLocked(pa.u, now)
			changed = changed || c
			left = append(left, l...)
			continue
		}
		done, c, err := m.putLocked(pa.u, pa.label, pa.parsed, now)
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
	var snap *Snapshot
	if changed {
		m.expireLocked(now) // an announcement read late may have run out already
		snap = m.mergeLocked()
	}
	m.scheduleLocked()
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

// sameDoc reports whether u's instance announced u's document last.
func (m *Merger) sameDoc(u Update) bool {
	if u.Parsed != nil {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.parts[OriginAnnouncement][u.Unit]
	if p == nil {
		return false
	}
	in := p.instances[u.Instance]
	return in != nil && bytes.Equal(in.doc, u.Doc)
}

// expiryOf is when an announcement's instance runs out, applied at now:
// its lease (at most the maximum) from when it was made, never later than
// now; zero without a lease.
func (m *Merger) expiryOf(u Update, now time.Time) time.Time {
	if u.Lease <= 0 {
		return time.Time{}
	}
	at := u.At
	if at.IsZero() || at.After(now) {
		at = now
	}
	return at.Add(min(u.Lease, m.maxLease))
}

// renewLocked makes in hold until expires (zero: until withdrawn), unless
// it holds longer already, and sets the timer when that is sooner than
// the timer's.
func (m *Merger) renewLocked(in *instance, expires time.Time) {
	if expires.IsZero() || expires.After(in.expires) || in.expires.IsZero() {
		in.expires = expires
	}
	// An expiry later than the timer's leaves the timer as it is: if it
	// fires for this instance's old expiry, tick finds nothing run out
	// and sets it again. Renewals so cost no walk over every instance.
	if !in.expires.IsZero() && (m.timerAt.IsZero() || in.expires.Before(m.timerAt)) {
		m.scheduleLocked()
	}
}

// Renew applies u at once when it is a renewal: an announcement of an
// announced instance with the document the instance announced last. It
// reports whether it was one; anything else is left for Apply. Renewing
// costs no new snapshot, so a source renews known instances as it reads
// their announcements, before any other update waiting to be applied.
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
	m.heardLocked(now) // a message was read
	m.renewLocked(cur, m.expiryOf(u, now))
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

// putLocked records an instance's announcement: parsed, or when nil the
// same document as the instance's last (a renewal). done is false when a
// renewal finds the instance changed meanwhile (it must be parsed);
// changed says whether what is served may have changed. A refusal is
// returned, not reported (reject takes the lock).
func (m *Merger) putLocked(u Update, label string, parsed *part, now time.Time) (done, changed bool, err error) {
	expires := m.expiryOf(u, now)
	units := m.parts[OriginAnnouncement]
	p := units[u.Unit]
	var cur *instance
	if p != nil {
		cur = p.instances[u.Instance]
	}
	if parsed == nil && (cur == nil || !bytes.Equal(cur.doc, u.Doc)) {
		return false, false, nil
	}
	if parsed == nil {
		m.renewLocked(cur, expires) // a renewal: the instance holds until its new expiry
		return true, false, nil
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
	m.settleLocked(p, now, false)
	return true, true, nil
}

// withdrawLocked removes the instance u names; the unit is served while
// others remain. A withdrawal without an instance (keyed by the service
// id alone, as an operator sends it) removes every instance: live ones
// come back with their next renewal, dead ones are gone at once. Either
// way the unit keeps its claims for the claim grace. It reports whether
// anything was removed, and the request topics of what was.
func (m *Merger) withdrawLocked(u Update, now time.Time) (bool, []string) {
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
	m.settleLocked(p, now, false)
	return true, left
}

// settleLocked makes p serve its newest instance's descriptor, or, when
// none is left, records when the last left (at) and how (crashed); it
// keeps the descriptor it served, whose claims it holds.
func (m *Merger) settleLocked(p *part, at time.Time, crashed bool) {
	var newest *instance
	for _, in := range p.instances {
		if newest == nil || in.seq > newest.seq {
			newest = in
		}
	}
	if newest == nil {
		if p.leftAt.IsZero() {
			p.leftAt, p.crashed = at, crashed
			if crashed {
				m.log.Warn("every instance of an announced service let its lease run out: its tools are no longer listed, calls to them fail",
					"service", p.unit, "claims_held_until", at.Add(m.claimGraceOf(p)))
			} else {
				m.log.Info("every instance of an announced service withdrew", "service", p.unit, "claims_held_until", at.Add(m.claimGraceOf(p)))
			}
		}
		return
	}
	p.leftAt, p.crashed = time.Time{}, false
	p.doc, p.services, p.tools = newest.doc, newest.services, newest.tools
}

func (m *Merger) claimGraceOf(p *part) time.Duration {
	if m.released[p.unit] {
		return 0
	}
	return m.claimGrace
}

// unheardAfter is how long the announcements may go without a sign that
// they are readable (Heard) before leases stop running out: the source
// gives one at least every second while the topic is reachable.
const unheardAfter = 3 * time.Second

// Heard tells the merger that the source of origin o could read at time at
// (it asked the broker, or caught up): announcements made by then have
// been received. Leases of announced instances run out only while such
// signs are recent; after a silence longer than unheardAfter (the broker
// unreachable, renewals unheard) every lease gets the time lost back. A
// message applied is such a sign too.
func (m *Merger) Heard(o Origin, at time.Time) {
	if o != OriginAnnouncement {
		return
	}
	m.swapMu.Lock()
	defer m.swapMu.Unlock()
	m.mu.Lock()
	m.heardLocked(at)
	var snap *Snapshot
	if m.expireLocked(m.now()) {
		snap = m.mergeLocked()
	}
	m.scheduleLocked()
	lost := m.takeLostLocked()
	m.mu.Unlock()
	m.tellLost(lost)
	if snap != nil {
		m.swapped(snap, "leases")
	}
}

// heardLocked records a sign of readable announcements at time at, giving
// every lease and claim back the time beyond unheardAfter since the last.
func (m *Merger) heardLocked(at time.Time) {
	if !m.heardAt.IsZero() {
		if lost := at.Sub(m.heardAt) - unheardAfter; lost > 0 {
			for _, p := range m.parts[OriginAnnouncement] {
				for _, in := range p.instances {
					if !in.expires.IsZero() {
						in.expires = in.expires.Add(lost)
					}
				}
				if !p.leftAt.IsZero() {
					p.leftAt = p.leftAt.Add(lost)
				}
			}
			m.log.Warn("announcements were not readable for a while: leases and claims get the time back", "unheard", lost+unheardAfter)
		}
	}
	if at.After(m.heardAt) {
		m.heardAt = at
	}
}

// confirmedLocked is the time up to which the announcements are known to
// have been readable, as of now: now, unless the last sign is older than
// unheardAfter.
func (m *Merger) confirmedLocked(now time.Time) time.Time {
	if m.heardAt.IsZero() || now.Sub(m.heardAt) <= unheardAfter {
		return now
	}
	return m.heardAt.Add(unheardAfter)
}

// expireLocked removes the instances whose lease ran out by now and the
// units whose claims lapsed; it reports whether anything changed.
func (m *Merger) expireLocked(now time.Time) bool {
	now = m.confirmedLocked(now)
	changed := false
	units := m.parts[OriginAnnouncement]
	for id, p := range units {
		var last time.Time
		for inst, in := range p.instances {
			if !in.expires.IsZero() && !now.Before(in.expires) {
				delete(p.instances, inst)
				m.instanceCount--
				m.log.Warn("an announced instance's lease ran out", "service", id, "instance", inst, "expired", in.expires)
				if m.instanceLost != nil && inst != "" {
					for _, svc := range in.services {
						m.lost = append(m.lost, lostInstance{svc.RequestTopic, inst})
					}
				}
				if in.expires.After(last) {
					last = in.expires
				}
				changed = true
			}
		}
		if !last.IsZero() {
			m.settleLocked(p, last, true)
		}
		if len(p.instances) == 0 && !now.Before(p.leftAt.Add(m.claimGraceOf(p))) {
			delete(units, id)
			if m.released[id] {
				m.log.Warn("an announced service's claims are released by the operator; refused announcements may take its names", "service", id)
			} else {
				m.log.Info("an announced service's claims lapsed: no instance came back within the claim grace", "service", id, "left", p.leftAt)
			}
			changed = true
		}
	}
	return changed
}

// scheduleLocked sets the timer for the next lease or claim to run out.
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
	if now := m.now(); !m.heardAt.IsZero() && now.Sub(m.heardAt) > unheardAfter {
		stop() // unheard: nothing runs out until the next sign (Heard)
		return
	}
	var next time.Time
	for _, p := range m.parts[OriginAnnouncement] {
		for _, in := range p.instances {
			if !in.expires.IsZero() && (next.IsZero() || in.expires.Before(next)) {
				next = in.expires
			}
		}
		if len(p.instances) == 0 {
			if end := p.leftAt.Add(m.claimGraceOf(p)); next.IsZero() || end.Before(next) {
				next = end
			}
		}
	}
	if next.IsZero() {
		stop()
		return
	}
	m.timerAt = next
	d := max(next.Sub(m.now()), 0)
	if m.timer == nil {
		m.timer = time.AfterFunc(d, m.tick)
		return
	}
	m.timer.Reset(d)
}

// tick expires what ran out and publishes the result.
func (m *Merger) tick() {
	m.swapMu.Lock()
	defer m.swapMu.Unlock()
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	var snap *Snapshot
	if m.expireLocked(m.now()) {
		snap = m.mergeLocked()
	}
	m.scheduleLocked()
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
