package main

import "testing"

func TestSize(t *testing.T) {
	for _, tc := range []struct {
		in   uint64
		want string
	}{
		{0, "0 B"},
		{100, "100 B"},
		{12345, "12.06 KiB"},
		{2 << 30, "2 GiB"},
		{1536 << 20, "1536 MiB"},
		{1047040 << 20, "1022.5 GiB"},
		{1 << 40, "1 TiB"},
		{1<<40 - 1, "1024 GiB"},
		{1<<64 - 1, "16 EiB"},
	} {
		if got := size(tc.in); got != tc.want {
			t.Errorf("size(%d): got %q, want %q", tc.in, got, tc.want)
		}
	}
}
