// Package openapi31 turns the OpenAPI 2.0 (Swagger) document that
// protoc-gen-openapiv2 writes for toolgate's REST API into an OpenAPI 3.1
// document, and adds what that generator cannot express: the two streaming
// media types of StreamTool, a typed error response per HTTP status (with
// google.rpc.Status, ErrorInfo and RetryInfo schemas), the formats of
// `timeout` and `arguments` and the bounds of the paging parameters (the
// patterns the REST door enforces: DurationPattern, PageTokenPattern), the
// server, the security schemes, and operationIds that read well as method
// names in generated clients (InvokeTool, not ToolService_InvokeTool).
//
// The input keeps proto field names (the gateway marshals with
// UseProtoNames) and int64 as strings, so the output does too.
package openapi31

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Version is the OpenAPI version of Convert's output.
const Version = "3.1.0"

// Media types of StreamTool's successful responses.
const (
	MediaNDJSON = "application/x-ndjson"
	MediaSSE    = "text/event-stream"
	mediaJSON   = "application/json"
)

// operationPrefix is what protoc-gen-openapiv2 puts before each RPC name.
const operationPrefix = "ToolService_"

// opErrors lists, per operation, the HTTP error statuses it can answer with.
// Every operation of the input must have an entry, so a new RPC cannot reach
// the document without its errors.
var opErrors = map[string][]int{
	"ListTools":        {400, 401, 403, 405, 406, 429, 500, 503},
	"GetTool":          {401, 403, 404, 405, 406, 429, 500, 503},
	"InvokeTool":       {400, 401, 403, 404, 405, 406, 413, 415, 429, 500, 503, 504},
	"StreamTool":       {400, 401, 403, 404, 405, 406, 413, 415, 429, 500, 503, 504},
	"StartTool":        {400, 401, 403, 404, 405, 406, 413, 415, 429, 500, 503},
	"ListToolServices": {400, 401, 403, 405, 406, 429, 500, 503},
	"GetToolService":   {401, 403, 404, 405, 406, 429, 500, 503},
}

// streamOps are the server-streaming operations.
var streamOps = map[string]bool{"StreamTool": true}

// Convert returns the OpenAPI 3.1 document (indented JSON, ending in a
// newline) for the Swagger 2.0 document v2. The same input always gives the
// same bytes.
func Convert(v2 []byte) ([]byte, error) {
	root, err := decode(v2)
	if err != nil {
		return nil, fmt.Errorf("openapi31: reading the Swagger document: %w", err)
	}
	src, ok := root.(*Object)
	if !ok {
		return nil, errors.New("openapi31: the Swagger document is not a JSON object")
	}
	if v := src.Str("swagger"); v != "2.0" {
		return nil, fmt.Errorf("openapi31: not a Swagger 2.0 document (swagger: %q)", v)
	}
	paths, defs := src.Obj("paths"), src.Obj("definitions")
	if paths == nil || defs == nil {
		return nil, errors.New("openapi31: the Swagger document has no paths or no definitions")
	}
	if err := addOperations(src); err != nil {
		return nil, err
	}

	out := obj("openapi", Version)
	out.Set("info", convertInfo(src.Obj("info")))
	out.Set("servers", servers())
	if tags, ok := src.Get("tags"); ok {
		out.Set("tags", tags)
	}
	// Anonymous calls are allowed when the gateway runs with
	// --allow-anonymous, hence the empty requirement first.
	out.Set("security", []any{obj(), obj("bearerAuth", []any{}), obj("apiKeyAuth", []any{})})
	outPaths, err := convertPaths(paths)
	if err != nil {
		return nil, err
	}
	out.Set("paths", outPaths)

	schemas := obj()
	for _, k := range defs.Keys() {
		v, _ := defs.Get(k)
		schemas.Set(k, convertSchema(v))
	}
	if err := patchSchemas(schemas); err != nil {
		return nil, err
	}
	out.Set("components", obj(
		"schemas", schemas,
		"responses", errorResponses(),
		"securitySchemes", securitySchemes(),
	))
	prune(out)
	if err := checkRefs(out); err != nil {
		return nil, err
	}

	return encode(out)
}

// encode writes doc as Convert returns it: indented JSON ending in a newline.
func encode(doc *Object) ([]byte, error) {
	b, err := marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("openapi31: %w", err)
	}
	var ind bytes.Buffer
	if err := json.Indent(&ind, b, "", "  "); err != nil {
		return nil, fmt.Errorf("openapi31: %w", err)
	}
	ind.WriteByte('\n')
	return ind.Bytes(), nil
}

