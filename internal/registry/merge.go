package registry

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/toolgate/toolgate/wire"
)

// Conflict is a tool name or service id defined by two units; the one of
// higher precedence (Winner) is served, the other (Loser) is not.
type Conflict struct {
	// Kind is "tool", "tool-service" or "topic"; Name the tool name,
	// service id or topic.
	Kind   string `json:"kind"`
	Name   string `json:"name"`
	Winner string `json:"winner"`
	Loser  string `json:"loser"`
	// Reason is set when the loser was dropped for another conflict (a
	// tool whose service lost).
	Reason string `json:"reason,omitempty"`
}

func (c Conflict) String() string {
	s := fmt.Sprintf("%s %q: %s wins over %s", c.Kind, c.Name, c.Winner, c.Loser)
	if c.Reason != "" {
		s += " (" + c.Reason + ")"
	}
	return s
}

// SourceStatus is what readiness details say about one origin.
type SourceStatus struct {
	Origin Origin `json:"origin"`
	// Units is the number of units currently merged (announcing services,
	// for announcements).
	Units int `json:"units"`
	// Instances counts the instances announcing those services; Departed
	// the announced services none of whose instances is left, which hold
	// their claims for the claim grace (announcements only).
	Instances int `json:"instances,omitempty"`
	Departed  int `json:"departed,omitempty"`
	// Synced: the source delivered what existed when it started.
	Synced bool `json:"synced"`
	// Error is the source's connection problem, "" when it is fine.
	Error string `json:"error,omitempty"`
	// Rejected counts updates (or, for the config service, descriptors)
	// refused as invalid; LastRejection is the latest reason.
	Rejected      int64  `json:"rejected"`
	LastRejection string `json:"last_rejection,omitempty"`
	// Throttled counts, of those, the announcements of new services or
	// instances the source refused because more came at once than it
	// admits (announcements only).
	Throttled int64 `json:"throttled,omitempty"`
}

type part struct {
	origin Origin
	unit   string
	// seq orders announcements by arrival: a unit keeps the seq of its
	// first announcement until it withdraws, and the lower seq holds a
	// contested tool name or topic (the higher one, with takeover on).
	seq      uint64
	label    string // "announcement echo-service"
	doc      []byte // what it was parsed from, to skip repeats
	services map[string]*Service
	tools    map[string]*Tool
	sets     map[string]*ToolSet

	// Announcements only: the instances announcing the unit, by instance
	// id ("" for one announced without an instance). The unit serves the
	// descriptor of its newest instance (doc, services, tools above) while
	// it has one; once the last has left, it still holds its claims (its
	// service id, topics and tool names) until leftAt + the claim grace,
	// so that a restart keeps its place and no other announcement is
	// promoted in the gap.
	instances map[string]*instance
	leftAt    time.Time // when its last instance left; zero while it has one
	// crashed: its last instance left because its lease ran out, not by a
	// withdrawal; its tools then answer calls with ErrServiceGone.
	crashed bool
	// toldLeft, toldLapsed: its departure, the lapse of its claims, were
	// logged (by the view, before the log committed them).
	toldLeft, toldLapsed bool
}

// instance is one replica's announcement of a unit.
type instance struct {
	seq      uint64 // order of its first announcement
	doc      []byte
	services map[string]*Service
	tools    map[string]*Tool
	expires  time.Time // zero: until withdrawn
	told     bool      // its lease's running out was logged and told
}

// live reports whether the unit has an announcing instance.
func (p *part) live() bool { return p.origin != OriginAnnouncement || len(p.instances) > 0 }

type originState struct {
	enabled       bool
	synced        bool
	err           string
	rejected      int64
	lastRejection string
	throttled     int64
}

