package registry

import (
	"context"
	"time"
)

// Origin is a kind of source of descriptors.
type Origin string

// The origins, in order of precedence: when two of them define the same
// tool name or service id, the first one in this list wins.
const (
	// OriginFile is the --registry file.
	OriginFile Origin = "file"
	// OriginConfigService is TrustGraph's config service.
	OriginConfigService Origin = "config-service"
	// OriginAnnouncement is a tool service that announced itself.
	OriginAnnouncement Origin = "announcement"
)

// Origins lists every origin, highest precedence first.
var Origins = []Origin{OriginFile, OriginConfigService, OriginAnnouncement}

func (o Origin) rank() int {
	for i, x := range Origins {
		if x == o {
			return i
		}
	}
	return len(Origins)
}

// Update is what a source reports: the descriptors of one unit, in the
// layout of a registry file ({"tool-service": {...}, "tool": {...}}).
//
// A source is one unit (the file, a config-service workspace) or many
// (announcements: one unit per service id). An update replaces everything
// its unit defined before; an update without a document withdraws the unit.
type Update struct {
	Origin Origin
	// Unit names the unit within its origin: "" for a source that is one
	// unit, the service id for an announcement.
	Unit string
	// Name says where it came from, for logs ("examples/registry.yaml",
	// "workspace default", "persistent://tg/config/tool-descriptors").
	Name string
	// Doc is the document, JSON or YAML; empty withdraws the unit.
	Doc []byte
	// Parsed, when set, is the document already decoded; Doc is then not
	// read (except that a nil Parsed and an empty Doc withdraw the unit).
	Parsed map[string]any

	// Announcements only. Instance names the replica of the service that
	// announced ("" for an announcement made without one, as an
	// operator's script does): a unit is served while any of its
	// instances is, and a withdrawal without a document withdraws the
	// instance only. Lease, when set, is how long the announcement holds
	// without being made again (renewed): past At+Lease the instance is
	// gone, as if it had withdrawn after a crash. At is when it was made,
	// its time in the announcements' log (zero: now; counted never later
	// than now nor earlier than the announcement before it): leases,
	// claim graces and withdrawals are counted from it, not from when the
	// update happens to be applied.
	Instance string
	Lease    time.Duration
	At       time.Time
}

// Sink takes what sources report. *Merger is the Sink of the gateway.
type Sink interface {
	// Apply validates u and, when it is acceptable, merges it into a new
	// snapshot. A rejected update changes nothing and is reported in the
	// error, the log and the source's status.
	Apply(u Update) error
	// State records whether a source reaches what it reads (err == nil)
	// and, once synced is true, that it has delivered everything that
	// existed when it started.
	State(o Origin, synced bool, err error)
}

// Source is one place descriptors come from. Run reports to sink until
// ctx ends or the source fails for good.
type Source interface {
	Origin() Origin
	Run(ctx context.Context, sink Sink) error
}

// AnnouncementSink is a Sink that keeps announced services (*Merger). A
// source of announcements uses it, when its sink is one, so that a flood
// of new service ids neither costs a snapshot each nor holds up the
// renewals of the services already there: it renews known instances as
// it reads them, applies what it holds first, and the rest in batches
// at the pace it admits new ones, counting those it refuses.
type AnnouncementSink interface {
	Sink
	// ApplyBatch applies updates in order, publishing one snapshot.
	ApplyBatch(us []Update) []error
	// Renew applies u at once if it renews an announced instance with
	// the document it announced last, and reports whether it did.
	Renew(u Update) bool
	// Known reports whether u concerns a service held, at no new claim.
	Known(u Update) bool
	// Throttle counts n updates the source refused, err saying why.
	Throttle(o Origin, n int, err error)
}

var _ AnnouncementSink = (*Merger)(nil)
