package capacity

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"cxlpool/api/internal/pool"
	"cxlpool/api/redfish"
	"cxlpool/dcd"
	"cxlpool/rdma"
)

func TestLostSinceRelease(t *testing.T) {
	g := func(id dcd.GrantID, st dcd.GrantState) dcd.Grant { return dcd.Grant{ID: id, State: st} }
	ids := func(gs []dcd.Grant) []dcd.GrantID {
		out := []dcd.GrantID{}
		for _, x := range gs {
			out = append(out, x.ID)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		in   []dcd.Grant
		want []dcd.GrantID
	}{
		{"never granted", nil, []dcd.GrantID{}},
		{"lost", []dcd.Grant{g(1, dcd.GrantLost)}, []dcd.GrantID{1}},
		{"shared, both lost, any order", []dcd.Grant{g(3, dcd.GrantLost), g(2, dcd.GrantLost)}, []dcd.GrantID{2, 3}},
		{"released after the loss", []dcd.Grant{g(1, dcd.GrantLost), g(2, dcd.GrantReleased)}, []dcd.GrantID{}},
		{"lost after a release", []dcd.Grant{g(1, dcd.GrantReleased), g(2, dcd.GrantLost)}, []dcd.GrantID{2}},
		{"a failed attempt after the loss", []dcd.Grant{g(1, dcd.GrantLost), g(2, dcd.GrantFailed)}, []dcd.GrantID{1}},
	} {
		if diff := cmp.Diff(tc.want, ids(lostSinceRelease(tc.in))); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
}

// TestUnrestoredEvent: an export a restart did not bring back is a
// Warning that names it, says why and what to do.
func TestUnrestoredEvent(t *testing.T) {
	reg, err := redfish.LoadRegistries()
	if err != nil {
		t.Fatal(err)
	}
	ev := unrestoredEvent(rdma.Unrestored{ID: "0123456789abcdef", Chunk: 5, Client: "rack7", Reason: "expired"})
	m := reg.Resolve(redfish.Msg{Key: ev.MessageKey, Args: ev.Args})
	if m.MessageSeverity != "Warning" || !strings.Contains(m.Message, pool.ExportURI("0123456789abcdef")) ||
		!strings.Contains(m.Message, "not restored after the restart: expired") {
		t.Errorf("got %s %q, want a Warning naming the export and why", m.MessageSeverity, m.Message)
	}
	if ev.Origin != pool.ChunkURI(5) || !strings.Contains(ev.Resolution, "poolctl export create 5 --client rack7") {
		t.Errorf("origin %q, resolution %q", ev.Origin, ev.Resolution)
	}
}
