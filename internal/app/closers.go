package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
)

// closers is the stack of what New has opened: each step of New pushes
// how to close what it opened as soon as it has opened it, so that a
// later step that fails, or the end of the gateway, unwinds them, the
// last opened first. A shutdown closes some of them at its own time (the
// bridge, the broker client, the registry's sources, the traces: through
// the closer push returned); unwinding skips those.
type closers struct {
	mu    sync.Mutex
	stack []*closer
}

// closer closes one thing, once: whoever runs it first closes it.
type closer struct {
	name string
	// close closes the thing, returning by ctx's end: a close that may
	// wait longer (for a broker that does not answer) is left running
	// then, and says so in its error.
	close func(ctx context.Context) error
	begun atomic.Bool
}

// push puts the closing of what was just opened, named, on top of the
// stack.
func (s *closers) push(name string, close func(ctx context.Context) error) *closer {
	c := &closer{name: name, close: close}
	s.mu.Lock()
	s.stack = append(s.stack, c)
	s.mu.Unlock()
	return c
}

// run closes c's thing within ctx, unless its closing has begun already
// (then nil at once: the first caller has its outcome). The error names
// the thing.
func (c *closer) run(ctx context.Context) error {
	if !c.begun.CompareAndSwap(false, true) {
		return nil
	}
	if err := c.close(ctx); err != nil {
		return fmt.Errorf("%s: %w", c.name, err)
	}
	return nil
}

// unwind closes what is on the stack and was not closed yet, the last
// pushed first, each within ctx, and returns their errors.
func (s *closers) unwind(ctx context.Context) []error {
	s.mu.Lock()
	stack := s.stack
	s.stack = nil
	s.mu.Unlock()
	var errs []error
	for i := len(stack) - 1; i >= 0; i-- {
		if err := stack[i].run(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// leftOpen is the error of a close that had not finished by its
// context's end: what it left, for the log line that names it all.
type leftOpen struct{ left abandoned }

func (e *leftOpen) Error() string { return "left open: " + e.left.String() }

// leftBy is what err, a closer's, says was left open.
func leftBy(err error) abandoned {
	if lo := (*leftOpen)(nil); errors.As(err, &lo) {
		return lo.left
	}
	return abandoned{}
}

// closeFunc is f, which takes no context and returns at once, as a
// close.
func closeFunc(f func() error) func(context.Context) error {
	return func(context.Context) error { return f() }
}

// closeListener is l's close; a listener its server has closed already
// is closed.
func closeListener(l net.Listener) func(context.Context) error {
	return func(context.Context) error {
		if err := l.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			return err
		}
		return nil
	}
}