// Merger merges the units of every source into one immutable snapshot,
// file first, then the config service, then announcements. It is the Sink
// sources report to, and it is safe for concurrent use.
type Merger struct {
	reg    *Registry
	log    *slog.Logger
	onSwap func(*Snapshot)
	// instanceLost hears of each announced instance whose lease ran out
	// (nil: nobody); lost holds them until the lock is let go.
	instanceLost func(requestTopic, instance string)
	lost         []lostInstance
	// Bounds on what the bus may bring (announcements are untrusted).
	maxAnnounceBytes int
	maxAnnounced     int
	// Namespaces ("tenant/namespace") announced request and response
	// topics must be in; takeover: a later announcement takes contested
	// tool names and topics from an earlier one.
	requestNS, responseNS []string
	takeover              bool
	seq                   uint64
	// claimGrace is how long an announced unit whose instances have all
	// left keeps its claims; released lists the service ids that keep none
	// (an operator's hand-over). maxLease bounds an announcement's lease,
	// maxInstances the instances of one unit.
	claimGrace   time.Duration
	released     map[string]bool
	maxLease     time.Duration
	maxInstances int
	// maxAllInstances bounds the instances of every announced service
	// together; instanceCount counts them.
	maxAllInstances int
	instanceCount   int
	now             func() time.Time
	// instanceLeft is told the request topics of an announced instance
	// that withdrew (WithInstanceLeft).
	instanceLeft func(requestTopic string)
	timer        *time.Timer // the view's next change: a lease or a claim running out
	timerAt      time.Time   // when it is set for; zero when stopped
	manualTimer  bool        // tests: no timer is started (withManualTimer)
	closed       bool
	// heardAt: when the announcements were last known to be readable (a
	// message applied, at its time in the log, or the source's word,
	// Heard). The view moves past the log's last message only while that
	// is recent (unheardAfter): a gateway that cannot hear renewals does
	// not take their absence for deaths.
	heardAt time.Time
	// logAt is the announcements log's time: that of the latest message
	// applied. nextCommit is when something committed may run out next
	// (never later; zero: nothing). view holds the announced units as
	// published: the committed ones as they stood at viewAt, never before
	// logAt (instances.go); viewNext is when something of them runs out.
	logAt, nextCommit time.Time
	view              map[string]*part
	viewAt, viewNext  time.Time
	viewCopied        bool // view is not the committed units

	swapMu sync.Mutex // orders publishing and onSwap

	mu        sync.Mutex
	parts     map[Origin]map[string]*part
	states    map[Origin]*originState
	conflicts []Conflict
	// stateChanged is closed (and replaced) when an origin is enabled or
	// syncs: WaitSynced waits on it rather than polling.
	stateChanged chan struct{}
}

// Bounds on announcements, which come from the bus: one announcement's
// size, the number of services announced at once, the instances of one
// service, the instances of every service together and the longest lease
// an announcement may ask for.
const (
	DefaultMaxAnnouncementBytes  = wire.MaxAnnouncementBytes
	DefaultMaxAnnouncedServices  = 10000
	DefaultMaxInstances          = 1024
	DefaultMaxAnnouncedInstances = 20000
	DefaultMaxLease              = time.Hour
)

// DefaultClaimGrace is how long an announced service whose instances have
// all left (withdrawn, or their leases run out) keeps its tool names and
// topics: a restart or a rolling update within it keeps its place, and an
// announcement refused for claiming them is not promoted meanwhile.
const DefaultClaimGrace = 15 * time.Minute

// The namespaces announced topics must be in by default: those of the
// short "topic" form (wire.RequestTopic, wire.ResponseTopic).
var (
	DefaultAnnounceRequestNamespaces  = []string{wire.Tenant + "/" + wire.RequestNamespace}
	DefaultAnnounceResponseNamespaces = []string{wire.Tenant + "/" + wire.ResponseNamespace}
)

// MergerOption tunes a Merger.
type MergerOption func(*Merger)

