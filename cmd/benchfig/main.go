// Command benchfig turns the output of `make bench` into the README's
// Measured table, so the figures there are never kept by hand: every
// benchmark runs several times and each figure is its median with the
// range, beside the load average the run saw.
//
//	benchfig table -template bench/measured.md.tmpl [-readme README.md] bench.txt...
//
// reads go test -bench output (and the lines bench/outside.sh writes in the
// same format), renders the template (text/template; {{fig "Pkg.Name"
// "unit" scale "suffix"}} is a median with its range) and replaces what
// lies between the README's bench markers, or prints it without -readme.
//
//	benchfig raw-serve ADDR
//	benchfig raw-bench -addr ADDR -size N -duration D [-name NAME]
//
// are the raw TCP baseline measured from outside, with the client shape of
// `poolctl export bench`: one connection, one request at a time, the reply
// carrying size bytes. raw-bench, like the poolctl and redis subcommands
// (which read `poolctl --json export bench` and `redis-benchmark --csv`
// on stdin), prints one benchmark line, so one parser reads everything.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchfig:", err)
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

var errUsage = errors.New("usage: benchfig table|raw-serve|raw-bench|poolctl|redis [ARGS]")

func run(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) == 0 {
		return errUsage
	}
	switch args[0] {
	case "table":
		return tableCmd(args[1:], stdout)
	case "raw-serve":
		return rawServeCmd(ctx, args[1:])
	case "raw-bench":
		return rawBenchCmd(ctx, args[1:], stdout)
	case "poolctl":
		return poolctlCmd(args[1:], stdin, stdout)
	case "redis":
		return redisCmd(args[1:], stdin, stdout)
	}
	return fmt.Errorf("%w: unknown command %q", errUsage, args[0])
}
