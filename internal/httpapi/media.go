package httpapi

import (
	"bytes"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
)

// mediaJSON is the media type of every answer but a stream's.
const mediaJSON = "application/json"

// negotiate picks the answer's media type among offers (the server's
// preference first) by the request's Accept header, as RFC 9110 §12.5.1
// has it: each offer gets the quality of the most specific range that
// matches it; the highest quality wins; between equals, the offer matched
// by the more specific range (a type named exactly before a wildcard),
// then the one the header names first, then the server's order. No Accept header is the first offer. ok is
// false when Accept allows none of the offers.
func negotiate(accept string, offers ...string) (media string, ok bool) {
	if strings.TrimSpace(accept) == "" {
		return offers[0], true
	}
	type rng struct {
		typ, sub string
		q        float64
		pos      int
	}
	var ranges []rng
	for i, part := range strings.Split(accept, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		q := 1.0
		if s, ok := params["q"]; ok {
			f, err := strconv.ParseFloat(s, 64)
			if err != nil || f < 0 || f > 1 {
				continue
			}
			q = f
		}
		typ, sub, _ := strings.Cut(mt, "/")
		ranges = append(ranges, rng{typ, sub, q, i})
	}
	best, bestQ, bestSpec, bestPos := "", 0.0, 0, 0
	for _, offer := range offers {
		typ, sub, _ := strings.Cut(offer, "/")
		// The most specific matching range decides the offer's quality.
		spec, q, pos := -1, 0.0, 0
		for _, r := range ranges {
			s := -1
			switch {
			case r.typ == typ && r.sub == sub:
				s = 2
			case r.typ == typ && r.sub == "*":
				s = 1
			case r.typ == "*" && r.sub == "*":
				s = 0
			}
			if s > spec || (s == spec && s >= 0 && r.q > q) {
				spec, q, pos = s, r.q, r.pos
			}
		}
		if spec < 0 || q <= 0 {
			continue
		}
		if best == "" || q > bestQ || (q == bestQ && (spec > bestSpec || spec == bestSpec && pos < bestPos)) {
			best, bestQ, bestSpec, bestPos = offer, q, spec, pos
		}
	}
	return best, best != ""
}

// notAcceptable answers 406 to a request whose Accept header allows none
// of the media types an endpoint answers with.
func notAcceptable(w http.ResponseWriter, r *http.Request, offers ...string) {
	writeStatus(w, http.StatusNotAcceptable, codes.InvalidArgument, "NOT_ACCEPTABLE",
		fmt.Sprintf("this endpoint answers %s; the Accept header (%q) allows none of them", strings.Join(offers, " or "), r.Header.Get("Accept")),
		map[string]string{"accept": r.Header.Get("Accept"), "produces": strings.Join(offers, ", ")})
}

// acceptJSON reports whether the request takes a JSON answer, and answers
// 406 when it does not.
func acceptJSON(w http.ResponseWriter, r *http.Request) bool {
	if _, ok := negotiate(r.Header.Get("Accept"), mediaJSON); !ok {
		notAcceptable(w, r, mediaJSON)
		return false
	}
	return true
}

// checkBodyType answers 415 and returns false when the request's body is
// not JSON by its Content-Type. JSON bodies come as application/json, a
// "+json" type, or without a Content-Type; the two types clients send
// unasked — application/x-www-form-urlencoded (curl -d) and text/plain
// (fetch with a string body) — are read as JSON when the body is a JSON
// object, so `curl -d '{"arguments": {...}}'` works, and a form is 415.
func checkBodyType(w http.ResponseWriter, r *http.Request, body []byte) bool {
	ct := r.Header.Get("Content-Type")
	if ct == "" || ct == mediaJSON {
		return true // the common cases, without parsing
	}
	mt, _, err := mime.ParseMediaType(ct)
	switch {
	case err != nil:
	case mt == mediaJSON || strings.HasSuffix(mt, "+json"):
		return true
	case mt == "application/x-www-form-urlencoded" || mt == "text/plain":
		if b := bytes.TrimSpace(body); len(b) == 0 || b[0] == '{' {
			return true
		}
	}
	writeStatus(w, http.StatusUnsupportedMediaType, codes.InvalidArgument, "UNSUPPORTED_MEDIA_TYPE",
		fmt.Sprintf(`the request body must be JSON, such as {"arguments": {...}}, sent with Content-Type: application/json, not %s`, ct),
		map[string]string{"content_type": ct})
	return false
}