// WithMaxAnnouncementBytes bounds the size of one announcement (default
// DefaultMaxAnnouncementBytes); a larger one is refused without being
// parsed.
func WithMaxAnnouncementBytes(n int) MergerOption {
	return func(m *Merger) {
		if n > 0 {
			m.maxAnnounceBytes = n
		}
	}
}

// WithMaxAnnouncedServices bounds the services announced at once (default
// DefaultMaxAnnouncedServices); an announcement of one more is refused
// until another service withdraws.
func WithMaxAnnouncedServices(n int) MergerOption {
	return func(m *Merger) {
		if n > 0 {
			m.maxAnnounced = n
		}
	}
}

// WithMaxAnnouncedInstances bounds the instances of every announced
// service together (default DefaultMaxAnnouncedInstances); an
// announcement of one more instance is refused until another leaves.
func WithMaxAnnouncedInstances(n int) MergerOption {
	return func(m *Merger) {
		if n > 0 {
			m.maxAllInstances = n
		}
	}
}

// WithInstanceLost has f told of each announced instance whose lease ran
// out, once for each request topic it served — not of one that withdrew:
// a stopping instance finishes its calls. f is called outside the
// merger's locks, on the goroutine that found it, and must not block.
func WithInstanceLost(f func(requestTopic, instance string)) MergerOption {
	return func(m *Merger) { m.instanceLost = f }
}

// lostInstance is an instance whose lease ran out, by a request topic it
// served.
type lostInstance struct{ topic, instance string }

// takeLostLocked takes the instances found lost since the last call.
func (m *Merger) takeLostLocked() []lostInstance {
	l := m.lost
	m.lost = nil
	return l
}

// tellLost tells instanceLost of lost, outside the merger's locks.
func (m *Merger) tellLost(lost []lostInstance) {
	if m.instanceLost == nil {
		return
	}
	for _, l := range lost {
		m.instanceLost(l.topic, l.instance)
	}
}

// WithAnnouncedNamespaces sets the namespaces ("tenant/namespace") an
// announced service's request and response topics must be in (defaults
// DefaultAnnounceRequestNamespaces, DefaultAnnounceResponseNamespaces). An
// announcement naming a topic elsewhere is refused.
func WithAnnouncedNamespaces(request, response []string) MergerOption {
	return func(m *Merger) {
		if len(request) > 0 {
			m.requestNS = request
		}
		if len(response) > 0 {
			m.responseNS = response
		}
	}
}

// WithAnnounceTakeover lets a later announcement take a tool name or a
// topic from the service that announced it first (by default the first
// keeps it, and the later one is a conflict).
func WithAnnounceTakeover(on bool) MergerOption {
	return func(m *Merger) { m.takeover = on }
}

// WithClaimGrace sets how long an announced service whose instances have
// all left keeps its claims (default DefaultClaimGrace; 0: none, the names
// are free at once).
func WithClaimGrace(d time.Duration) MergerOption {
	return func(m *Merger) {
		if d >= 0 {
			m.claimGrace = d
		}
	}
}

// WithReleasedClaims names announced services whose claims are not held
// once their instances have left: the operator's hand-over of their tool
// names and topics to the announcements they refused.
func WithReleasedClaims(ids ...string) MergerOption {
	return func(m *Merger) {
		for _, id := range ids {
			m.released[id] = true
		}
	}
}

// WithMaxLease bounds the lease an announcement may ask for (default
// DefaultMaxLease): a longer one is cut to it.
func WithMaxLease(d time.Duration) MergerOption {
	return func(m *Merger) {
		if d > 0 {
			m.maxLease = d
		}
	}
}

// WithInstanceLeft has f told the request topic of each service of an
// announced instance that withdraws (a graceful stop), after the snapshot
// without it is out; f must not block.
func WithInstanceLeft(f func(requestTopic string)) MergerOption {
	return func(m *Merger) { m.instanceLeft = f }
}

// withClock makes the merger read the time from now (tests).
func withClock(now func() time.Time) MergerOption { return func(m *Merger) { m.now = now } }

