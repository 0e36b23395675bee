package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// opCaller runs each call as a durable operation over REST: POST
// /v1/tools/{tool}:start, then POST /v1/operations/{id}:wait until it is
// done. Its latency is start → done as a client sees it; the gateway needs
// --operations.
type opCaller struct {
	client   *http.Client
	base     string
	startURL string
	body     []byte
	auth     string
	want     string
}

func newOperation(o Options, msg string) *opCaller {
	c := &opCaller{client: newHTTPClient(o), base: "http://" + o.HTTPAddr, want: msg}
	c.startURL = c.base + "/v1/tools/" + o.Tool + ":start"
	c.body, _ = json.Marshal(map[string]any{"arguments": map[string]any{"msg": msg}})
	if o.APIKey != "" {
		c.auth = "Bearer " + o.APIKey
	}
	return c
}

// operation is the part of a google.longrunning.Operation read here.
type operation struct {
	Name     string `json:"name"`
	Done     bool   `json:"done"`
	Response *struct {
		Output string `json:"output"`
	} `json:"response"`
	Error *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func (c *opCaller) post(ctx context.Context, url string, body []byte) (operation, error) {
	var op operation
	resp, err := postJSON(ctx, c.client, url, body, "", c.auth)
	if err != nil {
		return op, err
	}
	defer resp.Body.Close()
	err = json.NewDecoder(resp.Body).Decode(&op)
	_, _ = io.Copy(io.Discard, resp.Body) // keep the connection reusable
	return op, err
}

func (c *opCaller) Call(ctx context.Context, _ int) (int, error) {
	op, err := c.post(ctx, c.startURL, c.body)
	if err != nil {
		return 0, fmt.Errorf("start: %w", err)
	}
	id, ok := strings.CutPrefix(op.Name, "operations/")
	if !ok {
		return 0, fmt.Errorf("start answered the name %q", op.Name)
	}
	wait := c.base + "/v1/operations/" + id + ":wait"
	for !op.Done {
		if op, err = c.post(ctx, wait, []byte(`{"timeout":"30s"}`)); err != nil {
			return 0, fmt.Errorf("wait: %w", err)
		}
	}
	switch {
	case op.Error != nil:
		return 0, fmt.Errorf("operation failed: %d %s", op.Error.Code, op.Error.Message)
	case op.Response == nil || op.Response.Output != c.want:
		return 1, errors.New("the operation's output differs from the message sent")
	}
	return 1, nil
}

func (c *opCaller) Close() { c.client.CloseIdleConnections() }
