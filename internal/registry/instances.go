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
	withdraw := u.Parsed == nil && len(bytes.TrimSpace(u.Doc)) == 0
	if withdraw {
		return m.withdrawInstance(u, label)
	}
	if err := m.admit(u, label); err != nil {
		m.reject(u.Origin, label, err)
		return err
	}
	if u.Lease < 0 {
		err := fmt.Errorf("%w: %s: a negative lease (%v)", ErrRejected, label, u.Lease)
		m.reject(u.Origin, label, err)
		return err
	}
	var parsed *part // nil while the instance's document is the same again
	for {
		if parsed == nil && !m.sameDoc(u) {
			var err error
			if parsed, err = m.parse(u, label); err != nil {
				m.reject(u.Origin, label, err)
				return err
			}
		}
		done, err := m.putInstance(u, label, parsed)
		if done || err != nil {
			return err
		}
		// The instance changed between the comparison and now: parse.
	}
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

// putInstance records an instance's announcement: parsed, or when nil the
// same document as the instance's last (a renewal). It returns false when
// a renewal finds the instance changed meanwhile.
func (m *Merger) putInstance(u Update, label string, parsed *part) (bool, error) {
	m.swapMu.Lock()
	defer m.swapMu.Unlock()
	m.mu.Lock()
	now := m.now()
	m.heardLocked(now) // a message was read
	at := u.At
	if at.IsZero() || at.After(now) {
		at = now
	}
	var expires time.Time
	if u.Lease > 0 {
		expires = at.Add(min(u.Lease, m.maxLease))
	}
	units := m.parts[OriginAnnouncement]
	p := units[u.Unit]
	var cur *instance
	if p != nil {
		cur = p.instances[u.Instance]
	}
	if parsed == nil && (cur == nil || !bytes.Equal(cur.doc, u.Doc)) {
		m.mu.Unlock()
		return false, nil
	}
	if parsed == nil {
		// A renewal: the instance holds until its new expiry.
		if expires.IsZero() || expires.After(cur.expires) || cur.expires.IsZero() {
			cur.expires = expires
		}
		m.scheduleLocked()
		m.mu.Unlock()
		return true, nil
	}
	if p == nil {
		if err := m.admitLocked(u, label, true); err != nil {
			m.mu.Unlock()
			m.reject(u.Origin, label, err)
			return true, err
		}
		m.seq++
		p = &part{origin: OriginAnnouncement, unit: u.Unit, seq: m.seq, label: label, instances: map[string]*instance{}}
		units[u.Unit] = p
	} else if cur == nil && len(p.instances) >= m.maxInstances {
		m.mu.Unlock()
		err := fmt.Errorf("%w: %s: %d instances announce the service already, the limit", ErrRejected, label, len(p.instances))
		m.reject(u.Origin, label, err)
		return true, err
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
	}
	p.instances[u.Instance] = in
	m.settleLocked(p, now, false)
	m.expireLocked(now) // an announcement read late may have run out already
	snap := m.mergeLocked()
	m.scheduleLocked()
	m.mu.Unlock()
	m.swapped(snap, label)
	return true, nil
}

// withdrawInstance removes the instance u names; the unit is served while
// others remain. A withdrawal without an instance (keyed by the service
// id alone, as an operator sends it) removes every instance: live ones
// come back with their next renewal, dead ones are gone at once. Either
// way the unit keeps its claims for the claim grace.
func (m *Merger) withdrawInstance(u Update, label string) error {
	m.swapMu.Lock()
	defer m.swapMu.Unlock()
	m.mu.Lock()
	m.heardLocked(m.now()) // a message was read
	p := m.parts[OriginAnnouncement][u.Unit]
	if p == nil || len(p.instances) == 0 || (u.Instance != "" && p.instances[u.Instance] == nil) {
		m.mu.Unlock()
		return nil
	}
	var left []string // the request topics of the instances that leave
	for k, in := range p.instances {
		if u.Instance == "" || k == u.Instance {
			for _, svc := range in.services {
				left = append(left, svc.RequestTopic)
			}
		}
	}
	if m.instanceLeft != nil {
		defer func() {
			for _, t := range left {
				m.instanceLeft(t)
			}
		}()
	}
	if u.Instance == "" {
		clear(p.instances)
		m.log.Info("announced service withdrawn with every instance", "service", u.Unit)
	} else {
		delete(p.instances, u.Instance)
		m.log.Info("announced instance withdrawn", "service", u.Unit, "instance", u.Instance, "instances_left", len(p.instances))
	}
	now := m.now()
	m.settleLocked(p, now, false)
	m.expireLocked(now)
	snap := m.mergeLocked()
	m.scheduleLocked()
	m.mu.Unlock()
	m.swapped(snap, label)
	return nil
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
	m.mu.Unlock()
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
				m.log.Warn("an announced instance's lease ran out", "service", id, "instance", inst, "expired", in.expires)
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
	if now := m.now(); !m.heardAt.IsZero() && now.Sub(m.heardAt) > unheardAfter {
		// Unheard: nothing runs out until the next sign (Heard).
		if m.timer != nil {
			m.timer.Stop()
		}
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
		if m.timer != nil {
			m.timer.Stop()
		}
		return
	}
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
	m.mu.Unlock()
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
