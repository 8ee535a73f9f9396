package sqlite_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"cxlpool/history"
	"cxlpool/history/sqlite"
)

// TestSizeOfADay measures the store after HISTORY_SIZE rounds (8640 is a
// day) of a box's series: the bytes per kept bucket and the time per
// round, for the README. Skipped without HISTORY_SIZE.
func TestSizeOfADay(t *testing.T) {
	rounds, _ := strconv.Atoi(os.Getenv("HISTORY_SIZE"))
	if rounds <= 0 {
		t.Skip("HISTORY_SIZE=8640 measures a day of history")
	}
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "h.db")
	s := open(t, path, sqlite.Options{})
	const series = 48 // 8 hosts × 3, pool 9, sensors ~12, exports 2, CHMU 2
	var round []history.Sample
	for i := range series {
		round = append(round, history.Sample{Series: history.Series{Metric: "M" + strconv.Itoa(i%6), Subject: "S" + strconv.Itoa(i)}})
	}
	start := time.Now()
	for r := range rounds {
		for i := range round {
			round[i].Value = float64(r * i)
		}
		if err := s.Add(ctx, t0.Add(time.Duration(r)*history.FineStep), round); err != nil {
			t.Fatal(err)
		}
	}
	per := time.Since(start) / time.Duration(rounds)
	if err := s.Close(); err != nil { // the last close checkpoints the WAL into the file
		t.Fatal(err)
	}
	var size int64
	for _, f := range []string{path, path + "-wal"} {
		if st, err := os.Stat(f); err == nil {
			size += st.Size()
		}
	}
	buckets := series * (rounds + (rounds+29)/30) // fine, and coarse (one per 30 rounds)
	full := series * int(history.FineKeep/history.FineStep+history.CoarseKeep/history.CoarseStep)
	t.Logf("%d series, %d rounds: %.2f MiB on disk, %.0f B per bucket, %s per round; a month's steady state (%d buckets): ~%.0f MiB",
		series, rounds, float64(size)/(1<<20), float64(size)/float64(buckets), per, full, float64(size)/float64(buckets)*float64(full)/(1<<20))
}
