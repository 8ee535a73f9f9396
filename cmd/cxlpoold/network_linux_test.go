package main

import (
	"context"
	"io"
	"log/slog"
	"testing"
)

// TestImageNetworkOffTheImage: a developer's machine gets no network
// hook, so the API refuses changes instead of editing a file the host
// does not read.
func TestImageNetworkOffTheImage(t *testing.T) {
	if onImage("/proc/cmdline") {
		t.Skip("running on the box image")
	}
	if nw := imageNetwork(context.Background(), slog.New(slog.NewTextHandler(io.Discard, nil))); nw != nil {
		t.Errorf("imageNetwork off the image: got %T, want nil", nw)
	}
}
