// Package operations keeps durable operations on the message broker: a
// call started as an operation is recorded on a compacted topic keyed by
// operation id (the state table, which every gateway reads), its request
// names a persistent reply topic that every gateway consumes on one
// Key_Shared subscription, and the gateway that receives the reply records
// the outcome. Any gateway can then answer for the operation, to its owner
// only. What the gateways write on the broker is encrypted and signed with
// a key they share (Keys), and what they read there is checked like any
// input from the bus. docs/operations.md has the design.
//
// The package records facts (a tool service's error type and message, or a
// reason of the gateway's own); turning them into statuses is the core's.
// It knows nothing of tools, doors or HTTP.
package operations

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// State is where an operation is.
type State string

// The states of an operation.
const (
	Running   State = "running"
	Done      State = "done"   // answered: Output
	Failed    State = "failed" // ended with Failure
	Cancelled State = "cancelled"
)

// Reasons of failures the gateway itself records (Failure.Reason).
const (
	ReasonDeadline   = "DEADLINE_EXCEEDED"
	ReasonLost       = "REPLY_LOST"
	ReasonBadReply   = "BAD_REPLY"
	ReasonTooLarge   = "OUTPUT_TOO_LARGE"
	ReasonCancelled  = "CANCELLED"
	deadlineSlackMS  = 2
	maxRecordBytes   = 8 << 20
	maxOwnerBytes    = 1024
	maxToolNameBytes = 1024
	maxTopicBytes    = 1024
)

// Failure is how an operation failed: a tool service's error (Type and
// Message, as it sent them) or one of the gateway's reasons (Reason).
type Failure struct {
	Type    string `json:"type,omitempty"`
	Message string `json:"message,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// Record is one operation as the state table holds it.
type Record struct {
	ID         string   `json:"id"`
	Owner      string   `json:"owner"`
	Tool       string   `json:"tool"`
	State      State    `json:"state"`
	CreateMS   int64    `json:"create_ms"`
	DeadlineMS int64    `json:"deadline_ms"`
	EndMS      int64    `json:"end_ms,omitempty"`
	Output     string   `json:"output,omitempty"`
	Failure    *Failure `json:"error,omitempty"`
	// Gateway is the instance that wrote the record.
	Gateway string `json:"gateway,omitempty"`
	// Topic is the request topic of the tool's service: a gateway that
	// cancels or deletes the running operation tells the service on its
	// cancel topic (wire.CancelTopic), whichever gateway started it.
	Topic string `json:"topic,omitempty"`
	// Chunks is how many chunks of the answer are on the chunk topic
	// (Options.ChunkTopic), set when the operation ends: 0 when the answer
	// came in one message (Output is all there is), or when it ended
	// without chunks recorded.
	Chunks int `json:"chunks,omitempty"`
	// Version orders the records of one operation: VersionRunning for
	// its start, VersionEnded for its end (absent from records written
	// before it was: their state says). A table takes a record only over
	// one of a lower version: an operation's end is the first end the
	// state topic gives it, and an older record (a replay, a retry of a
	// write that had been taken) changes nothing.
	Version int `json:"v,omitempty"`
}

// The versions of a record (Record.Version).
const (
	VersionRunning = 1
	VersionEnded   = 2
)

// version is r's Version, or the one its state implies.
func (r Record) version() int {
	if r.State == Running {
		return VersionRunning
	}
	return VersionEnded
}

// sameOutcome reports whether a and b record the same end (or are both
// running): a record and a copy of it written again.
func sameOutcome(a, b Record) bool {
	if a.State != b.State || a.EndMS != b.EndMS || a.Output != b.Output || a.Chunks != b.Chunks {
		return false
	}
	if a.Failure == nil || b.Failure == nil {
		return a.Failure == b.Failure
	}
	return *a.Failure == *b.Failure
}

// Finished reports whether the record is in a final state.
func (r Record) Finished() bool { return r.State != Running }

// pastDeadline reports whether r is running at now past its deadline:
// its end, failed with ReasonDeadline, is for a gateway to write
// (deadlineEnd) — a reader never makes it up, so that every reader shows
// the one end the state topic gives the operation.
func (r Record) pastDeadline(now time.Time) bool {
	return r.State == Running && now.UnixMilli() > r.DeadlineMS+deadlineSlackMS
}

// deadlineFailure is the failure of an operation whose deadline passed
// with no reply.
func deadlineFailure() *Failure {
	return &Failure{Reason: ReasonDeadline, Message: "the tool did not answer before the operation's deadline"}
}

// expired reports whether r ended more than ttl before now.
func (r Record) expired(now time.Time, ttl time.Duration) bool {
	if r.State == Running {
		return false
	}
	return now.UnixMilli() > r.EndMS+ttl.Milliseconds()
}

var errBadRecord = errors.New("not an operation record")

// decodeRecord reads a state table message keyed key, checking what came
// from the bus: the shape, the id matching the key, the sizes.
func decodeRecord(key string, b []byte) (Record, error) {
	var r Record
	if len(b) > maxRecordBytes {
		return r, fmt.Errorf("%w: %d bytes", errBadRecord, len(b))
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("%w: %w", errBadRecord, err)
	}
	switch {
	case r.ID != key || !validID(key):
		return r, fmt.Errorf("%w: id %q under key %q", errBadRecord, r.ID, key)
	case r.Owner == "" || len(r.Owner) > maxOwnerBytes || len(r.Tool) > maxToolNameBytes || len(r.Topic) > maxTopicBytes:
		return r, fmt.Errorf("%w: owner or tool missing, or owner, tool or topic too long", errBadRecord)
	case r.Chunks < 0:
		return r, fmt.Errorf("%w: %d chunks", errBadRecord, r.Chunks)
	case r.Version != 0 && r.Version != r.version():
		return r, fmt.Errorf("%w: version %d of a %s record", errBadRecord, r.Version, r.State)
	}
	switch r.State {
	case Running, Done, Failed, Cancelled:
	default:
		return r, fmt.Errorf("%w: state %q", errBadRecord, r.State)
	}
	return r, nil
}

// idLen is the length of an id newID makes (Keys.newID); ids made
// before they carried a time and a tag are legacyIDLen long.
const (
	idLen       = 52
	legacyIDLen = 32
)

// validID: lower-case hex digits, as many as newID makes (or as the
// older form had).
func validID(id string) bool {
	if len(id) != idLen && len(id) != legacyIDLen {
		return false
	}
	for i := range len(id) {
		c := id[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
