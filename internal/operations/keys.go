package operations

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/wire"
)

// MinKeyBytes is the shortest key Keys take.
const MinKeyBytes = 32

// propMAC carries a message's authentication code on the operations
// topics: HMAC-SHA256, base64 (standard, padded).
const propMAC = "toolgate-mac"

// Keys protect what the gateways of a deployment write on the operations
// topics (records of the state table, tombstones, chunks): the gateways
// share them. A payload is encrypted (AES-256-GCM) and every message
// carries an authentication code (HMAC-SHA256); a message without a code
// made with one of the keys is refused. The first key starts operations
// and opens; the others open, and protect only what belongs to the
// operations started with them, so that a key can be replaced without a
// gap (docs/operations.md).
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

// propKeyID names, on every message a gateway writes on the operations
// topics, the key it was written with (KeyID): a reader that holds no
// such key can tell a deployment of other keys, or a replica not given
// the same ones, from a forgery, and report it. It is not covered by the
// code: it only names, it proves nothing.
const propKeyID = "toolgate-key-id"

// keyIDBytes is the length of a key's id, before hex.
const keyIDBytes = 8

// keyID names key without telling it: the first keyIDBytes of
// HMAC-SHA256 under key of a fixed label, in hex.
func keyID(key []byte) string {
	h := hmac.New(sha256.New, key)
	h.Write([]byte("toolgate-operations-v1 key id"))
	return hex.EncodeToString(h.Sum(nil)[:keyIDBytes])
}

// ID names the key these Keys write with (16 hex digits; the same on
// every gateway given the same key): the reply topic of the operations
// they start is named by it.
func (k *Keys) ID() string { return keyID(k.keys[0]) }

// IDs names every key, the one written with first.
func (k *Keys) IDs() []string {
	ids := make([]string, len(k.keys))
	for i, key := range k.keys {
		ids[i] = keyID(key)
	}
	return ids
}

// has reports whether id names one of the keys.
func (k *Keys) has(id string) bool {
	for _, key := range k.keys {
		if keyID(key) == id {
			return true
		}
	}
	return false
}

// idTagBytes is the length of the tag an operation id ends with, before
// hex.
const idTagBytes = 4

// idTag is the tag of the operation id whose first part is body: the
// first idTagBytes of HMAC-SHA256 under key, in hex.
func idTag(key []byte, body string) string {
	h := hmac.New(sha256.New, key)
	h.Write([]byte("toolgate-operations-v1 id "))
	h.Write([]byte(body))
	return hex.EncodeToString(h.Sum(nil)[:idTagBytes])
}

// newID makes an operation id: the time it is made (12 hex digits of
// Unix milliseconds), 128 random bits (32 hex digits) and the tag of
// both under the key written with (8 hex digits). Any gateway holding
// that key can tell an id its deployment made, and when, from one it
// never made (madeHere), without having read its record.
func (k *Keys) newID(now time.Time) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	body := fmt.Sprintf("%012x", now.UnixMilli()&(1<<48-1)) + hex.EncodeToString(b[:])
	return body + idTag(k.keys[0], body)
}

// madeHere reports whether id is an id newID made with one of the keys,
// and when: false for an id of the older form (32 hex digits, no tag), or
// one another deployment made.
func (k *Keys) madeHere(id string) (time.Time, bool) {
	if len(id) != idLen || !validID(id) {
		return time.Time{}, false
	}
	body, tag := id[:idLen-2*idTagBytes], id[idLen-2*idTagBytes:]
	for _, key := range k.keys {
		if hmac.Equal([]byte(tag), []byte(idTag(key, body))) {
			ms, err := strconv.ParseInt(id[:12], 16, 64)
			if err != nil {
				return time.Time{}, false
			}
			return time.UnixMilli(ms), true
		}
	}
	return time.Time{}, false
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
	// RefusedUnknownKey: signed, and named as written with a key this
	// gateway does not hold (propKeyID): another deployment's message on
	// the same topic, or a replica given other keys.
	RefusedUnknownKey = "unknown_key"
)

// refusedReasons lists the reasons, in the order Stats reports them.
var refusedReasons = [...]string{RefusedUnsigned, RefusedSignature, RefusedMalformed, RefusedTopic, RefusedUnknownKey}

var (
	errUnsigned     = errors.New("the message carries no authentication code")
	errBadSignature = errors.New("the message's authentication code was not made with the deployment's key")
	// errUnknownKey is an errBadSignature of a message naming a key not
	// held here (propKeyID).
	errUnknownKey = fmt.Errorf("%w: it names a key this gateway does not hold", errBadSignature)
)

// header writes the fields that say what a message is to w, each
// preceded by its length (8 bytes, big-endian): the version, the kind, the
// message key (an operation id), the chunk index and last mark (for
// records -1 and false).
func header(w io.Writer, kind, msgKey string, index int, last bool) {
	for _, f := range []string{"toolgate-operations-v1", kind, msgKey, strconv.Itoa(index), strconv.FormatBool(last)} {
		writeField(w, []byte(f))
	}
}

func writeField(w io.Writer, b []byte) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(b)))
	_, _ = w.Write(n[:])
	_, _ = w.Write(b)
}