// withManualTimer: the merger starts no timer; the test calls tick.
func withManualTimer() MergerOption { return func(m *Merger) { m.manualTimer = true } }

// NewMerger returns a merger whose registry serves an empty snapshot until
// the first update. onSwap, if set, is called after each new snapshot is
// published, with the merger's lock not held, one snapshot at a time and in
// version order; it must not call Apply.
func NewMerger(log *slog.Logger, onSwap func(*Snapshot), opts ...MergerOption) *Merger {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Merger{log: log, onSwap: onSwap, parts: map[Origin]map[string]*part{}, states: map[Origin]*originState{},
		maxAnnounceBytes: DefaultMaxAnnouncementBytes, maxAnnounced: DefaultMaxAnnouncedServices,
		requestNS: DefaultAnnounceRequestNamespaces, responseNS: DefaultAnnounceResponseNamespaces,
		claimGrace: DefaultClaimGrace, released: map[string]bool{}, maxLease: DefaultMaxLease,
		maxInstances: DefaultMaxInstances, maxAllInstances: DefaultMaxAnnouncedInstances, now: time.Now, stateChanged: make(chan struct{})}
	for _, o := range opts {
		o(m)
	}
	for _, o := range Origins {
		m.parts[o] = map[string]*part{}
		m.states[o] = &originState{}
	}
	m.reg = New(newSnapshot("empty", map[string]*Tool{}, map[string]*Service{}))
	return m
}

// Registry is the registry the merger publishes to.
func (m *Merger) Registry() *Registry { return m.reg }

// Enable declares that a source of origin o runs: readiness details list
// it, and WaitSynced waits for it.
func (m *Merger) Enable(o Origin) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if st, ok := m.states[o]; ok && !st.enabled {
		st.enabled = true
		m.signalStateLocked()
	}
}

// signalStateLocked wakes WaitSynced's waiters; m.mu is held.
func (m *Merger) signalStateLocked() {
	close(m.stateChanged)
	m.stateChanged = make(chan struct{})
}

// State implements Sink.
func (m *Merger) State(o Origin, synced bool, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st, ok := m.states[o]
	if !ok {
		return
	}
	if !st.enabled || (synced && !st.synced) {
		st.enabled = true
		st.synced = st.synced || synced
		m.signalStateLocked()
	}
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if msg != st.err {
		if msg == "" {
			m.log.Info("registry source reachable", "source", o)
		} else {
			m.log.Warn("registry source not reachable; its descriptors stay as they were", "source", o, "err", msg)
		}
	}
	st.err = msg
}

// WaitSynced waits until every enabled origin has synced once, or d
// passes. It returns the origins that had not synced.
func (m *Merger) WaitSynced(d time.Duration) []Origin {
	timeout := time.NewTimer(d)
	defer timeout.Stop()
	for {
		var missing []Origin
		m.mu.Lock()
		for _, o := range Origins {
			if st := m.states[o]; st.enabled && !st.synced {
				missing = append(missing, o)
			}
		}
		changed := m.stateChanged
		m.mu.Unlock()
		if len(missing) == 0 {
			return nil
		}
		select {
		case <-changed:
		case <-timeout.C:
			return missing
		}
	}
}

// ErrRejected wraps the reason an update was refused.
var ErrRejected = errors.New("registry update rejected")

