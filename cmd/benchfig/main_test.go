package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const sample = `# date: 2026-12-02 00:10 UTC
# loadavg: 3.10 2.00 1.50 at the start
goos: linux
pkg: cxlpool/appliance
BenchmarkGrantLatency-2   	 300	 2133511 ns/op	 600000 commit-p50-ns	 900000 grant-p50-ns	 1.5 grant-p50/commit
BenchmarkGrantLatency-2   	 300	 2133511 ns/op	 500000 commit-p50-ns	 800000 grant-p50-ns	 1.6 grant-p50/commit
BenchmarkGrantLatency-2   	 300	 2133511 ns/op	 700000 commit-p50-ns	 700000 grant-p50-ns	 1.0 grant-p50/commit
PASS
pkg: cxlpool/dcd/sqlite
BenchmarkCommit/FULL-2    	 1000	 400000 ns/op	 120 B/op	 3 allocs/op
pkg: outside
BenchmarkExport64	13720	72887 ns/op	40000 p50-ns	293904 p99-ns	0.88 MB/s
pkg: outside
BenchmarkRaw64	11603	86189 ns/op	20000 p50-ns	382793 p99-ns	0.74 MB/s
pkg: outside
BenchmarkExport64	13720	72887 ns/op	30000 p50-ns	293904 p99-ns	0.88 MB/s
pkg: outside
BenchmarkRaw64	11603	86189 ns/op	30000 p50-ns	382793 p99-ns	0.74 MB/s
# loadavg: 4.00 3.00 2.00 at the end
`

func parsed(t *testing.T) *results {
	t.Helper()
	r := newResults()
	if err := r.parse(strings.NewReader(sample)); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestFigures(t *testing.T) {
	r := parsed(t)
	tests := []struct {
		name string
		got  string
		want string
	}{
		{"median and range, scaled", r.fig("appliance.GrantLatency", "grant-p50-ns", 1e-6, " ms"), "0.800 ms (0.700–0.900)"},
		{"package left out when unique", r.fig("GrantLatency", "grant-p50/commit", 1, ""), "1.50 (1.00–1.60)"},
		{"sub-benchmark, one run", r.fig("sqlite.Commit/FULL", "ns/op", 1e-3, " µs"), "400 µs (1 run)"},
		{"missing", r.fig("appliance.Nothing", "ns/op", 1, ""), "not measured in this run"},
		{"ratio run by run", r.ratio("outside.Export64", "p50-ns", "outside.Raw64", "p50-ns"), "1.50 (1.00–2.00)"},
		{"ratio without baseline", r.ratio("outside.Export64", "p50-ns", "outside.Redis64", "p50-ns"), "not measured in this run"},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, tc.got, tc.want)
		}
	}
}

func TestSummarize(t *testing.T) {
	tests := []struct {
		in   []float64
		want summary
	}{
		{[]float64{3, 1, 2}, summary{n: 3, med: 2, min: 1, max: 3}},
		{[]float64{4, 1, 2, 3}, summary{n: 4, med: 2.5, min: 1, max: 4}},
		{nil, summary{}},
	}
	for _, tc := range tests {
		if diff := cmp.Diff(tc.want, summarize(tc.in), cmp.AllowUnexported(summary{})); diff != "" {
			t.Errorf("summarize(%v) (-want +got):\n%s", tc.in, diff)
		}
	}
}

func TestNum(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 1234.5: "1234", 12.345: "12.3", 0.5: "0.500", 0.01234: "0.0123"} {
		if got := num(v); got != want {
			t.Errorf("num(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestTableRewritesOnlyTheBlock(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	in := write("bench.txt", sample)
	tmpl := write("t.tmpl", "On {{note \"date\"}}, load {{note \"loadavg\"}}: {{fig \"GrantLatency\" \"grant-p50/commit\" 1 \"\"}}\n")
	readme := write("README.md", "# x\n\nbefore\n"+beginMarker+"\nold table\n"+endMarker+"\nafter\n")
	if err := run(context.Background(), []string{"table", "-template", tmpl, "-readme", readme, in}, nil, new(bytes.Buffer)); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	want := "# x\n\nbefore\n" + beginMarker + "\nOn 2026-12-02 00:10 UTC, load 3.10 2.00 1.50 at the start; 4.00 3.00 2.00 at the end: 1.50 (1.00–1.60)\n" + endMarker + "\nafter\n"
	if diff := cmp.Diff(want, string(got)); diff != "" {
		t.Errorf("README (-want +got):\n%s", diff)
	}
	// Without markers nothing is written.
	bare := write("bare.md", "no markers\n")
	if err := run(context.Background(), []string{"table", "-template", tmpl, "-readme", bare, in}, nil, new(bytes.Buffer)); err == nil {
		t.Error("table on a README without markers: got nil error")
	}
}

func TestOutsideLines(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		stdin string
		want  map[string]float64
	}{
		{"poolctl", []string{"poolctl", "Export64"},
			`{"ops":1000,"elapsed_seconds":2,"mb_per_second":0.032,"p50_microseconds":45.5,"p99_microseconds":300}`,
			map[string]float64{"p50-ns": 45500, "p99-ns": 300000, "MB/s": 0.032}},
		{"redis", []string{"redis", "Redis64", "64"},
			"\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\"p50_latency_ms\",\"p95_latency_ms\",\"p99_latency_ms\",\"max_latency_ms\"\n\"GET\",\"25000.00\",\"0.040\",\"0.016\",\"0.039\",\"0.055\",\"0.087\",\"1.2\"\n",
			map[string]float64{"p50-ns": 39000, "p99-ns": 87000, "MB/s": 1.6}},
	}
	for _, tc := range tests {
		var out bytes.Buffer
		if err := run(context.Background(), tc.args, strings.NewReader(tc.stdin), &out); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		r := newResults()
		if err := r.parse(&out); err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for unit := range tc.want {
			if xs := r.lookup("outside."+tc.args[1], unit); len(xs) == 1 {
				got[unit] = xs[0]
			}
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
}

// TestRawBench runs the raw baseline on loopback for a few milliseconds.
func TestRawBench(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- rawServeCmd(ctx, []string{addr}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("raw-serve: %v", err)
		}
	})
	var out bytes.Buffer
	deadline := time.Now().Add(10 * time.Second)
	for {
		out.Reset()
		err = run(context.Background(), []string{"raw-bench", "-addr", addr, "-size", "4096", "-duration", "20ms"}, nil, &out)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond) // the listener is not up yet
	}
	if err != nil {
		t.Fatal(err)
	}
	r := newResults()
	if err := r.parse(&out); err != nil {
		t.Fatal(err)
	}
	if xs := r.lookup("outside.Raw4096", "p50-ns"); len(xs) != 1 || xs[0] <= 0 {
		t.Errorf("raw-bench output %q: want one positive p50", out.String())
	}
}
