package sqlite_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/history"
	"cxlpool/history/sqlite"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func open(t *testing.T, path string, opts sqlite.Options) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), path, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var free = history.Series{Metric: "PoolFreeBytes"}

// TestReopen: what was written is read back after the store is closed
// and opened again, bucketed min/mean/max per tier.
func TestReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "history.db")
	s := open(t, path, sqlite.Options{})
	for i, v := range []float64{10, 20, 30, 40} { // 0 s, 5 s (one fine bucket), 10 s, 15 s (the next)
		if err := s.Add(ctx, t0.Add(time.Duration(i)*5*time.Second), []history.Sample{{Series: free, Value: v}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, path, sqlite.Options{})
	defer s.Close()
	for _, tc := range []struct {
		name string
		step time.Duration
		want []history.Point
	}{
		{"fine", history.FineStep, []history.Point{
			{Time: t0, Min: 10, Mean: 15, Max: 20, Count: 2},
			{Time: t0.Add(10 * time.Second), Min: 30, Mean: 35, Max: 40, Count: 2}}},
		{"fine merged", 20 * time.Second, []history.Point{{Time: t0, Min: 10, Mean: 25, Max: 40, Count: 4}}},
		{"coarse", history.CoarseStep, []history.Point{{Time: t0, Min: 10, Mean: 25, Max: 40, Count: 4}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.Query(ctx, free, t0.Add(-time.Hour), t0.Add(time.Hour), tc.step)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("points (-want +got):\n%s", diff)
			}
		})
	}
	got, _ := s.Series(ctx)
	if diff := cmp.Diff([]history.Series{free}, got); diff != "" {
		t.Errorf("series (-want +got):\n%s", diff)
	}
}

// TestRetention: each tier keeps its own span: a fine bucket older than
// a day is gone, the coarse bucket of the same time is still there.
func TestRetention(t *testing.T) {
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "h.db"), sqlite.Options{})
	defer s.Close()
	if err := s.Add(ctx, t0, []history.Sample{{Series: free, Value: 1}}); err != nil {
		t.Fatal(err)
	}
	later := t0.Add(history.FineKeep + time.Minute)
	if err := s.Add(ctx, later, []history.Sample{{Series: free, Value: 2}}); err != nil {
		t.Fatal(err)
	}
	fine, _ := s.Query(ctx, free, t0.Add(-time.Hour), later.Add(time.Hour), history.FineStep)
	coarse, _ := s.Query(ctx, free, t0.Add(-time.Hour), later.Add(time.Hour), history.CoarseStep)
	if got, want := len(fine), 1; got != want {
		t.Errorf("fine buckets: got %d, want %d (the old one pruned)", got, want)
	}
	if got, want := len(coarse), 2; got != want {
		t.Errorf("coarse buckets: got %d, want %d", got, want)
	}
	if err := s.Add(ctx, t0.Add(history.CoarseKeep+2*history.FineKeep), []history.Sample{{Series: free, Value: 3}}); err != nil {
		t.Fatal(err)
	}
	coarse, _ = s.Query(ctx, free, t0.Add(-time.Hour), t0.Add(history.CoarseKeep+2*history.FineKeep+time.Hour), history.CoarseStep)
	if got, want := len(coarse), 1; got != want {
		t.Errorf("coarse buckets after a month: got %d, want %d", got, want)
	}
}

// TestSeriesLimit: series beyond MaxSeries are refused with ErrFull, the
// others of the round are kept, and the limit holds after a reopen.
func TestSeriesLimit(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "h.db")
	s := open(t, path, sqlite.Options{MaxSeries: 2})
	round := []history.Sample{{Series: history.Series{Metric: "A"}, Value: 1}, {Series: history.Series{Metric: "B"}, Value: 1},
		{Series: history.Series{Metric: "C"}, Value: 1}}
	if err := s.Add(ctx, t0, round); !errors.Is(err, history.ErrFull) {
		t.Errorf("Add: got %v, want ErrFull", err)
	}
	s.Close()
	s = open(t, path, sqlite.Options{MaxSeries: 2})
	defer s.Close()
	if err := s.Add(ctx, t0, round[2:]); !errors.Is(err, history.ErrFull) {
		t.Errorf("Add after reopen: got %v, want ErrFull", err)
	}
	got, _ := s.Series(ctx)
	if diff := cmp.Diff([]history.Series{{Metric: "A"}, {Metric: "B"}}, got); diff != "" {
		t.Errorf("series (-want +got):\n%s", diff)
	}
}

// TestTriggersAndAlerts: triggers and alerts (with their acknowledgement)
// survive a reopen; Triggers says whether any were ever stored.
func TestTriggersAndAlerts(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "h.db")
	s := open(t, path, sqlite.Options{})
	if _, ok, err := s.Triggers(ctx); err != nil || ok {
		t.Fatalf("Triggers on a new store: ok %v err %v, want false, nil", ok, err)
	}
	ten := 10.0
	tr := history.Trigger{ID: "PoolFreeLow", Metric: "PoolFreePercent", LowerWarning: &ten, Enabled: true}
	a := history.Alert{Trigger: tr.ID, Metric: tr.Metric, Bound: history.LowerWarning, Threshold: 10, Reading: 5,
		Since: t0, Updated: t0, Acknowledged: true, AckedBy: "admin", AckedAt: t0}
	if err := s.PutTrigger(ctx, tr); err != nil {
		t.Fatal(err)
	}
	if err := s.PutAlert(ctx, a); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open(t, path, sqlite.Options{})
	defer s.Close()
	ts, ok, err := s.Triggers(ctx)
	if err != nil || !ok {
		t.Fatalf("Triggers: ok %v err %v", ok, err)
	}
	if diff := cmp.Diff([]history.Trigger{tr}, ts); diff != "" {
		t.Errorf("triggers (-want +got):\n%s", diff)
	}
	as, _ := s.Alerts(ctx)
	if diff := cmp.Diff([]history.Alert{a}, as); diff != "" {
		t.Errorf("alerts (-want +got):\n%s", diff)
	}
	if err := s.DeleteAlert(ctx, a.Trigger, a.Subject); err != nil {
		t.Fatal(err)
	}
	if as, _ := s.Alerts(ctx); len(as) != 0 {
		t.Errorf("alerts after delete: %v", as)
	}
}

// TestQuerySameSecond: a sample taken in the second the window ends in
// is in the window.
func TestQuerySameSecond(t *testing.T) {
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "h.db"), sqlite.Options{})
	defer s.Close()
	if err := s.Add(ctx, t0.Add(100*time.Millisecond), []history.Sample{{Series: free, Value: 1}}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Query(ctx, free, t0.Add(-time.Hour), t0.Add(300*time.Millisecond), history.FineStep)
	if err != nil || len(got) != 1 {
		t.Errorf("Query: got %v, %v, want the one bucket", got, err)
	}
}
