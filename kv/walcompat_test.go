package kv

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"cxlpool/fabric/cci"
)

// TestOldCommitRecordsReplay: a log written before blocks carried their
// sequence (commit records ending at the key) still replays, its blocks
// without one; a record with the sequence tail replays with it. The old
// record is built byte by byte here, not by commitRecord, so a change of
// the writer cannot hide a change of the format.
func TestOldCommitRecordsReplay(t *testing.T) {
	dir := t.TempDir()
	var log []byte
	log = jsonRecord(log, recNamespace, nsRecord{Name: "ns", ChunkSize: 1 << 20, Quota: 1 << 20})
	log = jsonRecord(log, recChunkAdd, chunkRecord{NS: "ns", ID: 1, Tag: cci.Tag{1}, Size: 1 << 20})
	old := func(id, off uint64, key string, tail []byte) []byte {
		p := []byte{2, 'n', 's'}
		for _, v := range []uint64{id, id, 1, off, 4096} { // id, gen, chunk, offset, length
			p = binary.LittleEndian.AppendUint64(p, v)
		}
		p = binary.LittleEndian.AppendUint16(p, uint16(len(key)))
		p = append(p, key...)
		return frameRecord(nil, recCommit, append(p, tail...))
	}
	log = append(log, old(1, 0, "old", nil)...)
	tail := []byte{1}
	tail = binary.LittleEndian.AppendUint64(tail, 77)
	tail = binary.LittleEndian.AppendUint32(tail, 128)
	log = append(log, old(2, 4096, "new", tail)...)
	if err := os.WriteFile(filepath.Join(dir, WALFile), log, 0o600); err != nil {
		t.Fatal(err)
	}
	for round := range 2 { // the second reads the first open's snapshot
		ix, err := OpenIndex(IndexConfig{Dir: dir})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		ns := ix.ns["ns"]
		got := map[string]Seq{}
		for k, b := range ns.keys {
			got[k] = b.seq
		}
		want := map[string]Seq{"old": {}, "new": {HasParent: true, Parent: 77, Tokens: 128}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("round %d: blocks' sequences (-want +got):\n%s", round, diff)
		}
		if err := ix.Verify(); err != nil {
			t.Error(err)
		}
		if err := ix.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