// servers are the document's servers. First "/": a URL relative to the
// document's own, so a client reading the document where a gateway serves
// it (Swagger UI at /docs/reference, a generator given the URL) calls that
// gateway, at whatever address it runs. Then a template for a gateway
// elsewhere, by default at the --http-addr a gateway starts with.
// Generated clients take their base URL from the servers; every client
// can be given another.
func servers() []any {
	return []any{
		obj("url", "/", "description", "The gateway serving this document."),
		obj(
			"url", "{scheme}://{host}",
			"description", "A toolgate gateway's HTTP listener (--http-addr).",
			"variables", obj(
				"scheme", obj("default", "http", "enum", []any{"http", "https"}),
				"host", obj("default", DefaultHost, "description", "host:port of the gateway's HTTP listener."),
			),
		),
	}
}

// DefaultHost is the host:port of the document's server template: the
// gateway's default --http-addr.
const DefaultHost = "127.0.0.1:8081"

// PageTokenPattern is what a page_token is: unpadded base64url in its
// canonical form (the unused bits of the last character are zero). The
// gateway answers INVALID_ARGUMENT to any other token; a token of this form
// that names no item is a page past it.
const PageTokenPattern = `^(?:[A-Za-z0-9_-]{4})*(?:[A-Za-z0-9_-]{2}[AEIMQUYcgkosw048]|[A-Za-z0-9_-][AQgw])?$`

// DurationPattern is what a call's "timeout" is: one or more components of
// digits (with an optional fraction) and a unit — h, m, s, ms, us or ns —
// at least one of them worth a nanosecond or more. It takes protobuf's JSON
// form ("5s", "0.25s") and Go's ("200ms", "1m30s"), never a sign, spaces or
// a duration of zero; the gateway answers INVALID_ARGUMENT to anything
// else. Durations too long for the gateway are its --max-timeout.
const DurationPattern = `^(?:` + anyComponent + `)*(?:` + nonZeroComponent + `)(?:` + anyComponent + `)*$`

const (
	anyComponent     = `[0-9]+(?:\.[0-9]+)?(?:h|m|s|ms|us|ns)`
	nonZeroComponent = nonZeroNumber + `(?:h|m|s|ms|us|ns)|` +
		// A fraction alone is worth a nanosecond when its first non-zero
		// digit is within the unit's nanoseconds.
		`[0-9]+\.0{0,8}[1-9][0-9]*(?:h|m|s)|` +
		`[0-9]+\.0{0,5}[1-9][0-9]*ms|` +
		`[0-9]+\.0{0,2}[1-9][0-9]*us`
	nonZeroNumber = `[0-9]*[1-9][0-9]*(?:\.[0-9]+)?`
)

// patchParam adds to a query parameter's schema the bounds the gateway
// enforces.
func patchParam(name string, schema *Object) {
	switch name {
	case "page_size":
		schema.Set("minimum", 0)
		schema.Set("maximum", 2147483647)
	case "page_token":
		schema.Set("pattern", PageTokenPattern)
	}
}

func convertInfo(in *Object) *Object {
	info := obj("title", in.Str("title"), "version", in.Str("version"))
	if d := in.Str("description"); d != "" {
		info.Set("description", d+"\n\n"+infoNotes)
	} else {
		info.Set("description", infoNotes)
	}
	return info
}

const infoNotes = `JSON members use the proto field names (snake_case, e.g. ` + "`arguments_schema`" + `), ` +
	`64-bit integers are JSON strings, and durations are strings such as "5s". ` +
	`Every error answer is a google.rpc.Status (schema Status) whose HTTP status follows its gRPC code, ` +
	"with an ErrorInfo detail (domain `toolgate`) whose reason says why."

