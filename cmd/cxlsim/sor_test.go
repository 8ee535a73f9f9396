package main

import (
	"context"
	"io"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRegionSetFlag(t *testing.T) {
	tests := []struct {
		in   string
		want []bool // for 3 regions
		str  string
	}{
		{"all", []bool{true, true, true}, "all"},
		{"none", []bool{false, false, false}, "none"},
		{"", []bool{false, false, false}, "none"},
		{"1", []bool{false, true, false}, "1"},
		{"0, 2", []bool{true, false, true}, "0,2"},
	}
	for _, tt := range tests {
		var r regionSet
		if err := r.Set(tt.in); err != nil {
			t.Fatalf("Set(%q): %v", tt.in, err)
		}
		got, err := r.perRegion(3)
		if err != nil {
			t.Fatalf("perRegion(%q): %v", tt.in, err)
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("Set(%q) per region (-want +got):\n%s", tt.in, diff)
		}
		if s := r.String(); s != tt.str {
			t.Errorf("Set(%q).String() = %q, want %q", tt.in, s, tt.str)
		}
	}
	for _, bad := range []string{"x", "-1", "0,,1", "all,1"} {
		var r regionSet
		if err := r.Set(bad); err == nil {
			t.Errorf("Set(%q) succeeded", bad)
		}
	}
	var r regionSet
	if err := r.Set("3"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.perRegion(2); err == nil {
		t.Errorf("region 3 of 2 accepted")
	}
	for _, args := range [][]string{
		{"--listen", "tcp://127.0.0.1:0", "--sanitize-on-release", "5"},
		{"--listen", "tcp://127.0.0.1:0", "--sor-configurable", "x"},
	} {
		if err := run(context.Background(), args, io.Discard); err == nil {
			t.Errorf("run(%q) succeeded", args)
		}
	}
}