// Apply implements Sink.
func (m *Merger) Apply(u Update) error {
	if u.Origin.rank() >= len(Origins) {
		return fmt.Errorf("%w: unknown origin %q", ErrRejected, u.Origin)
	}
	label := labelOf(u)
	if u.Origin == OriginAnnouncement {
		return m.applyAnnouncement(u, label)
	}
	withdraw := u.Parsed == nil && len(bytes.TrimSpace(u.Doc)) == 0
	if !withdraw {
		if err := m.admit(u, label); err != nil {
			m.reject(u.Origin, label, err)
			return err
		}
	}
	if !withdraw && u.Parsed == nil {
		// The same document again (a re-announcement, a periodic re-read):
		// nothing to do, and its problems were reported the first time.
		m.mu.Lock()
		old := m.parts[u.Origin][u.Unit]
		same := old != nil && old.doc != nil && bytes.Equal(old.doc, u.Doc)
		m.mu.Unlock()
		if same {
			return nil
		}
	}
	var p *part
	if !withdraw {
		var err error
		p, err = m.parse(u, label)
		if err != nil {
			m.reject(u.Origin, label, err)
			return err
		}
	}

	// Snapshots are published, and onSwap told of them, one update at a
	// time in version order (parsing, above, is concurrent): an older
	// snapshot's onSwap never comes after a newer one's.
	m.swapMu.Lock()
	defer m.swapMu.Unlock()
	m.mu.Lock()
	units := m.parts[u.Origin]
	old := units[u.Unit]
	switch {
	case withdraw && old == nil:
		m.mu.Unlock()
		return nil
	case !withdraw && old != nil && old.doc != nil && bytes.Equal(old.doc, p.doc):
		m.mu.Unlock()
		return nil // the same again (a re-announcement, a repeated read)
	case withdraw:
		delete(units, u.Unit)
		m.log.Info("registry unit withdrawn", "source", label)
	default:
		if err := m.admitLocked(u, label, true); err != nil {
			m.mu.Unlock()
			m.reject(u.Origin, label, err)
			return err
		}
		m.seq++
		p.seq = m.seq
		units[u.Unit] = p
	}
	snap := m.mergeLocked()
	m.mu.Unlock()
	m.log.Info("registry updated", "by", label, "version", snap.Version,
		"tools", len(snap.Tools()), "tool_services", len(snap.Services()))
	if m.onSwap != nil {
		m.onSwap(snap)
	}
	return nil
}

// admit checks an announcement against the bounds before it is parsed.
func (m *Merger) admit(u Update, label string) error {
	if u.Origin != OriginAnnouncement {
		return nil
	}
	if len(u.Doc) > m.maxAnnounceBytes {
		return fmt.Errorf("%w: %s: the announcement has %d bytes, the limit is %d", ErrRejected, label, len(u.Doc), m.maxAnnounceBytes)
	}
	// The number of services is checked once it is recorded, at its time
	// in the log (what ran out by then gives its room up): a check here,
	// before the updates ahead of it in a batch, could differ.
	return nil
}

// admitLocked refuses a service beyond the number that may be announced.
// Services that have departed (no instance left, claims held) count, but
// give their room up, oldest first, to a new one; with evict, the one
// found is dropped.
func (m *Merger) admitLocked(u Update, label string, evict bool) error {
	if u.Origin != OriginAnnouncement {
		return nil
	}
	units := m.parts[u.Origin]
	if _, known := units[u.Unit]; known || len(units) < m.maxAnnounced {
		return nil
	}
	var oldest *part
	for _, p := range units {
		if !p.live() && (oldest == nil || p.leftAt.Before(oldest.leftAt) || (p.leftAt.Equal(oldest.leftAt) && p.seq < oldest.seq)) {
			oldest = p
		}
	}
	if oldest == nil {
		return fmt.Errorf("%w: %s: %d services are announced already, the limit", ErrRejected, label, len(units))
	}
	if evict {
		delete(units, oldest.unit)
		m.log.Warn("a departed service's claims dropped before their grace was over: as many services as may be announced are", "service", oldest.unit, "left", oldest.leftAt)
	}
	return nil
}

func (m *Merger) reject(o Origin, label string, err error) {
	m.mu.Lock()
	st := m.states[o]
	st.rejected++
	st.lastRejection = err.Error()
	m.mu.Unlock()
	m.log.Error("registry update rejected; what was there stays", "by", label, "err", err)
}

