package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/toolgate/toolgate/internal/audit"
)

// The exit statuses of gateway audit: 0 the chain is intact, 1 a line is
// wrong, 2 bad arguments or a file that cannot be read.
const (
	auditIntact   = 0
	auditTampered = 1
	auditUsage    = 2
)

const auditUsageText = `usage: gateway audit verify [--anchor SEQ:DIGEST]... FILE [FILE...]

Checks the hash chain of an audit log (--audit): every line's prev is the
SHA-256 of the line before it and its seq the next, so a line changed,
removed or moved is found. Give a rotated log's files oldest first (- reads
the standard input). Each --anchor is a head the gateway logged ("audit log
head", "audit log closed": seq and head), kept elsewhere: the line with that
seq must have that digest, which finds lines changed or removed at the end.

Exit status: 0 intact, 1 a line is wrong (its file and number, and what is
wrong, are printed), 2 bad arguments or an unreadable file.
`

// runAudit runs gateway audit with args (after "audit").
func runAudit(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "verify" {
		fmt.Fprint(stderr, auditUsageText)
		return auditUsage
	}
	fs := flag.NewFlagSet("gateway audit verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, auditUsageText) }
	var anchors []audit.Anchor
	fs.Func("anchor", "a line known from elsewhere: SEQ:DIGEST (or DIGEST)", func(s string) error {
		a, err := audit.ParseAnchor(s)
		anchors = append(anchors, a)
		return err
	})
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return auditIntact
		}
		return auditUsage
	}
	if fs.NArg() == 0 {
		fmt.Fprint(stderr, auditUsageText)
		return auditUsage
	}
	var inputs []audit.Input
	for _, name := range fs.Args() {
		if name == "-" {
			inputs = append(inputs, audit.Input{Name: "-", R: stdin})
			continue
		}
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprintln(stderr, "gateway audit verify:", err)
			return auditUsage
		}
		defer f.Close()
		inputs = append(inputs, audit.Input{Name: name, R: f})
	}
	res, err := audit.Verify(inputs, anchors)
	var p *audit.Problem
	switch {
	case errors.As(err, &p):
		fmt.Fprintln(stdout, "TAMPERED:", p)
		return auditTampered
	case err != nil:
		fmt.Fprintln(stderr, "gateway audit verify:", err)
		return auditUsage
	}
	fmt.Fprintln(stdout, describe(res, len(anchors)))
	return auditIntact
}

// describe says what an intact chain holds.
func describe(r audit.Result, anchors int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "intact: %d lines (seq %d to %d), %d calls", r.Lines, r.First, r.Last, r.Calls)
	if r.Start == audit.Genesis {
		b.WriteString("; the chain starts here")
	} else {
		fmt.Fprintf(&b, "; continues from %s (the last line of the file before)", r.Start)
	}
	if r.Chains > 1 {
		fmt.Fprintf(&b, "; %d chains (a gateway on its standard output started %d times)", r.Chains, r.Chains)
	}
	fmt.Fprintf(&b, "; head %d:%s", r.Last, r.Head)
	if r.Dropped > 0 {
		fmt.Fprintf(&b, "; %d calls not written (dropped lines)", r.Dropped)
	}
	if r.TornEnd > 0 {
		fmt.Fprintf(&b, "; ends with a line cut short (%d bytes: the gateway stopped while writing it)", r.TornEnd)
	}
	switch {
	case r.Closed:
		b.WriteString("; ends with a close line")
	case anchors == 0:
		b.WriteString("; no close line at its end (the gateway is writing it, or was killed, or lines were removed from the end: --anchor checks)")
	}
	if anchors > 0 {
		fmt.Fprintf(&b, "; %d anchors found", anchors)
	}
	return b.String()
}
