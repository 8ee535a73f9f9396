package main

import (
	"os"
	"strings"
	"testing"

	"cxlpool/image/update"
)

// TestImageClock: off the box image the daemon does not own the clock,
// so the API gets no setter (and answers PropertyNotWritable).
func TestImageClock(t *testing.T) {
	if b, err := os.ReadFile(update.CmdlinePath); err == nil && strings.Contains(" "+string(b), " cxlpool.slot=") {
		t.Skip("running from the box image")
	}
	if imageClock() != nil {
		t.Error("imageClock() off the image is a setter, want nil")
	}
}