// mac is the code of a message of kind under key: HMAC-SHA256 of its
// header and then its payload (as sent: encrypted; nil for a tombstone),
// length-prefixed alike.
func mac(key []byte, kind, msgKey string, index int, last bool, payload []byte) []byte {
	h := hmac.New(sha256.New, key)
	header(h, kind, msgKey, index, last)
	writeField(h, payload)
	return h.Sum(nil)
}

// saltBytes is the length of the random salt a payload's own encryption
// key is derived with.
const saltBytes = 32

// errSealed: a payload that does not open (cut short, or changed).
var errSealed = errors.New("the payload does not decrypt")

// payloadCipher is the AES-256-GCM of one payload: its key derived from
// the deployment's key and the payload's salt (HKDF-SHA256), so each
// payload has a key of its own and the nonce can be zero.
func payloadCipher(key, salt []byte) (cipher.AEAD, error) {
	sub, err := hkdf.Key(sha256.New, key, salt, "toolgate-operations-v1 payload", 32)
	if err != nil {
		return nil, err
	}
	b, err := aes.NewCipher(sub)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

// seal encrypts plain as a payload of kind under msgKey: the salt, then
// the ciphertext and tag, the header being its additional data.
func seal(key []byte, kind, msgKey string, index int, last bool, plain []byte) ([]byte, error) {
	salt := make([]byte, saltBytes, saltBytes+len(plain)+16)
	_, _ = rand.Read(salt)
	aead, err := payloadCipher(key, salt)
	if err != nil {
		return nil, err
	}
	var ad bytes.Buffer
	header(&ad, kind, msgKey, index, last)
	return aead.Seal(salt, make([]byte, aead.NonceSize()), plain, ad.Bytes()), nil
}

// open decrypts a payload seal made under key.
func open(key []byte, kind, msgKey string, index int, last bool, sealed []byte) ([]byte, error) {
	if len(sealed) < saltBytes+16 {
		return nil, errSealed
	}
	aead, err := payloadCipher(key, sealed[:saltBytes])
	if err != nil {
		return nil, err
	}
	var ad bytes.Buffer
	header(&ad, kind, msgKey, index, last)
	plain, err := aead.Open(nil, make([]byte, aead.NonceSize()), sealed[saltBytes:], ad.Bytes())
	if err != nil {
		return nil, errSealed
	}
	return plain, nil
}

// protect encrypts msg's payload (a tombstone's stays empty) and sets its
// code, as a message of kind (chunk index and last from its properties
// when kind is kindChunk), with the key the operation msg is keyed by was
// started with (keyOf): during a rotation every record and chunk of an
// operation is written with its key, so that every replica that could
// read its start reads its end.
func (k *Keys) protect(kind string, msg *transport.Message) error {
	key := k.keys[k.keyOf(msg.Key)]
	index, last := chunkFields(kind, msg.Properties)
	if len(msg.Payload) > 0 {
		sealed, err := seal(key, kind, msg.Key, index, last, msg.Payload)
		if err != nil {
			return err
		}
		msg.Payload = sealed
	}
	if msg.Properties == nil {
		msg.Properties = map[string]string{}
	}
	msg.Properties[propMAC] = base64.StdEncoding.EncodeToString(mac(key, kind, msg.Key, index, last, msg.Payload))
	msg.Properties[propKeyID] = keyID(key)
	return nil
}

// keyOf is the index of the key operation id was started with (its tag,
// Keys.newID), or 0 (the key written with) for an id none of them made.
func (k *Keys) keyOf(id string) int {
	if len(id) != idLen || !validID(id) {
		return 0
	}
	body, tag := id[:idLen-2*idTagBytes], id[idLen-2*idTagBytes:]
	for i, key := range k.keys {
		if hmac.Equal([]byte(tag), []byte(idTag(key, body))) {
			return i
		}
	}
	return 0
}

// unprotect checks msg's code and returns its payload decrypted (nil for a
// tombstone): errUnsigned or errBadSignature when no key made the code,
// errSealed when the payload does not decrypt under the key that did.
func (k *Keys) unprotect(kind string, msg transport.Message) ([]byte, error) {
	enc, ok := msg.Properties[propMAC]
	if !ok || enc == "" {
		return nil, errUnsigned
	}
	got, err := base64.StdEncoding.DecodeString(enc)
	if err != nil || len(got) != sha256.Size {
		return nil, errBadSignature
	}
	index, last := chunkFields(kind, msg.Properties)
	for _, key := range k.keys {
		if !hmac.Equal(got, mac(key, kind, msg.Key, index, last, msg.Payload)) {
			continue
		}
		if len(msg.Payload) == 0 {
			return nil, nil
		}
		return open(key, kind, msg.Key, index, last, msg.Payload)
	}
	if id := msg.Properties[propKeyID]; id != "" && !k.has(id) {
		return nil, fmt.Errorf("%w (key %.16s)", errUnknownKey, id)
	}
	return nil, errBadSignature
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

// refusedReason is the reason label of an error of unprotect.
func refusedReason(err error) string {
	switch {
	case errors.Is(err, errUnsigned):
		return RefusedUnsigned
	case errors.Is(err, errUnknownKey):
		return RefusedUnknownKey
	case errors.Is(err, errBadSignature):
		return RefusedSignature
	}
	return RefusedMalformed
}
