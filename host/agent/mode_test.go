package agent_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"cxlpool/api/apitest"
	"cxlpool/host"
	"cxlpool/host/agent"
)

// modeBackend is the virtual box's backend with a kernel's system-ram
// switch faked on top (the virtual box's hosts are processes: no NUMA
// nodes), failing when fail is set.
type modeBackend struct {
	host.Backend
	fail  error
	modes []host.Mode
}

func (m *modeBackend) SetMode(_ context.Context, tag string, mode host.Mode) error {
	if m.fail != nil {
		return m.fail
	}
	m.modes = append(m.modes, mode)
	return nil
}

func (m *modeBackend) Node(string) (int, error) { return 3, nil }

// TestAttachModes: devdax is the default; system-ram is refused before
// anything is reserved on a backend that cannot online memory, onlines the
// memory on one that can (the attachment names the NUMA node instead of a
// DAX path), and, when onlining fails, gives the tag back whole.
func TestAttachModes(t *testing.T) {
	r := newRig(t)
	var le *agent.LocalError
	a := r.agentAt(t, 0, apitest.UserHost0)
	for _, tt := range []struct {
		mode   host.Mode
		status int
	}{
		{host.ModeSystemRAM, http.StatusConflict}, // the virtual box's backend: no kernel to online it
		{"numa", http.StatusBadRequest},
	} {
		if _, err := a.Attach(ctxT(t), agent.AttachRequest{SizeBytes: 256 << 20, Mode: tt.mode}); !errors.As(err, &le) || le.Status != tt.status {
			t.Errorf("Attach(mode %q) = %v, want status %d", tt.mode, err, tt.status)
		}
	}
	if list, err := r.backends[0].List(ctxT(t)); err != nil || len(list) != 0 {
		t.Errorf("after refused modes the host holds %+v, %v", list, err)
	}
	if ms := r.env.Admin.GetOK("/redfish/v1/Chassis/Pool/MemoryDomains/Pool/MemoryChunks")["Members"].([]any); len(ms) != 0 {
		t.Errorf("after refused modes the box has chunks %v", ms)
	}

	mb := &modeBackend{Backend: r.backends[1]}
	ag, err := agent.New(t.Context(), agent.Config{Backend: mb, Box: r.boxClient(t, apitest.UserHost1, apitest.UserPassword)})
	if err != nil {
		t.Fatal(err)
	}
	at, err := ag.Attach(ctxT(t), agent.AttachRequest{SizeBytes: 256 << 20, Mode: host.ModeSystemRAM})
	if err != nil {
		t.Fatal(err)
	}
	if at.Mode != host.ModeSystemRAM || at.NUMANode != 3 || len(at.Env) != 1 || at.Env[0] != "CXLPOOL_NUMA_NODE=3" {
		t.Errorf("system-ram attachment: mode %q node %d env %v; want system-ram, 3, [CXLPOOL_NUMA_NODE=3]", at.Mode, at.NUMANode, at.Env)
	}
	if len(mb.modes) != 1 || mb.modes[0] != host.ModeSystemRAM {
		t.Errorf("SetMode calls %v, want [system-ram]", mb.modes)
	}
	if _, err := ag.Detach(ctxT(t), at.Tag, agent.DetachOptions{}); err != nil {
		t.Fatal(err)
	}

	mb.fail = host.ErrBusy
	if _, err := ag.Attach(ctxT(t), agent.AttachRequest{SizeBytes: 256 << 20, Mode: host.ModeSystemRAM}); !errors.Is(err, host.ErrBusy) {
		t.Errorf("Attach with a failing SetMode = %v, want ErrBusy", err)
	}
	if list, err := r.backends[1].List(ctxT(t)); err != nil || len(list) != 0 {
		t.Errorf("after a failed system-ram attach the host holds %+v, %v", list, err)
	}
}
