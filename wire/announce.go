package wire

import "strings"

// DefaultAnnounceTopic is the topic tool services announce themselves on
// and gateways read announcements from, unless both are configured with
// another: a persistent topic with compaction, whose latest message per key
// (AnnounceKey) counts.
const DefaultAnnounceTopic = "persistent://tg/config/tool-descriptors"

// MaxAnnouncementBytes bounds one announcement's payload: a gateway reads
// none larger, and a service refuses to send one (scripts/pulsar.sh also
// bounds the announcements topic at the broker).
const MaxAnnouncementBytes = 1 << 20

// ResultMCPContent is the value of a tool descriptor's "result" key for a
// tool whose reply is a JSON array of MCP content blocks (and that may
// send log records); "text", the default, is a reply of plain text.
const ResultMCPContent = "mcp-content"

// Properties of an announcement message (on the announcements topic, keyed
// by AnnounceKey) made by one instance of a service.
const (
	// PropInstance names the instance (replica) of the service that
	// announces, or withdraws: a tool service is served while any of its
	// instances is. An announcement without it announces the service as a
	// whole, until it is withdrawn (an operator's script does that). The
	// Go SDK also names its instance on every reply and receipt
	// (PropReceipt): a caller binds the call to the first that answers.
	PropInstance = "toolgate-instance"
	// PropLease is how long the announcement holds unless it is made again
	// (a Go duration, "10s"): an instance renews it well before it runs
	// out; one that crashed stops renewing, and gateways let it go.
	PropLease = "toolgate-lease"
	// PropWithdrawn marks a withdrawal (an empty message with the key of
	// what it withdraws); it keeps the empty message decodable by every
	// client library.
	PropWithdrawn = "toolgate-withdrawn"
)

// AnnounceKey is the message key of the announcements of one instance of
// service id: "<id>@<instance>", so that the topic's compaction keeps one
// per instance and a withdrawal removes that instance only. Without an
// instance the key is the service id.
func AnnounceKey(id, instance string) string {
	if instance == "" {
		return id
	}
	return id + "@" + instance
}

// SplitAnnounceKey is the service id and instance of an announcement's
// key, given the message's PropInstance (instance, possibly ""): a key
// that does not end in "@<instance>" names no instance of it (ok false).
// A withdrawal without the property (a bare tombstone) is taken as the
// instance after the key's last "@", when there is one.
func SplitAnnounceKey(key, instance string, withdrawal bool) (id, inst string, ok bool) {
	if instance != "" {
		id, found := strings.CutSuffix(key, "@"+instance)
		return id, instance, found && id != ""
	}
	if withdrawal {
		if i := strings.LastIndexByte(key, '@'); i > 0 && i < len(key)-1 {
			return key[:i], key[i+1:], true
		}
	}
	return key, "", key != ""
}