func convertPaths(paths *Object) (*Object, error) {
	out := obj()
	seen := map[string]bool{}
	for _, p := range paths.Keys() {
		item := paths.Obj(p)
		if item == nil {
			return nil, fmt.Errorf("openapi31: path %s is not an object", p)
		}
		outItem := obj()
		for _, method := range item.Keys() {
			op := item.Obj(method)
			if op == nil {
				return nil, fmt.Errorf("openapi31: %s %s is not an operation", method, p)
			}
			o, id, err := convertOperation(method, p, op)
			if err != nil {
				return nil, err
			}
			if seen[id] {
				return nil, fmt.Errorf("openapi31: operationId %s is used twice", id)
			}
			seen[id] = true
			outItem.Set(method, o)
		}
		out.Set(p, outItem)
	}
	var missing []string
	for id := range opErrors {
		if !seen[id] {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return nil, fmt.Errorf("openapi31: operations %v have an error table but are not in the document", missing)
	}
	return out, nil
}

func convertOperation(method, path string, op *Object) (*Object, string, error) {
	id := strings.TrimPrefix(strings.TrimPrefix(op.Str("operationId"), operationPrefix), "Operations_")
	errs, known := opErrors[id]
	if !known {
		return nil, "", fmt.Errorf("openapi31: %s %s: operation %q has no error table in internal/openapi31", method, path, op.Str("operationId"))
	}
	out := obj()
	if tags, ok := op.Get("tags"); ok {
		out.Set("tags", tags)
	}
	text := op.Str("summary")
	if d := op.Str("description"); d != "" {
		text += "\n\n" + d
	}
	switch {
	case id == "StreamTool":
		text = streamDescription
	case streamOps[id]:
		// The formats of StreamTool's answer, after the first line.
		_, formats, _ := strings.Cut(streamDescription, "\n")
		text += "\n" + formats + "\n\nEvents of `text/event-stream` carry the chunk's index as their `id`, so a client that lost its connection resumes on any gateway with `Last-Event-ID`."
	}
	out.Set("summary", firstSentence(text))
	out.Set("description", unwrap(text))
	out.Set("operationId", id)

	params, _ := op.Get("parameters")
	list, _ := params.([]any)
	var outParams []any
	for _, pv := range list {
		p, ok := pv.(*Object)
		if !ok {
			return nil, "", fmt.Errorf("openapi31: %s: a parameter is not an object", id)
		}
		switch in := p.Str("in"); in {
		case "path", "query", "header":
			schema := obj()
			for _, k := range []string{"type", "format", "enum", "default", "items", "minimum", "pattern"} {
				if v, ok := p.Get(k); ok {
					schema.Set(k, convertSchema(v))
				}
			}
			np := obj("name", p.Str("name"), "in", in)
			if d := p.Str("description"); d != "" {
				np.Set("description", unwrap(d))
			}
			req, _ := p.Get("required")
			np.Set("required", in == "path" || req == true)
			patchParam(p.Str("name"), schema)
			np.Set("schema", schema)
			outParams = append(outParams, np)
		case "body":
			schema, _ := p.Get("schema")
			// Not required: every member of a call's body is optional, and
			// an empty body is an empty request (a tool without arguments
			// is called with a bare POST), as grpc-gateway has it.
			out.Set("requestBody", obj(
				"required", false,
				"content", obj(mediaJSON, obj("schema", convertSchema(schema))),
			))
		default:
			return nil, "", fmt.Errorf("openapi31: %s: parameters in %q are not supported", id, in)
		}
	}
	if len(outParams) > 0 {
		// Parameters before the request body, as OpenAPI documents usually
		// list them.
		body, hasBody := out.Get("requestBody")
		if hasBody {
			out.Delete("requestBody")
		}
		out.Set("parameters", outParams)
		if hasBody {
			out.Set("requestBody", body)
		}
	}

	responses := obj()
	ok200 := op.Obj("responses").Obj("200")
	if ok200 == nil {
		return nil, "", fmt.Errorf("openapi31: %s has no 200 response", id)
	}
	if streamOps[id] {
		responses.Set("200", streamResponse())
	} else {
		schema, _ := ok200.Get("schema")
		responses.Set("200", obj(
			"description", ok200.Str("description"),
			"content", obj(mediaJSON, obj("schema", convertSchema(schema))),
		))
	}
	for _, code := range errs {
		responses.Set(strconv.Itoa(code), obj("$ref", "#/components/responses/"+errorKinds[code].name))
	}
	responses.Set("default", obj("$ref", "#/components/responses/Error"))
	out.Set("responses", responses)
	return out, id, nil
}

const streamDescription = `StreamTool calls a tool and returns its answer chunk by chunk, as the tool service sends them; each chunk is flushed as it arrives.
The Accept header chooses the format of a successful answer:

- ` + "`application/x-ndjson`" + ` (the default: chosen when Accept is absent or ` + "`application/json`" + `, or allows both formats only through wildcards): one JSON object per line, each a StreamToolResponse. When the stream fails after its first chunk, the last line is a Status instead (it has a ` + "`code`" + ` member; a chunk never does).
- ` + "`text/event-stream`" + ` (server-sent events): every chunk is an event ` + "`chunk`" + ` whose data is a StreamToolResponse; the stream ends with an event ` + "`done`" + ` (data ` + "`{}`" + `) or with an event ` + "`error`" + ` whose data is a Status. Idle streams get comment lines ` + "`: keep-alive`" + `.

The highest quality (` + "`q`" + `) wins; between equals, a type named exactly beats a wildcard, then the one the header names first: ` + "`application/x-ndjson, text/event-stream`" + ` gets NDJSON and ` + "`text/event-stream, application/x-ndjson`" + ` server-sent events.

An error before the first chunk is an HTTP error status with a Status body, as for InvokeTool; an Accept header that allows neither format is answered 406.`

func streamResponse() *Object {
	return obj(
		"description", "The answer, chunk by chunk, in the format the Accept header asks for.",
		"content", obj(
			// The schema and examples are of one line: a JSON value each.
			MediaNDJSON, obj(
				"schema", obj("$ref", "#/components/schemas/StreamLine"),
				"examples", obj(
					"chunk", obj("summary", "A chunk (one line; the next chunk is the next line)",
						"value", obj("output", "0,", "index", "0", "last", false)),
					"last", obj("summary", "The last chunk", "value", obj("output", "1", "index", "1", "last", true)),
					"error", obj("summary", "The last line of a stream that failed after its first chunk",
						"value", statusExample(4, `tool "echo" did not answer before the deadline`, errorInfo("DEADLINE_EXCEEDED", "tool", "echo"))),
				),
			),
			MediaSSE, obj(
				"schema", obj(
					"type", "string",
					"description", "Server-sent events: `event: chunk` with a StreamToolResponse as data, per chunk; "+
						"then `event: done` with data `{}`, or `event: error` with a Status as data. "+
						"Lines starting with `:` (`: keep-alive`) are comments.",
				),
				"example", "event: chunk\ndata: {\"output\":\"0,\",\"index\":\"0\",\"last\":false}\n\n"+
					"event: chunk\ndata: {\"output\":\"1\",\"index\":\"1\",\"last\":true}\n\n"+
					"event: done\ndata: {}\n\n",
			),
		),
	)
}

// errorKind describes the error answer of one HTTP status.
type errorKind struct {
	name, description string
	example           *Object
	headers           *Object
}

var errorKinds = map[int]errorKind{
	400: {name: "BadRequest", description: "INVALID_ARGUMENT (or FAILED_PRECONDITION, OUT_OF_RANGE): malformed JSON, an unknown member, " +
		"arguments that do not fit the tool's arguments_schema, a bad duration, or a tool service's `invalid-argument` error.",
		example: statusExample(3, `tool "tell-dad-joke": missing required argument "topic"`, errorInfo("INVALID_ARGUMENTS", "tool", "tell-dad-joke"))},
	401: {name: "Unauthenticated", description: "UNAUTHENTICATED: no credential, or one the gateway does not accept. " +
		"Send `Authorization: Bearer <API key or JWT>` or `X-Api-Key: <API key>`.",
		example: statusExample(16, "missing credentials: send Authorization: Bearer <API key or JWT>", errorInfo("MISSING_CREDENTIALS"))},
	403: {name: "PermissionDenied", description: "PERMISSION_DENIED: the policy does not let the caller do this to this tool.",
		example: statusExample(7, `permission denied: user "alice" may not invoke tool "tell-joke"`,
			errorInfo("NOT_ALLOWED", "action", "invoke", "tool", "tell-joke"))},
	404: {name: "NotFound", description: "NOT_FOUND: no such tool or tool service (ErrorInfo reason `TOOL_NOT_FOUND`, domain `toolgate`), " +
		"or the tool service's own `not-found` error (reason `not-found`).",
		example: statusExample(5, `tool "no-such-tool" not found`, errorInfo("TOOL_NOT_FOUND", "tool", "no-such-tool"))},
	405: {name: "MethodNotAllowed", description: "The path exists but not with this HTTP method; `Allow` lists the methods it takes.",
		example: statusExample(12, "GET is not allowed on /v1/tools/tell-joke:invoke; use POST", errorInfo("METHOD_NOT_ALLOWED", "allow", "POST")),
		headers: obj("Allow", obj("description", "The methods the path takes.", "schema", obj("type", "string"), "example", "POST"))},
	406: {name: "NotAcceptable", description: "INVALID_ARGUMENT: the Accept header allows no media type the operation answers " +
		"(`application/json`; for StreamTool `application/x-ndjson` or `text/event-stream`). ErrorInfo reason `NOT_ACCEPTABLE`.",
		example: statusExample(3, "this endpoint answers application/json; the Accept header does not allow it",
			errorInfo("NOT_ACCEPTABLE", "accept", "text/html"))},
	413: {name: "ContentTooLarge", description: "RESOURCE_EXHAUSTED: the request body is larger than the gateway's --max-body-bytes.",
		example: statusExample(8, "request body larger than 1048576 bytes", errorInfo("BODY_TOO_LARGE"))},
	415: {name: "UnsupportedMediaType", description: "INVALID_ARGUMENT: the request body is not JSON: send it with " +
		"`Content-Type: application/json` (or none). ErrorInfo reason `UNSUPPORTED_MEDIA_TYPE`.",
		example: statusExample(3, "the request body must be JSON (Content-Type: application/json), not application/x-www-form-urlencoded",
			errorInfo("UNSUPPORTED_MEDIA_TYPE", "content_type", "application/x-www-form-urlencoded"))},
	429: {name: "TooManyRequests", description: "RESOURCE_EXHAUSTED: the caller's rate limit, or the gateway's bound on calls in flight. " +
		"Retry after `Retry-After` seconds; the RetryInfo detail has the same delay.",
		example: statusExample(8, "rate limit exceeded: retry in 1s", obj("@type", typeRetryInfo, "retry_delay", "1s"),
			errorInfo("RATE_LIMITED", "per_second", "0.5", "burst", "10")),
		headers: obj("Retry-After", obj("description", "Seconds to wait before retrying (whole seconds, rounded up).",
			"schema", obj("type", "integer", "minimum", 0), "example", 1))},
	500: {name: "InternalError", description: "UNKNOWN or INTERNAL: the tool service failed (ErrorInfo reason is its error type, " +
		"e.g. `tool-service-error`, with metadata `tool` and `service`), or its reply was not understood.",
		example: statusExample(2, "the service failed", errorInfo("tool-service-error", "tool", "tell-joke", "service", "joke-service"))},
	503: {name: "Unavailable", description: "UNAVAILABLE: the broker is unreachable, no tool service listens on the tool's topic, " +
		"or the gateway is shutting down.",
		example: statusExample(14, `tool "tell-joke" is unavailable: no tool service is subscribed to non-persistent://tg/request/joke`,
			errorInfo("NO_LISTENER", "tool", "tell-joke", "service", "joke-service"))},
	504: {name: "DeadlineExceeded", description: "DEADLINE_EXCEEDED: no complete answer before the call's deadline (`timeout`).",
		example: statusExample(4, `tool "tell-joke" did not answer before the deadline`, errorInfo("DEADLINE_EXCEEDED", "tool", "tell-joke", "service", "joke-service"))},
}

const (
	typeErrorInfo = "type.googleapis.com/google.rpc.ErrorInfo"
	typeRetryInfo = "type.googleapis.com/google.rpc.RetryInfo"
)

func statusExample(code int, msg string, details ...*Object) *Object {
	list := []any{}
	for _, d := range details {
		list = append(list, d)
	}
	return obj("code", code, "message", msg, "details", list)
}

// errorInfo is an ErrorInfo detail of the gateway's domain, for examples;
// metadata is key/value pairs.
func errorInfo(reason string, metadata ...any) *Object {
	return obj("@type", typeErrorInfo, "reason", reason, "domain", "toolgate", "metadata", obj(metadata...))
}

func errorResponses() *Object {
	codes := make([]int, 0, len(errorKinds))
	for c := range errorKinds {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	out := obj()
	for _, c := range codes {
		k := errorKinds[c]
		r := obj("description", k.description)
		if k.headers != nil {
			r.Set("headers", k.headers)
		}
		r.Set("content", obj(mediaJSON, obj("schema", obj("$ref", "#/components/schemas/Status"), "example", k.example)))
		out.Set(k.name, r)
	}
	out.Set("Error", obj(
		"description", "Any other error, e.g. ALREADY_EXISTS (409) or UNIMPLEMENTED (501), as a Status.",
		"content", obj(mediaJSON, obj("schema", obj("$ref", "#/components/schemas/Status"))),
	))
	return out
}

func securitySchemes() *Object {
	return obj(
		"bearerAuth", obj("type", "http", "scheme", "bearer",
			"description", "An API key or a JWT: `Authorization: Bearer <token>`."),
		"apiKeyAuth", obj("type", "apiKey", "in", "header", "name", "X-Api-Key",
			"description", "An API key in the X-Api-Key header."),
	)
}

// convertSchema copies a Swagger schema, pointing its references at
// components/schemas. A $ref's sibling "type" (protoc-gen-openapiv2 writes
// "type": "object" next to references in arrays) is dropped.
func convertSchema(v any) any {
	switch t := v.(type) {
	case *Object:
		out := obj()
		ref := t.Str("$ref")
		for _, k := range t.Keys() {
			if ref != "" && k == "type" {
				continue
			}
			val, _ := t.Get(k)
			if k == "$ref" {
				out.Set(k, strings.Replace(ref, "#/definitions/", "#/components/schemas/", 1))
				continue
			}
			out.Set(k, convertSchema(val))
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = convertSchema(e)
		}
		return out
	default:
		return v
	}
}

// patchSchemas adds to the generated schemas what the proto cannot say.
func patchSchemas(s *Object) error {
	need := func(name string) (*Object, error) {
		o := s.Obj(name)
		if o == nil {
			return nil, fmt.Errorf("openapi31: schema %s is missing from the Swagger document", name)
		}
		return o, nil
	}
	prop := func(schema *Object, schemaName, p string) (*Object, error) {
		o := schema.Obj("properties").Obj(p)
		if o == nil {
			return nil, fmt.Errorf("openapi31: schema %s has no property %s", schemaName, p)
		}
		return o, nil
	}

	for _, name := range []string{"InvokeToolBody", "StreamToolBody", "StartToolBody"} {
		body, err := need(name)
		if err != nil {
			return err
		}
		args, err := prop(body, name, "arguments")
		if err != nil {
			return err
		}
		// null is "not set", as in protobuf's JSON mapping; clients that
		// write every member (Jackson, System.Text.Json) send it.
		args.Set("type", []any{"object", "null"})
		args.Set("additionalProperties", true)
		args.Set("examples", []any{obj("topic", "programming")})
		argsJSON, err := prop(body, name, "arguments_json")
		if err != nil {
			return err
		}
		argsJSON.Set("type", []any{"string", "null"})
		argsJSON.Set("description", unwrap(argsJSON.Str("description"))+" "+argumentsJSONText)
		argsJSON.Set("contentMediaType", "application/json")
		argsJSON.Set("contentSchema", obj("type", "object"))
		// oapi-codegen takes a string with a contentMediaType for a file
		// and sends it base64-encoded: it is text.
		argsJSON.Set("x-go-type", "string")
		// Both set is INVALID_ARGUMENT; null, and an empty arguments_json,
		// are "not set". (additionalProperties, as on arguments itself,
		// keeps generators from taking the subschema for a map of unknown
		// values.)
		body.Set("not", obj(
			"required", []any{"arguments", "arguments_json"},
			"properties", obj(
				"arguments", obj("type", "object", "additionalProperties", true, "minProperties", 1),
				"arguments_json", obj("type", "string", "minLength", 1),
			),
		))
		timeout, err := prop(body, name, "timeout")
		if err != nil {
			return err
		}
		timeout.Set("description", unwrap(timeout.Str("description"))+" "+durationText)
		timeout.Set("examples", []any{"5s", "200ms", "1m30s", "0.25s"})
		timeout.Set("type", []any{"string", "null"})
		timeout.Set("pattern", DurationPattern)
		// The gateway rejects unknown members (400).
		body.Set("additionalProperties", false)
	}

	// An Operation's metadata and response are google.protobuf.Any; every
	// operation of this API has a ToolOperationMetadata and, once done
	// without error, an InvokeToolResponse (StartTool's operation_info).
	// The REST door writes them with their "@type", as protobuf's JSON
	// mapping of Any does.
	op, err := need("Operation")
	if err != nil {
		return err
	}
	typeURL := func(msg string) *Object {
		return obj("type", "string", "const", "type.googleapis.com/toolgate.v1."+msg)
	}
	ts := func(d string) *Object { return obj("type", "string", "format", "date-time", "description", d) }
	md, err := prop(op, "Operation", "metadata")
	if err != nil {
		return err
	}
	md.Delete("$ref")
	md.Set("type", "object")
	md.Set("description", "A ToolOperationMetadata: the tool, the state and the operation's times.")
	md.Set("properties", obj(
		"@type", typeURL("ToolOperationMetadata"),
		"tool", obj("type", "string", "description", "The tool called."),
		"state", obj("type", "string", "enum", []any{"RUNNING", "DONE", "FAILED", "CANCELLED"}),
		"create_time", ts("When the operation was started."),
		"deadline", ts("When a running operation fails with DEADLINE_EXCEEDED."),
		"end_time", ts("When the operation ended; absent while it runs."),
	))
	resp, err := prop(op, "Operation", "response")
	if err != nil {
		return err
	}
	resp.Delete("$ref")
	resp.Set("description", "Once done without error: the tool's answer, an InvokeToolResponse.")
	resp.Set("allOf", []any{obj("$ref", "#/components/schemas/InvokeToolResponse"),
		obj("type", "object", "properties", obj("@type", typeURL("InvokeToolResponse")))})

	tool, err := need("Tool")
	if err != nil {
		return err
	}
	as, err := prop(tool, "Tool", "arguments_schema")
	if err != nil {
		return err
	}
	as.Set("additionalProperties", true)

	svc, err := need("ToolServiceDescriptor")
	if err != nil {
		return err
	}
	dt, err := prop(svc, "ToolServiceDescriptor", "default_timeout")
	if err != nil {
		return err
	}
	dt.Set("examples", []any{"30s"})

	inv, err := need("InvokeToolResponse")
	if err != nil {
		return err
	}
	oj, err := prop(inv, "InvokeToolResponse", "output_json")
	if err != nil {
		return err
	}
	oj.Set("description", unwrap(oj.Str("description"))+" Any JSON value; null or absent when the output is not JSON.")
	inv.Set("required", []any{"output"})

	chunk, err := need("StreamToolResponse")
	if err != nil {
		return err
	}
	idx, err := prop(chunk, "StreamToolResponse", "index")
	if err != nil {
		return err
	}
	idx.Set("description", unwrap(idx.Str("description"))+" An int64, so a JSON string.")
	idx.Set("pattern", "^[0-9]+$")
	idx.Set("examples", []any{"0"})
	chunk.Set("required", []any{"output", "index", "last"})
	// A chunk and a Status share no member, and neither takes members of
	// the other: a client tells the lines of a stream apart by their
	// members (a Status has "code").
	chunk.Set("additionalProperties", false)

	if _, err := need("Status"); err != nil {
		return err
	}
	s.Set("Status", statusSchema())
	s.Set("ErrorInfo", errorInfoSchema())
	s.Set("RetryInfo", retryInfoSchema())
	s.Set("StatusDetail", obj(
		"description", "One detail of a Status: a google.protobuf.Any, whose `@type` says which message it is.",
		"anyOf", []any{
			obj("$ref", "#/components/schemas/ErrorInfo"),
			obj("$ref", "#/components/schemas/RetryInfo"),
			obj("$ref", "#/components/schemas/OtherDetail"),
		},
	))
	s.Set("OtherDetail", obj(
		"type", "object",
		"description", "A google.protobuf.Any of another type: `@type` names it, the other members are its fields.",
		"properties", obj("@type", obj("type", "string")),
		"required", []any{"@type"},
		"additionalProperties", true,
	))
	s.Set("StreamLine", obj(
		"description", "One line of an `application/x-ndjson` StreamTool answer: a StreamToolResponse, "+
			"or, as the last line of a stream that failed after its first chunk, a Status.",
		"oneOf", []any{obj("$ref", "#/components/schemas/StreamToolResponse"), obj("$ref", "#/components/schemas/Status")},
	))
	return nil
}

// argumentsJSONText is what the gateway enforces of arguments_json beyond
// its schema (contentMediaType and contentSchema are annotations, which
// validators do not check).
const argumentsJSONText = "The text must be a JSON object (`{...}`): any other text is INVALID_ARGUMENT (reason INVALID_ARGUMENTS). " +
	"Set with arguments that has members (a non-empty object and a non-empty string) it is INVALID_ARGUMENT (reason ARGUMENTS_CONFLICT), as the body schema's `not` says; " +
	"null or an empty string is not set, and an empty arguments object beside it is no conflict (as on gRPC and Connect, where an empty Struct is the unset one)."

const durationText = `A duration string: a protobuf Duration ("5s", "0.25s") or a Go duration ("200ms", "1m30s").`

func statusSchema() *Object {
	return obj(
		"type", "object",
		"description", "google.rpc.Status: the body of every error answer.",
		"properties", obj(
			"code", obj("type", "integer", "format", "int32",
				"description", "The gRPC status code (5 NOT_FOUND, 3 INVALID_ARGUMENT, ...); the HTTP status is derived from it."),
			"message", obj("type", "string", "description", "What went wrong, safe to show to a person."),
			"details", obj("type", "array",
				"description", "Typed details, told apart by their `@type`: "+
					"`"+typeErrorInfo+"` (ErrorInfo) and `"+typeRetryInfo+"` (RetryInfo); other types may follow.",
				"items", obj("$ref", "#/components/schemas/StatusDetail")),
		),
		"required", []any{"code", "message"},
		"additionalProperties", false,
	)
}

func errorInfoSchema() *Object {
	return obj(
		"type", "object",
		"description", "google.rpc.ErrorInfo: why a call failed, for programs. `reason` is `TOOL_NOT_FOUND` for an unknown tool "+
			"and a tool service's own error type (`not-found`, `tool-service-error`, ...) for its errors.",
		"properties", obj(
			"@type", obj("type", "string", "enum", []any{typeErrorInfo}),
			"reason", obj("type", "string", "description", "The cause, UPPER_SNAKE_CASE for the gateway's own, the error type for a tool service's."),
			"domain", obj("type", "string", "description", "Who defines the reason: `toolgate`."),
			"metadata", obj("type", "object", "additionalProperties", obj("type", "string"),
				"description", "Context, e.g. `tool` and `service`."),
		),
		"required", []any{"@type", "reason"},
	)
}

func retryInfoSchema() *Object {
	return obj(
		"type", "object",
		"description", "google.rpc.RetryInfo: how long to wait before trying again.",
		"properties", obj(
			"@type", obj("type", "string", "enum", []any{typeRetryInfo}),
			"retry_delay", obj("type", "string", "description", "A protobuf Duration, e.g. \"1s\".", "examples", []any{"1s"}),
		),
		"required", []any{"@type", "retry_delay"},
	)
}

// prune removes the schemas nothing refers to (request messages and
// wrappers the REST mapping does not use, google.protobuf.Any, ...).
func prune(doc *Object) {
	schemas := doc.Obj("components").Obj("schemas")
	used := map[string]bool{}
	var queue []string
	var walk func(v any, skipSchemas bool)
	walk = func(v any, skipSchemas bool) {
		switch t := v.(type) {
		case *Object:
			if ref := t.Str("$ref"); strings.HasPrefix(ref, "#/components/schemas/") {
				name := strings.TrimPrefix(ref, "#/components/schemas/")
				if !used[name] {
					used[name] = true
					queue = append(queue, name)
				}
			}
			for _, k := range t.Keys() {
				if skipSchemas && t == doc.Obj("components") && k == "schemas" {
					continue
				}
				val, _ := t.Get(k)
				walk(val, skipSchemas)
			}
		case []any:
			for _, e := range t {
				walk(e, skipSchemas)
			}
		}
	}
	walk(doc, true)
	for len(queue) > 0 {
		name := queue[0]
		queue = queue[1:]
		if s, ok := schemas.Get(name); ok {
			walk(s, false)
		}
	}
	for _, k := range schemas.Keys() {
		if !used[k] {
			schemas.Delete(k)
		}
	}
}

// checkRefs fails when a $ref does not point at a component of doc.
func checkRefs(doc *Object) error {
	var bad []string
	var walk func(v any)
	walk = func(v any) {
		switch t := v.(type) {
		case *Object:
			if ref := t.Str("$ref"); ref != "" {
				parts := strings.Split(strings.TrimPrefix(ref, "#/"), "/")
				if len(parts) != 3 || parts[0] != "components" || doc.Obj("components").Obj(parts[1]).Obj(parts[2]) == nil {
					bad = append(bad, ref)
				}
			}
			for _, k := range t.Keys() {
				val, _ := t.Get(k)
				walk(val)
			}
		case []any:
			for _, e := range t {
				walk(e)
			}
		}
	}
	walk(doc)
	if len(bad) > 0 {
		return fmt.Errorf("openapi31: unresolved references %v", bad)
	}
	return nil
}

// firstSentence returns text up to its first full stop, on one line.
func firstSentence(text string) string {
	u := unwrap(text)
	if i := strings.Index(u, ". "); i >= 0 {
		u = u[:i+1]
	}
	if i := strings.Index(u, "\n"); i >= 0 {
		u = u[:i]
	}
	return strings.TrimSpace(u)
}

// unwrap joins the lines of each paragraph of a proto comment; blank lines
// and list items ("- ", "  - ") keep their line breaks.
func unwrap(text string) string {
	lines := strings.Split(strings.TrimSpace(text), "\n")
	var b strings.Builder
	for i, l := range lines {
		if i > 0 {
			prev := lines[i-1]
			trimmed := strings.TrimSpace(l)
			switch {
			case trimmed == "" || strings.TrimSpace(prev) == "" ||
				strings.HasPrefix(trimmed, "- ") || strings.HasPrefix(trimmed, "* "):
				b.WriteByte('\n')
			default:
				b.WriteByte(' ')
				l = trimmed
			}
		}
		b.WriteString(strings.TrimRight(l, " "))
	}
	return b.String()
}
