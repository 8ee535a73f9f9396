package kv

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sync"
)

// WALFile is the index's log inside its directory.
const WALFile = "kv.wal"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Record types of the log. Namespace records are JSON (rare); block
// records are binary (every commit and free).
const (
	recNamespace   byte = 1 // JSON nsRecord: create or change settings
	recNSDelete    byte = 2 // JSON {name}
	recChunkAdd    byte = 3 // JSON chunkRecord
	recChunkRemove byte = 4 // JSON chunkRecord (ID only)
	recMember      byte = 5 // JSON memberRecord
	recMemberGone  byte = 6 // JSON memberRecord (no hash)
	recCommit      byte = 10
	recFree        byte = 11
	recIDs         byte = 12 // the namespace's id counter may reach Upto
)

// batch is one group commit: the records appended while the previous one
// was being written, made durable by one write and one fsync.
type batch struct {
	buf  []byte
	done chan struct{}
	err  error
}

// wal is an append-only log with group commit. Appends never block on the
// disk; wait blocks until the batch holding a record is durable.
type wal struct {
	path   string
	noSync bool

	mu      sync.Mutex
	f       *os.File
	cur     *batch
	kick    chan struct{}
	closed  bool
	failed  error // sticky: after a failed write nothing more is appended
	size    int64
	flying  *batch // the batch being written, if any
	stopped chan struct{}
}

func newBatch() *batch { return &batch{done: make(chan struct{})} }

// openWAL opens (creating) the log and replays it into fn, truncating a
// torn or corrupt tail.
func openWAL(dir string, noSync bool, fn func(typ byte, payload []byte) error) (*wal, error) {
	path := filepath.Join(dir, WALFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("kv: open log: %w", err)
	}
	good, err := replay(f, fn)
	if err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Truncate(good); err != nil {
		f.Close()
		return nil, fmt.Errorf("kv: truncate the log's torn tail: %w", err)
	}
	if _, err := f.Seek(good, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	w := &wal{path: path, noSync: noSync, f: f, cur: newBatch(), kick: make(chan struct{}, 1), size: good, stopped: make(chan struct{})}
	go w.flusher()
	return w, nil
}

// replay feeds every whole record to fn and returns the offset after the
// last one. A short or corrupt record ends the log (a write torn by the
// crash); an error from fn is returned.
func replay(f *os.File, fn func(byte, []byte) error) (int64, error) {
	r := bufio.NewReaderSize(f, 1<<20)
	var off int64
	var hdr [8]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return off, nil
		}
		n := binary.LittleEndian.Uint32(hdr[0:])
		sum := binary.LittleEndian.Uint32(hdr[4:])
		if n == 0 || n > 16<<20 {
			return off, nil
		}
		rec := make([]byte, n)
		if _, err := io.ReadFull(r, rec); err != nil {
			return off, nil
		}
		if crc32.Checksum(rec, castagnoli) != sum {
			return off, nil
		}
		if err := fn(rec[0], rec[1:]); err != nil {
			return off, fmt.Errorf("kv: log record at %d: %w", off, err)
		}
		off += 8 + int64(n)
	}
}

// frameRecord appends one record (header, type, payload) to b.
func frameRecord(b []byte, typ byte, payload []byte) []byte {
	start := len(b)
	b = append(b, 0, 0, 0, 0, 0, 0, 0, 0, typ)
	b = append(b, payload...)
	rec := b[start+8:]
	binary.LittleEndian.PutUint32(b[start:], uint32(len(rec)))
	binary.LittleEndian.PutUint32(b[start+4:], crc32.Checksum(rec, castagnoli))
	return b
}

// append queues records (already framed) and returns their batch.
func (w *wal) append(framed []byte) (*batch, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, fmt.Errorf("kv: log closed: %w", ErrUnavailable)
	}
	if w.failed != nil {
		return nil, fmt.Errorf("kv: log failed earlier (%v): %w", w.failed, ErrUnavailable)
	}
	b := w.cur
	b.buf = append(b.buf, framed...)
	select {
	case w.kick <- struct{}{}:
	default:
	}
	return b, nil
}

// wait blocks until b is durable.
func (b *batch) wait() error {
	<-b.done
	return b.err
}

func (w *wal) flusher() {
	defer close(w.stopped)
	for range w.kick {
		w.mu.Lock()
		b := w.cur
		if len(b.buf) == 0 {
			closed := w.closed
			w.mu.Unlock()
			if closed {
				return
			}
			continue
		}
		w.cur = newBatch()
		w.flying = b
		f := w.f
		w.mu.Unlock()
		_, err := f.Write(b.buf)
		if err == nil && !w.noSync {
			err = f.Sync()
		}
		if err != nil {
			err = fmt.Errorf("kv: write the log: %v: %w", err, ErrUnavailable)
		}
		w.mu.Lock()
		if err != nil {
			w.failed = err
		} else {
			w.size += int64(len(b.buf))
		}
		w.flying = nil
		w.mu.Unlock()
		b.err = err
		close(b.done)
	}
}

// quiesce waits until every appended record is written (or failed). The
// caller keeps anyone from appending meanwhile (the index lock).
func (w *wal) quiesce() error {
	for {
		w.mu.Lock()
		cur, fl, failed := w.cur, w.flying, w.failed
		w.mu.Unlock()
		switch {
		case fl != nil:
			<-fl.done
		case len(cur.buf) > 0:
			select {
			case w.kick <- struct{}{}:
			default:
			}
			<-cur.done
		default:
			return failed
		}
	}
}

// rewrite replaces the log with framed (a snapshot of the state) and
// makes it durable: a new file, fsync, rename, fsync of the directory.
// The caller holds off appends (the index lock) and has waited for
// appended batches.
func (w *wal) rewrite(framed []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.cur.buf) != 0 {
		return errors.New("kv: log rewrite with records pending")
	}
	tmp := w.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("kv: compact the log: %w", err)
	}
	if _, err := f.Write(framed); err != nil {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("kv: compact the log: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("kv: compact the log: %w", err)
	}
	if err := os.Rename(tmp, w.path); err != nil {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("kv: compact the log: %w", err)
	}
	if d, err := os.Open(filepath.Dir(w.path)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	w.f.Close()
	w.f = f
	w.size = int64(len(framed))
	return nil
}

// Size is the log's length on disk.
func (w *wal) Size() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.size
}

func (w *wal) close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	last := w.cur
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
	if len(last.buf) != 0 {
		<-last.done
	}
	close(w.kick)
	<-w.stopped
	return w.f.Close()
}
