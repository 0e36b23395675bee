package openapi31

import (
	"errors"
	"fmt"
)

// The routes of google.longrunning.Operations (docs/operations.md) are
// served by the gateway's own HTTP code, not by grpc-gateway, so
// protoc-gen-openapiv2 does not describe them: addOperations writes them,
// in Swagger 2.0 form, into the input before it is converted like the rest.
const operationsSwagger = `{
  "tags": [{"name": "Operations", "description": "google.longrunning.Operations: the caller's durable operations (started by StartTool), on any gateway of the deployment; served with --operations."}],
  "paths": {
    "/v1/operations": {
      "get": {
        "summary": "ListOperations lists the caller's operations, sorted by id, page by page.",
        "operationId": "Operations_ListOperations",
        "responses": {"200": {"description": "A successful response.", "schema": {"$ref": "#/definitions/ListOperationsResponse"}}},
        "parameters": [
          {"name": "filter", "description": "done=true keeps the operations that ended, done=false those still running; empty or absent keeps all.", "in": "query", "required": false, "type": "string", "enum": ["", "done=true", "done=false", "done = true", "done = false"]},
          {"name": "page_size", "description": "The most operations on a page; 0 is the gateway's default.", "in": "query", "required": false, "type": "integer", "format": "int32"},
          {"name": "page_token", "description": "The next_page_token of the previous page.", "in": "query", "required": false, "type": "string"}
        ],
        "tags": ["Operations"]
      }
    },
    "/v1/operations/{id}": {
      "get": {
        "summary": "GetOperation answers the caller's operation as it stands.",
        "operationId": "Operations_GetOperation",
        "responses": {"200": {"description": "A successful response.", "schema": {"$ref": "#/definitions/Operation"}}},
        "parameters": [{"name": "id", "description": "The operation's id (its name without operations/).", "in": "path", "required": true, "type": "string"}],
        "tags": ["Operations"]
      },
      "delete": {
        "summary": "DeleteOperation forgets the caller's operation; a running one is cancelled at its tool service.",
        "operationId": "Operations_DeleteOperation",
        "responses": {"200": {"description": "A successful response.", "schema": {"$ref": "#/definitions/Empty"}}},
        "parameters": [{"name": "id", "description": "The operation's id (its name without operations/).", "in": "path", "required": true, "type": "string"}],
        "tags": ["Operations"]
      }
    },
    "/v1/operations/{id}:cancel": {
      "post": {
        "summary": "CancelOperation ends the caller's running operation as cancelled and tells its tool service; one that ended stays as it is.",
        "operationId": "Operations_CancelOperation",
        "responses": {"200": {"description": "A successful response.", "schema": {"$ref": "#/definitions/Empty"}}},
        "parameters": [
          {"name": "id", "description": "The operation's id (its name without operations/).", "in": "path", "required": true, "type": "string"},
          {"name": "body", "in": "body", "required": true, "schema": {"$ref": "#/definitions/CancelOperationBody"}}
        ],
        "tags": ["Operations"]
      }
    },
    "/v1/operations/{id}:stream": {
      "get": {
        "summary": "StreamOperation returns the caller's operation's answer chunk by chunk: the chunks kept so far, then each as the tool service sends it.",
        "operationId": "Operations_StreamOperation",
        "responses": {"200": {"description": "A successful response.", "schema": {"$ref": "#/definitions/StreamToolResponse"}}},
        "parameters": [
          {"name": "id", "description": "The operation's id (its name without operations/).", "in": "path", "required": true, "type": "string"},
          {"name": "from_chunk", "description": "The index of the first chunk wanted (default 0: all of them).", "in": "query", "required": false, "type": "integer", "format": "int32", "minimum": 0},
          {"name": "Last-Event-ID", "description": "Server-sent events: the id (chunk index) of the last event received; the stream resumes with the chunk after it. The query's from_chunk wins over it.", "in": "header", "required": false, "type": "string", "pattern": "^[0-9]{0,9}$"}
        ],
        "tags": ["Operations"]
      }
    },
    "/v1/operations/{id}:wait": {
      "post": {
        "summary": "WaitOperation answers the caller's operation once it has ended, or as it stands when the timeout passes.",
        "operationId": "Operations_WaitOperation",
        "responses": {"200": {"description": "A successful response.", "schema": {"$ref": "#/definitions/Operation"}}},
        "parameters": [
          {"name": "id", "description": "The operation's id (its name without operations/).", "in": "path", "required": true, "type": "string"},
          {"name": "body", "in": "body", "required": true, "schema": {"$ref": "#/definitions/WaitOperationBody"}}
        ],
        "tags": ["Operations"]
      }
    }
  },
  "definitions": {
    "ListOperationsResponse": {
      "type": "object",
      "properties": {
        "operations": {"type": "array", "items": {"type": "object", "$ref": "#/definitions/Operation"}, "description": "The operations of the page."},
        "next_page_token": {"type": "string", "description": "The page_token of the next page; absent on the last."}
      }
    },
    "Empty": {"type": "object", "additionalProperties": true, "description": "An empty answer (google.protobuf.Empty): the gateway answers {}."},
    "CancelOperationBody": {
      "type": "object",
      "additionalProperties": false,
      "properties": {"name": {"type": "string", "description": "Allowed and ignored: the path names the operation."}}
    },
    "WaitOperationBody": {
      "type": "object",
      "additionalProperties": false,
      "properties": {
        "name": {"type": "string", "description": "Allowed and ignored: the path names the operation."},
        "timeout": {"type": "string", "description": "How long to wait at most (default 10s, at most 60s)."}
      }
    }
  }
}`

// opsErrors are the error tables of the operations' routes.
var opsErrors = map[string][]int{
	"ListOperations":  {400, 401, 403, 405, 406, 429, 500, 503},
	"GetOperation":    {401, 403, 404, 405, 406, 429, 500, 503},
	"DeleteOperation": {401, 403, 404, 405, 406, 429, 500, 503},
	"CancelOperation": {400, 401, 403, 404, 405, 406, 413, 415, 429, 500, 503},
	"WaitOperation":   {400, 401, 403, 404, 405, 406, 413, 415, 429, 500, 503},
	"StreamOperation": {400, 401, 403, 404, 405, 406, 429, 500, 503},
}

func init() {
	for k, v := range opsErrors {
		opErrors[k] = v
	}
	streamOps["StreamOperation"] = true
}

// addOperations adds the operations' routes, definitions and tag to the
// Swagger document src.
func addOperations(src *Object) error {
	v, err := decode([]byte(operationsSwagger))
	if err != nil {
		return fmt.Errorf("openapi31: the operations' routes: %w", err)
	}
	add, ok := v.(*Object)
	if !ok {
		return errors.New("openapi31: the operations' routes are not an object")
	}
	timeout := add.Obj("definitions").Obj("WaitOperationBody").Obj("properties").Obj("timeout")
	timeout.Set("pattern", DurationPattern)
	timeout.Set("examples", []any{"5s", "200ms"})
	paths, defs := src.Obj("paths"), src.Obj("definitions")
	for _, part := range []struct{ from, to *Object }{{add.Obj("paths"), paths}, {add.Obj("definitions"), defs}} {
		for _, k := range part.from.Keys() {
			if _, dup := part.to.Get(k); dup {
				return fmt.Errorf("openapi31: %s is in the Swagger document already", k)
			}
			x, _ := part.from.Get(k)
			part.to.Set(k, x)
		}
	}
	tags, _ := src.Get("tags")
	list, _ := tags.([]any)
	more, _ := add.Get("tags")
	extra, _ := more.([]any)
	src.Set("tags", append(list, extra...))
	return nil
}