// Throttle counts n updates of origin o that their source refused before
// handing them over, err saying why (more new announcements at once than
// it admits): as rejected, and as throttled. They are not logged here: the
// source logs such refusals, one line for many. Messages were read: for
// announcements, a sign that they are readable (Heard).
func (m *Merger) Throttle(o Origin, n int, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st, ok := m.states[o]
	if !ok || n <= 0 {
		return
	}
	st.rejected += int64(n)
	st.throttled += int64(n)
	st.lastRejection = err.Error()
	if o == OriginAnnouncement {
		m.heardLocked(m.now())
	}
}

// parse validates an update by the rules of its origin: the file and an
// announcement must be valid as a whole; the config service's values are
// taken one by one, the invalid ones reported and left out.
func (m *Merger) parse(u Update, label string) (*part, error) {
	p := &part{origin: u.Origin, unit: u.Unit, label: label, doc: u.Doc}
	doc := u.Parsed
	if doc == nil {
		var err error
		if doc, err = decodeDocument(u.Doc); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrRejected, label, err)
		}
	} else {
		p.doc = nil // compared by content only when given as bytes
	}
	var probs []Problem
	p.services, p.tools, probs = parseSections(label, doc, m.log)
	if u.Origin != OriginAnnouncement { // an announcement speaks for its service alone
		var setProbs []Problem
		p.sets, setProbs = parseSets(unwrapConfig(doc))
		probs = append(probs, setProbs...)
	}
	switch u.Origin {
	case OriginConfigService:
		if len(probs) > 0 {
			le := &LoadError{Source: label, Problems: probs}
			m.mu.Lock()
			st := m.states[u.Origin]
			st.rejected += int64(len(probs))
			st.lastRejection = le.Error()
			m.mu.Unlock()
			m.log.Error("registry: invalid descriptors left out", "by", label, "err", le)
		}
	default:
		if len(probs) > 0 {
			return nil, fmt.Errorf("%w: %w", ErrRejected, &LoadError{Source: label, Problems: probs})
		}
	}
	if u.Origin == OriginAnnouncement {
		if err := checkAnnouncement(u.Unit, doc, p); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrRejected, label, err)
		}
		if err := m.checkAnnouncedTopics(p.services[u.Unit]); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrRejected, label, err)
		}
	}
	for _, sv := range p.services {
		sv.Origin = u.Origin
	}
	for _, t := range p.tools {
		t.Origin = u.Origin
	}
	for _, ts := range p.sets {
		ts.Origin = u.Origin
	}
	return p, nil
}

