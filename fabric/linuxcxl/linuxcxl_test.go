package linuxcxl

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite golden files")

// unpack writes a txtar-style fixture ("-- path --" headers; a body of
// "symlink: TARGET" makes a symlink) under dir.
func unpack(t *testing.T, archive, dir string) {
	t.Helper()
	b, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	var name string
	var body strings.Builder
	flush := func() {
		if name == "" {
			return
		}
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if target, ok := strings.CutPrefix(body.String(), "symlink: "); ok {
			err = os.Symlink(strings.TrimSpace(target), p)
		} else {
			err = os.WriteFile(p, []byte(body.String()), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
		body.Reset()
	}
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if h, ok := strings.CutPrefix(line, "-- "); ok && strings.HasSuffix(strings.TrimSpace(h), " --") {
			flush()
			name = strings.TrimSuffix(strings.TrimSpace(h), " --")
			continue
		}
		if name != "" {
			body.WriteString(line)
		}
	}
	flush()
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s (-want +got):\n%s", name, diff)
	}
}

func TestListFixture(t *testing.T) {
	root := t.TempDir()
	unpack(t, filepath.Join("testdata", "sysfs.txtar"), root)
	// The fixture has no /dev/cxl: the mailbox answer records why.
	devs, err := New(Options{SysRoot: filepath.Join(root, "sys"), DevRoot: filepath.Join(root, "dev")}).List()
	if err != nil {
		t.Fatal(err)
	}
	for i := range devs {
		devs[i].IdentifyError = strings.ReplaceAll(devs[i].IdentifyError, root, "ROOT")
	}
	got, _ := json.MarshalIndent(devs, "", "  ")
	golden(t, "list.golden.json", append(got, '\n'))
	var lines bytes.Buffer
	for _, d := range devs {
		lines.WriteString(d.Summary() + "\n")
	}
	golden(t, "summary.golden.txt", lines.Bytes())
}

func TestListNoBus(t *testing.T) {
	devs, err := New(Options{SysRoot: t.TempDir()}).List()
	if err != nil || len(devs) != 0 {
		t.Fatalf("got %v %v, want no devices and no error", devs, err)
	}
}

func TestListBadAttribute(t *testing.T) {
	root := t.TempDir()
	d := filepath.Join(root, "bus", "cxl", "devices", "mem0")
	os.MkdirAll(d, 0o755)
	os.WriteFile(filepath.Join(d, "serial"), []byte("not-a-number\n"), 0o644)
	if _, err := New(Options{SysRoot: root, NoMailbox: true}).List(); err == nil {
		t.Fatal("got nil error for a bad serial, want one")
	}
}

func TestUAPILayouts(t *testing.T) {
	// struct cxl_send_command offsets from cxl-wire.md §6.1.
	c := sendCommand{ID: 1, Flags: 0, RawOpcode: 0x4000, Retval: 7, InSize: 0x10, InPayload: 0x1122334455667788,
		OutSize: 0x45, OutPayload: 0x99aabbccddeeff00}
	var b [sendCommandSize]byte
	c.marshal(&b)
	want := [sendCommandSize]byte{
		1, 0, 0, 0, 0, 0, 0, 0, 0x00, 0x40, 0, 0, 7, 0, 0, 0,
		0x10, 0, 0, 0, 0, 0, 0, 0, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,
		0x45, 0, 0, 0, 0, 0, 0, 0, 0x00, 0xff, 0xee, 0xdd, 0xcc, 0xbb, 0xaa, 0x99,
	}
	if b != want {
		t.Errorf("cxl_send_command bytes:\n got % x\nwant % x", b, want)
	}
	var back sendCommand
	back.unmarshal(&b)
	if back != c {
		t.Errorf("round trip: got %+v, want %+v", back, c)
	}
	q := []byte{2, 0, 0, 0, 0, 0, 0, 0,
		1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0x45, 0, 0, 0,
		4, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}
	got, err := parseQuery(q)
	if err != nil {
		t.Fatal(err)
	}
	wantQ := []CommandInfo{{ID: 1, Flags: FlagEnabled, SizeOut: 0x45}, {ID: 4, Flags: FlagEnabled | FlagExclusive, SizeOut: 0xffffffff}}
	if diff := cmp.Diff(wantQ, got); diff != "" {
		t.Errorf("query (-want +got):\n%s", diff)
	}
	if _, err := parseQuery(q[:20]); err == nil {
		t.Error("short query: got nil error")
	}
	if IoctlQueryCommands != 0x8008CE01 || IoctlSendCommand != 0xC030CE02 {
		t.Error("ioctl numbers differ from cxl-wire.md §6.1")
	}
}

func FuzzParseQuery(f *testing.F) {
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0x45, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) { parseQuery(b) })
}
