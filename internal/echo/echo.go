// Package echo is the echo service's logic, used by tests and benchmarks.
// What it does is chosen by the call's arguments:
//
//	{"msg": "hi"}                          → "hi"
//	{"mode": "stream", "n": 1000}          → chunks "0,", "1,", … "999"
//	{"mode": "sleep", "ms": 250, "msg": …} → sleeps (until the deadline at most), then answers msg
//	{"mode": "fail", "type": "not-found", "message": "…"} → that error
//	{"mode": "user"}                       → the envelope's user
//	{"mode": "config"}                     → the tool's config values, as JSON
//	{"mode": "property", "name": "traceparent"} → that property of the request message
//	anything else                          → the arguments, as JSON
package echo

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/toolgate/toolgate/toolservice"
)

// Handle is the echo service's toolservice.Handler.
func Handle(ctx context.Context, r *toolservice.Request) (any, error) {
	a := r.Arguments
	switch a["mode"] {
	case "stream":
		n := intArg(a, "n", 10)
		if n < 1 {
			return nil, toolservice.Errorf("invalid-argument", "n must be at least 1")
		}
		for i := range n - 1 {
			if err := r.Send(strconv.Itoa(i) + ","); err != nil {
				return nil, err
			}
			if d := intArg(a, "gap_ms", 0); d > 0 {
				if err := sleep(ctx, time.Duration(d)*time.Millisecond); err != nil {
					return nil, err
				}
			}
		}
		return strconv.Itoa(n - 1), nil
	case "sleep":
		if err := sleep(ctx, time.Duration(intArg(a, "ms", 100))*time.Millisecond); err != nil {
			return nil, toolservice.Errorf("timeout", "deadline passed while sleeping")
		}
		if m, ok := a["msg"]; ok {
			return m, nil
		}
		return "slept", nil
	case "fail":
		typ, _ := a["type"].(string)
		msg, _ := a["message"].(string)
		if msg == "" {
			msg = "failed as asked"
		}
		if typ == "" {
			return nil, fmt.Errorf("%s", msg) // reported as tool-service-error
		}
		return nil, toolservice.Errorf(typ, "%s", msg)
	case "user":
		return r.User, nil
	case "config":
		return r.Config, nil
	case "property":
		name, _ := a["name"].(string)
		return r.Properties[name], nil
	}
	if m, ok := a["msg"]; ok {
		return m, nil
	}
	return a, nil
}

func intArg(a map[string]any, k string, def int) int {
	switch v := a[k].(type) {
	case json.Number:
		if n, err := v.Int64(); err == nil {
			return int(n)
		}
		if f, err := v.Float64(); err == nil {
			return int(f)
		}
	case float64: // a Request a test built itself
		return int(v)
	}
	return def
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Announcement is what the echo service announces: the echo tool.
func Announcement() *toolservice.Announcement {
	return &toolservice.Announcement{Tools: []toolservice.Tool{{
		Name:        "echo",
		Description: "Echo the arguments back (see internal/echo for its modes)",
	}}}
}
