package sqlite

import (
	"regexp"
	"strings"
	"testing"
)

// historyScan matches a query plan step that reads a whole table of
// history: grants, extents, chunks and placements are never deleted, so
// such a step costs more with every grant the box has ever made. Scanning
// a partial index of live rows is fine (it holds only those).
var historyScan = regexp.MustCompile(`^SCAN ([a-z_]+)\b(.*)$`)

// boundedTables (by name: the hot statements alias every table of
// history) are tables whose size the hardware bounds (hosts, regions)
// or that only grow by a failure (orphans): a scan of one stays cheap.
var boundedTables = map[string]bool{"hosts": true, "regions": true, "orphan_extents": true, "orphans": true}

// TestHotStatementsSkipHistory checks the plan of every statement of the
// grant path: none may scan a table that keeps history, so a grant's cost
// does not grow with the ledger's age.
func TestHotStatementsSkipHistory(t *testing.T) {
	l, _ := openTemp(t, Options{})
	defer l.Close()
	for _, q := range append(hotStatements(), qActiveGrants, qActiveExtents) {
		args := make([]any, strings.Count(q, "?"))
		rows, err := l.wc.QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+q, args...)
		if err != nil {
			t.Fatalf("explain %q: %v", q, err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
		for _, step := range plan {
			m := historyScan.FindStringSubmatch(step)
			if m == nil || boundedTables[m[1]] {
				continue
			}
			if strings.Contains(m[2], "USING INDEX grants_one_active") || strings.Contains(m[2], "USING INDEX chunks_live_by_region") {
				continue
			}
			t.Errorf("%s\n  scans history (%q); plan:\n  %s", q, step, strings.Join(plan, "\n  "))
		}
	}
}
