package operations

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/wire"
)

// MinKeyBytes is the shortest key Keys take.
const MinKeyBytes = 32

// propMAC carries a message's authentication code on the operations
// topics: HMAC-SHA256, base64 (standard, padded).
const propMAC = "toolgate-mac"

// Keys authenticate what the gateways of a deployment write on the
// operations topics (records of the state table, tombstones, chunks): the
// gateways share them, and a message without a code made with one of them
// is refused. The first key signs and verifies; the others only verify,
// so that a key can be replaced without a gap (docs/operations.md).
type Keys struct {
	keys [][]byte
}

// NewKeys returns Keys signing with sign and accepting also what verify
// signed; each key is at least MinKeyBytes long.
func NewKeys(sign []byte, verify ...[]byte) (*Keys, error) {
	k := &Keys{}
	for i, key := range append([][]byte{sign}, verify...) {
		if len(key) < MinKeyBytes {
			return nil, fmt.Errorf("operations key %d is %d bytes; want at least %d", i+1, len(key), MinKeyBytes)
		}
		k.keys = append(k.keys, append([]byte(nil), key...))
	}
	return k, nil
}

// ReadKeyFile reads a key from path: its content, surrounding white space
// trimmed (e.g. the output of `openssl rand -base64 48`).
func ReadKeyFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	key := []byte(strings.TrimSpace(string(b)))
	if len(key) < MinKeyBytes {
		return nil, fmt.Errorf("%s holds %d bytes; an operations key is at least %d (e.g. openssl rand -base64 48)", path, len(key), MinKeyBytes)
	}
	return key, nil
}

// The kinds of messages signed: what a code is for is part of what it
// covers, so that no message passes for another.
const (
	kindRecord = "record" // a record or tombstone of the state table
	kindChunk  = "chunk"  // a chunk of an answer on the chunk topic
)

// Why a message from the operations topics was refused (the reason label
// of toolgate_operations_records_refused_total).
const (
	RefusedUnsigned  = "unsigned"          // no code
	RefusedSignature = "bad_signature"     // a code none of the keys made
	RefusedMalformed = "malformed"         // signed, yet not a valid record or chunk
	RefusedTopic     = "topic_not_allowed" // names a topic outside the allow-list
)

// refusedReasons lists the reasons, in the order Stats reports them.
var refusedReasons = [...]string{RefusedUnsigned, RefusedSignature, RefusedMalformed, RefusedTopic}

var (
	errUnsigned     = errors.New("the message carries no authentication code")
	errBadSignature = errors.New("the message's authentication code was not made with the deployment's key")
)

// mac is the code of a message of kind, under key (the message key, an
// operation id), with its chunk fields (index and last; for records -1 and
// false) and payload (nil for a tombstone). Each field is length-prefixed.
func mac(key []byte, kind, msgKey string, index int, last bool, payload []byte) []byte {
	h := hmac.New(sha256.New, key)
	field := func(b []byte) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	field([]byte("toolgate-operations-v1"))
	field([]byte(kind))
	field([]byte(msgKey))
	field([]byte(strconv.Itoa(index)))
	field([]byte(strconv.FormatBool(last)))
	field(payload)
	return h.Sum(nil)
}

// sign sets msg's code, as a message of kind (chunk index and last from
// its properties when kind is kindChunk).
func (k *Keys) sign(kind string, msg *transport.Message) {
	index, last := chunkFields(kind, msg.Properties)
	if msg.Properties == nil {
		msg.Properties = map[string]string{}
	}
	msg.Properties[propMAC] = base64.StdEncoding.EncodeToString(mac(k.keys[0], kind, msg.Key, index, last, msg.Payload))
}

// verify checks msg's code: nil when one of the keys made it, else
// errUnsigned or errBadSignature.
func (k *Keys) verify(kind string, msg transport.Message) error {
	enc, ok := msg.Properties[propMAC]
	if !ok || enc == "" {
		return errUnsigned
	}
	got, err := base64.StdEncoding.DecodeString(enc)
	if err != nil || len(got) != sha256.Size {
		return errBadSignature
	}
	index, last := chunkFields(kind, msg.Properties)
	for _, key := range k.keys {
		if hmac.Equal(got, mac(key, kind, msg.Key, index, last, msg.Payload)) {
			return nil
		}
	}
	return errBadSignature
}

// chunkFields are the index and last mark of a chunk message as its
// properties carry them (a record's: -1, false).
func chunkFields(kind string, props map[string]string) (int, bool) {
	if kind != kindChunk {
		return -1, false
	}
	i, err := strconv.Atoi(props[wire.PropSeq])
	if err != nil {
		i = -2 // no index: covered as such, and refused when read
	}
	return i, props[propLast] == "true"
}

// refusedReason is the reason label of a verification error.
func refusedReason(err error) string {
	if errors.Is(err, errUnsigned) {
		return RefusedUnsigned
	}
	return RefusedSignature
}
