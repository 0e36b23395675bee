package audit

import (
	"crypto/sha256"
	"hash"
	"sync"
)

// noArguments is the text of a call without arguments: the tool service
// gets an empty object.
var noArguments = []byte("{}")

// space reports whether c is JSON's insignificant white space.
func space(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// runs calls f with each run of data outside the white space JSON
// allows between tokens, in order: the text without that white space.
// Strings are kept whole, white space and escapes included. For text
// that is not JSON it still removes white space outside what look like
// strings, and never fails.
func runs(data []byte, f func([]byte)) {
	start, inString, escaped := 0, false, false
	for i, c := range data {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case space(c):
			if start < i {
				f(data[start:i])
			}
			start = i + 1
		}
	}
	if start < len(data) {
		f(data[start:])
	}
}

// compact reports whether data has no white space outside its strings.
func compact(data []byte) bool {
	inString, escaped := false, false
	for _, c := range data {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case space(c):
			return false
		}
	}
	return true
}

// appendCompact appends JSON text data without the white space outside
// its strings: one line, whatever the caller wrote.
func appendCompact(b, data []byte) []byte {
	runs(data, func(r []byte) { b = append(b, r...) })
	return b
}

var hashers = sync.Pool{New: func() any { return sha256.New() }}

// ArgumentsDigest is the SHA-256 of a call's arguments as JSON text
// without the white space outside its strings — the text the tool
// service receives, whichever door the call came by and however the
// caller spaced it; absent arguments are {}. A caller, or an auditor
// holding the arguments, computes the same digest from the compact text
// (jq -c, json.Compact).
func ArgumentsDigest(args []byte) Digest { return argumentsDigest(args, false) }

// argumentsDigest is ArgumentsDigest of args, which are compact already
// when known (toolcall.Call.ArgsCompact): not read twice.
func argumentsDigest(args []byte, known bool) Digest {
	if len(args) == 0 {
		args = noArguments
	}
	if known || compact(args) {
		return sha256.Sum256(args)
	}
	h := hashers.Get().(hash.Hash)
	h.Reset()
	runs(args, func(r []byte) { h.Write(r) })
	var d Digest
	h.Sum(d[:0])
	hashers.Put(h)
	return d
}
