// Package httpstatus writes the errors the gateway's HTTP side raises
// itself (404, 405, 406, 415, 431, …) in the form the API's errors have:
// the google.rpc.Status JSON, as grpc-gateway writes it, with an ErrorInfo
// of domain ErrorDomain. The REST door and the root mux share it.
package httpstatus

import (
	"fmt"
	"net/http"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// ErrorDomain is the ErrorInfo domain of errors the HTTP side raises.
const ErrorDomain = "toolgate"

// marshaler is grpc-gateway's JSON marshaler with the API's options.
var marshaler = &runtime.JSONPb{MarshalOptions: protojson.MarshalOptions{UseProtoNames: true, EmitDefaultValues: true}}

// Write answers an error with httpCode: a google.rpc.Status of code and
// msg whose ErrorInfo has reason and md.
func Write(w http.ResponseWriter, httpCode int, code codes.Code, reason, msg string, md map[string]string) {
	st := status.New(code, msg)
	if ds, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain, Metadata: md}); err == nil {
		st = ds
	}
	WriteOf(w, httpCode, st)
}

// WriteOf answers st with httpCode, as Write does.
func WriteOf(w http.ResponseWriter, httpCode int, st *status.Status) {
	body, err := marshaler.Marshal(st.Proto())
	if err != nil {
		body = []byte(fmt.Sprintf(`{"code":%d,"message":%q}`, st.Code(), st.Message()))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(httpCode)
	_, _ = w.Write(body)
}

// NotAllowed answers 405 with Allow: allow.
func NotAllowed(w http.ResponseWriter, r *http.Request, allow string) {
	w.Header().Set("Allow", allow)
	Write(w, http.StatusMethodNotAllowed, codes.Unimplemented, "METHOD_NOT_ALLOWED",
		fmt.Sprintf("%s is not allowed on %s; use %s", r.Method, r.URL.Path, allow), map[string]string{"allow": allow})
}

// NotFound answers 404 ROUTE_NOT_FOUND with msg.
func NotFound(w http.ResponseWriter, msg string) {
	Write(w, http.StatusNotFound, codes.NotFound, "ROUTE_NOT_FOUND", msg, nil)
}
