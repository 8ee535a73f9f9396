package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"text/tabwriter"

	"cxlpool/api/client"
	"cxlpool/internal/bytesize"
)

// printJSON writes v as indented JSON: the --json output of every
// command. Keys are stable snake_case names, sizes are bytes.
func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// list is the shape of every listing command: no arguments, one fetch
// under the command's deadline, then --json output or an aligned table.
// fetch returns the items already converted to their output form.
func list[O any](ctx context.Context, a *app, name string, args []string,
	fetch func(context.Context, *client.Client) ([]O, error), header []string, row func(O) []string) error {
	fs := a.flags(name, "")
	if _, err := parse(fs, args, 0, 0); err != nil {
		return err
	}
	ctx, cancel := a.deadline(ctx, false)
	defer cancel()
	c, err := a.client()
	if err != nil {
		return err
	}
	out, err := fetch(ctx, c)
	if err != nil {
		return explain(err)
	}
	if out == nil {
		out = []O{} // --json prints [] rather than null
	}
	if a.g.json {
		return a.printJSON(out)
	}
	rows := make([][]string, 0, len(out))
	for _, o := range out {
		rows = append(rows, row(o))
	}
	return a.table(header, rows)
}

// convert maps a fetch's items to their output form:
// convert(toChunkOut)(c.Chunks(ctx)).
func convert[T, O any](f func(T) O) func([]T, error) ([]O, error) {
	return func(items []T, err error) ([]O, error) {
		if err != nil {
			return nil, err
		}
		out := make([]O, 0, len(items))
		for _, it := range items {
			out = append(out, f(it))
		}
		return out, nil
	}
}

// table prints rows under a header, columns aligned.
func (a *app) table(header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(a.stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// size prints bytes in binary units: exactly ("4 GiB", "1536 MiB") when
// that is short, else to two decimals in the largest unit ("1022.5 GiB"
// rather than "1047040 MiB").
func size(n uint64) string {
	exact := bytesize.Format(n)
	if num, _, _ := strings.Cut(exact, " "); len(num) <= 4 {
		return exact
	}
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	i := (bits.Len64(n)-1)/10 - 1 // the largest i with n >= 2^(10(i+1)): at least 1 of unit i
	i = min(max(i, 0), len(units)-1)
	v := strconv.FormatFloat(float64(n)/float64(uint64(1)<<(10*(i+1))), 'f', 2, 64)
	v = strings.TrimRight(strings.TrimRight(v, "0"), ".")
	return v + " " + units[i]
}

// orDash shows an empty cell as "-".
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
