//go:build unix

package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"cxlpool/fabric/serial"
	"cxlpool/sim"
)

func TestStartGate(t *testing.T) {
	for _, tt := range []struct {
		name    string
		open    bool // write the byte before closing
		wantErr bool
	}{
		{"opened", true, false},
		{"withdrawn", false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			go func() {
				if tt.open {
					w.Write([]byte{1})
				}
				w.Close()
			}()
			// waitStartGate owns (and closes) the descriptor, as the
			// daemon owns the one it inherits.
			fd, err := dupFD(r)
			r.Close()
			if err != nil {
				t.Fatal(err)
			}
			if err := waitStartGate(fd); (err != nil) != tt.wantErr {
				t.Errorf("waitStartGate: got %v, want error %v", err, tt.wantErr)
			}
		})
	}
}

// TestRunWaitsAtTheGate: a withdrawn start ends the daemon before it
// touches its data directory.
func TestRunWaitsAtTheGate(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	fd, err := dupFD(r)
	r.Close()
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	data := filepath.Join(t.TempDir(), "var")
	err = run(context.Background(), []string{"--data", data, "--http", "--fleet-client-listen", "127.0.0.1:0", "--start-gate", strconv.Itoa(fd)}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "start-gate") {
		t.Errorf("run with a withdrawn gate: got %v, want the gate's error", err)
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Errorf("data directory after a withdrawn start: %v, want none", err)
	}
}

// dupFD returns a new descriptor for f's file that the caller owns.
func dupFD(f *os.File) (int, error) { return unix.Dup(int(f.Fd())) }

// TestRunRealDevice runs the daemon on a device at the end of a link (the
// box image's case), where the API is built while the device is
// discovered: once the API answers, it lists the device's hosts.
func TestRunRealDevice(t *testing.T) {
	scfg := sim.DefaultConfig()
	scfg.Capacity = 16 << 30
	box, err := sim.New(scfg)
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	dev := "unix:" + filepath.Join(t.TempDir(), "box.sock")
	l, err := serial.Listen(dev)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() {
		defer close(served)
		box.ServeListener(ctx, l)
	}()
	defer func() { cancel(); <-served }()

	const pw = "vmtest-Passw0rd"
	t.Setenv("CXLPOOL_ADMIN_PASSWORD", pw)
	addr, out := freeAddr(t), &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--device", dev, "--data", t.TempDir(), "--listen", addr, "--http", "--fleet-client-listen", "127.0.0.1:0", "--log-level", "error"}, out, io.Discard)
	}()
	var systems struct {
		Count int `json:"Members@odata.count"`
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/redfish/v1/Systems", nil)
		req.SetBasicAuth("admin", pw)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&systems)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && err == nil {
				break
			}
		}
		select {
		case err := <-done:
			t.Fatalf("run ended before serving: %v\n%s", err, out)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("API did not answer: %v\n%s", err, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if systems.Count != 8 {
		t.Errorf("Systems: got %d members, want 8 (one per head)", systems.Count)
	}
	if !strings.Contains(out.String(), "8 heads") {
		t.Errorf("startup output lacks the device summary:\n%s", out)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("run: %v", err)
	}
}