// checkAnnouncement: an announcement is scoped to one service, the one its
// message key names, and announces at least that service.
func checkAnnouncement(unit string, doc map[string]any, p *part) error {
	if unit == "" {
		return errors.New("an announcement needs its service id as the message key")
	}
	if extra := len(doc) - countKnown(doc); extra > 0 {
		var names []string
		for k := range doc {
			if k != "tool-service" && k != "tool" {
				names = append(names, k)
			}
		}
		sort.Strings(names)
		return fmt.Errorf("unknown section(s) %s: an announcement has only tool-service and tool", strings.Join(names, ", "))
	}
	if len(p.services) != 1 || p.services[unit] == nil {
		var ids []string
		for id := range p.services {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		return fmt.Errorf("an announcement defines exactly one tool service, the one its key names (%q); it defines %v", unit, ids)
	}
	return nil
}

// checkAnnouncedTopics: an announced service's request topic is in one of
// the request namespaces, its response topic in one of the response
// namespaces, and not a gateway's own reply topic (toolgate.<instance>).
// Anything else — the announcements topic, another tenant — is refused
// before the gateway publishes to it or subscribes to it.
func (m *Merger) checkAnnouncedTopics(sv *Service) error {
	if err := m.CheckRequestTopic(sv.RequestTopic); err != nil {
		return fmt.Errorf("its %w", err)
	}
	if ns := topicNamespace(sv.ResponseTopic); !slices.Contains(m.responseNS, ns) {
		return fmt.Errorf("its response topic %s is outside the namespaces announced response topics may be in (%s)",
			sv.ResponseTopic, strings.Join(m.responseNS, ", "))
	}
	if strings.HasPrefix(sv.ResponseTopic[strings.LastIndexByte(sv.ResponseTopic, '/')+1:], wire.ReplyTopicPrefix) {
		return fmt.Errorf("its response topic %s is named like a gateway's reply topic (%s…), which no service may claim", sv.ResponseTopic, wire.ReplyTopicPrefix)
	}
	return nil
}

// CheckRequestTopic checks a request topic named by what comes from the
// bus — an announcement, a durable operation's record (whose service a
// cancel is sent to) — against the allow-list of announced request
// topics: one of the request namespaces (WithAnnouncedNamespaces).
func (m *Merger) CheckRequestTopic(topic string) error {
	if ns := topicNamespace(topic); !slices.Contains(m.requestNS, ns) {
		return fmt.Errorf("request topic %s is outside the namespaces announced request topics may be in (%s)",
			topic, strings.Join(m.requestNS, ", "))
	}
	return nil
}

// topicNamespace is "tenant/namespace" of a full topic name.
func topicNamespace(topic string) string {
	_, rest, _ := strings.Cut(topic, "://")
	if i := strings.LastIndexByte(rest, '/'); i >= 0 {
		return rest[:i]
	}
	return ""
}

func countKnown(doc map[string]any) int {
	n := 0
	for _, k := range []string{"tool-service", "tool"} {
		if _, ok := doc[k]; ok {
			n++
		}
	}
	return n
}

// mergeLocked builds and publishes the snapshot of every unit, reporting
// conflicts that are new.
func (m *Merger) mergeLocked() *Snapshot {
	services := map[string]*Service{}
	tools := map[string]*Tool{}
	sets := map[string]*ToolSet{}
	setOwner := map[string]string{}  // set name → label
	gone := map[string]*Tool{}       // tools of announced services whose instances all crashed
	svcOwner := map[string]string{}  // service id → label
	toolOwner := map[string]string{} // tool name → label
	// request or response topic → the service id using it, and its label
	topicOwner := map[string]struct{ id, label string }{}
	var conflicts []Conflict
	var labels []string
	for _, o := range Origins {
		units := m.parts[o]
		if o == OriginAnnouncement && m.view != nil {
			units = m.view
		}
		keys := make([]string, 0, len(units))
		for k := range units {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		if o == OriginAnnouncement {
			// First come, first served (last, with takeover on): never
			// by key, which an announcer chooses.
			sort.SliceStable(keys, func(i, j int) bool {
				if m.takeover {
					return units[keys[i]].seq > units[keys[j]].seq
				}
				return units[keys[i]].seq < units[keys[j]].seq
			})
		}
		for _, k := range keys {
			p := units[k]
			live := p.live()
			if live {
				labels = append(labels, p.label)
			}
			// services of this unit that lost a conflict → the winner and
			// why their tools go with them
			lost := map[string][2]string{}
			for _, id := range sortedServiceIDs(p.services) {
				if w, taken := svcOwner[id]; taken {
					conflicts = append(conflicts, Conflict{Kind: "tool-service", Name: id, Winner: w, Loser: p.label})
					lost[id] = [2]string{w, fmt.Sprintf("its service %q is defined by the winner", id)}
					continue
				}
				sv := p.services[id]
				if o == OriginAnnouncement {
					// An announced service never shares a topic with
					// another service: its requests would reach that
					// one, or that one could answer its calls.
					if c, clash := topicClash(topicOwner, sv); clash {
						conflicts = append(conflicts, c.withLoser(id, p.label))
						lost[id] = [2]string{c.Winner, fmt.Sprintf("its service %q is on the winner's topic", id)}
						continue
					}
				}
				for _, t := range []string{sv.RequestTopic, sv.ResponseTopic} {
					if _, taken := topicOwner[t]; !taken {
						topicOwner[t] = struct{ id, label string }{id, p.label}
					}
				}
				svcOwner[id] = p.label
				if live {
					services[id] = sv
				}
			}
			for _, name := range sortedToolNames(p.tools) {
				t := p.tools[name]
				if l, ok := lost[t.Service.ID]; ok {
					conflicts = append(conflicts, Conflict{Kind: "tool", Name: name, Winner: l[0], Loser: p.label, Reason: l[1]})
					continue
				}
				if w, taken := toolOwner[name]; taken {
					conflicts = append(conflicts, Conflict{Kind: "tool", Name: name, Winner: w, Loser: p.label})
					continue
				}
				toolOwner[name] = p.label
				switch {
				case live:
					tools[name] = t
				case p.crashed:
					gone[name] = t
				}
			}
			for _, name := range sortedSetNames(p.sets) {
				if w, taken := setOwner[name]; taken {
					conflicts = append(conflicts, Conflict{Kind: "tool-set", Name: name, Winner: w, Loser: p.label})
					continue
				}
				setOwner[name] = p.label
				sets[name] = p.sets[name]
			}
		}
	}
	prev := map[string]bool{}
	for _, c := range m.conflicts {
		prev[c.String()] = true
	}
	for _, c := range conflicts {
		if !prev[c.String()] {
			m.log.Warn("registry conflict", "kind", c.Kind, "name", c.Name, "winner", c.Winner, "loser", c.Loser, "reason", c.Reason)
		}
	}
	m.conflicts = conflicts
	src := "empty"
	if len(labels) > 0 {
		src = strings.Join(labels, ", ")
	}
	snap := newSnapshot(src, tools, services).withSets(sets)
	snap.gone = gone
	m.reg.Swap(snap)
	return snap
}

// topicClash finds a topic of sv that another service id uses already.
func topicClash(owners map[string]struct{ id, label string }, sv *Service) (Conflict, bool) {
	for _, t := range []struct{ what, topic string }{{"request", sv.RequestTopic}, {"response", sv.ResponseTopic}} {
		if o, taken := owners[t.topic]; taken && o.id != sv.ID {
			return Conflict{Kind: "topic", Name: t.topic, Winner: o.label,
				Reason: fmt.Sprintf("its %s topic is the topic of service %q", t.what, o.id)}, true
		}
	}
	return Conflict{}, false
}

func (c Conflict) withLoser(id, label string) Conflict {
	c.Loser = label
	c.Reason = fmt.Sprintf("service %q: %s", id, c.Reason)
	return c
}

func sortedServiceIDs(m map[string]*Service) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func sortedSetNames(m map[string]*ToolSet) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func sortedToolNames(m map[string]*Tool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Conflicts returns the conflicts of the current snapshot.
func (m *Merger) Conflicts() []Conflict {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Conflict(nil), m.conflicts...)
}

// Status describes every enabled origin, in order of precedence.
func (m *Merger) Status() []SourceStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []SourceStatus
	for _, o := range Origins {
		st := m.states[o]
		units := m.parts[o]
		if o == OriginAnnouncement && m.view != nil {
			units = m.view // as published
		}
		if !st.enabled && len(units) == 0 {
			continue
		}
		ss := SourceStatus{Origin: o, Synced: st.synced, Error: st.err, Rejected: st.rejected, LastRejection: st.lastRejection,
			Throttled: st.throttled}
		for _, p := range units {
			switch {
			case p.live():
				ss.Units++
				ss.Instances += len(p.instances)
			default:
				ss.Departed++
			}
		}
		out = append(out, ss)
	}
	return out
}

// Rejected counts the updates (or config-service descriptors) of origin o
// refused as invalid.
func (m *Merger) Rejected(o Origin) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if st, ok := m.states[o]; ok {
		return st.rejected
	}
	return 0
}
