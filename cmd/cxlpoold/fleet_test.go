package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRunFleetPortTaken: the embedded fleet server's port is taken when
// the daemon starts. The API serves all the same; the Manager's health is
// Warning with a Condition naming the taken address; once the port is
// free the box joins by itself and the warning goes.
func TestRunFleetPortTaken(t *testing.T) {
	squat, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer squat.Close()
	fleetAddr := squat.Addr().String()
	const pw = "fleet-test-admin-1"
	t.Setenv("CXLPOOL_ADMIN_PASSWORD", pw)
	addr, out := freeAddr(t), &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--data", filepath.Join(t.TempDir(), "var"), "--listen", addr, "--http",
			"--fleet-client-listen", fleetAddr, "--fleet-retry-max", "200ms", "--sim-capacity", "16GiB", "--log-level", "error"}, out, io.Discard)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	type status struct {
		Health     string
		Conditions []struct{ MessageId, Message string }
	}
	manager := func() (status, bool) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/redfish/v1/Managers/FM", nil)
		req.SetBasicAuth("admin", pw)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return status{}, false
		}
		defer resp.Body.Close()
		var m struct{ Status status }
		if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&m) != nil {
			return status{}, false
		}
		return m.Status, true
	}
	poll := func(what string, cond func(status) bool) status {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			select {
			case err := <-done:
				t.Fatalf("run ended: %v\n%s", err, out)
			default:
			}
			if st, ok := manager(); ok && cond(st) {
				return st
			}
			if time.Now().After(deadline) {
				st, _ := manager()
				t.Fatalf("%s: not within 60s (manager status %+v)\n%s", what, st, out)
			}
			time.Sleep(20 * time.Millisecond) // poll interval
		}
	}
	st := poll("the API serves with the fleet warning", func(st status) bool { return st.Health == "Warning" })
	if len(st.Conditions) != 1 || !strings.Contains(st.Conditions[0].Message, fleetAddr) ||
		!strings.HasSuffix(st.Conditions[0].MessageId, ".CouldNotEstablishConnection") {
		t.Errorf("manager status %+v: want one CouldNotEstablishConnection condition naming %s", st, fleetAddr)
	}
	squat.Close()
	poll("the box joins once the port is free", func(st status) bool { return st.Health == "OK" && len(st.Conditions) == 0 })
}
