package appliance_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"cxlpool/appliance"
)

// A device that cannot be reached stops the daemon with a clear error and
// nothing left open. A USB address reaches the USB link: without a bridge
// attached (or in a build without the usb tag) that is such an error.
func TestUnreachableDevice(t *testing.T) {
	for _, tc := range []struct{ addr, want string }{
		{"usb:0403:6001?serial=NO-SUCH-BRIDGE", "usb"},
		{"usb:zz", "usb"},
		{"tcp://127.0.0.1:1", "127.0.0.1:1"},
		{"bogus:thing", "bogus:thing"},
	} {
		_, err := appliance.Open(context.Background(), appliance.Config{Device: tc.addr, DataDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%q) = %v, want an error naming %q", tc.addr, err, tc.want)
		}
	}
}
