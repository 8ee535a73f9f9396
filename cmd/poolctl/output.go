package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"

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

// table prints rows under a header, columns aligned.
func (a *app) table(header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(a.stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// size prints bytes in binary units ("4 GiB").
func size(n uint64) string { return bytesize.Format(n) }

// orDash shows an empty cell as "-".
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
