package sim

import (
	"bytes"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestPipe: bytes written at one end are read at the other, in order, in
// both directions at once.
func TestPipe(t *testing.T) {
	a, b := Pipe()
	defer a.Close()
	msgs := [][]byte{[]byte("first"), bytes.Repeat([]byte{0x7e}, 3000), []byte("last")}
	var want []byte
	for _, m := range msgs {
		want = append(want, m...)
	}
	for _, dir := range []struct {
		name string
		w, r io.ReadWriteCloser
	}{{"a to b", a, b}, {"b to a", b, a}} {
		t.Run(dir.name, func(t *testing.T) {
			for _, m := range msgs {
				if n, err := dir.w.Write(m); n != len(m) || err != nil {
					t.Fatalf("Write: got %d, %v, want %d", n, err, len(m))
				}
			}
			got := make([]byte, len(want))
			if _, err := io.ReadFull(dir.r, got); err != nil {
				t.Fatalf("ReadFull: %v", err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("read (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPipeWritesWhole: concurrent writers never interleave within a Write.
func TestPipeWritesWhole(t *testing.T) {
	a, b := Pipe()
	defer a.Close()
	const writers, each, size = 4, 200, 300
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			msg := bytes.Repeat([]byte{byte('A' + w)}, size)
			for range each {
				if _, err := a.Write(msg); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	got := make([]byte, writers*each*size)
	if _, err := io.ReadFull(b, got); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i := 0; i < len(got); i += size {
		if c := bytes.Count(got[i:i+size], got[i:i+1]); c != size {
			t.Fatalf("write at %d interleaved: %q", i, got[i:i+size])
		}
	}
}

// TestPipeBounded: a writer whose reader stopped reading waits once the
// buffer is full, and goes on when the reader reads.
func TestPipeBounded(t *testing.T) {
	a, b := Pipe()
	defer a.Close()
	chunk := make([]byte, 64<<10)
	written := make(chan int, 1)
	go func() {
		n := 0
		for n < 2*pipeBuffer {
			if _, err := a.Write(chunk); err != nil {
				break
			}
			n += len(chunk)
		}
		written <- n
	}()
	select {
	case n := <-written:
		t.Fatalf("wrote %d bytes with nobody reading, want a wait at %d", n, pipeBuffer)
	case <-time.After(50 * time.Millisecond):
	}
	if _, err := io.CopyN(io.Discard, b, 2*pipeBuffer); err != nil {
		t.Fatal(err)
	}
	if n := <-written; n != 2*pipeBuffer {
		t.Errorf("wrote %d, want %d", n, 2*pipeBuffer)
	}
}

// TestPipeClose: closing either end lets the peer read what was written,
// then io.EOF; writes fail with io.ErrClosedPipe at both ends; a reader
// and a writer waiting when it closes are woken.
func TestPipeClose(t *testing.T) {
	for _, closer := range []string{"writer's end", "reader's end"} {
		t.Run(closer, func(t *testing.T) {
			a, b := Pipe()
			if _, err := a.Write([]byte("kept")); err != nil {
				t.Fatal(err)
			}
			// A reader waiting on the other direction, woken by the close.
			waiting := make(chan error, 1)
			go func() { _, err := a.Read(make([]byte, 1)); waiting <- err }()
			if closer == "writer's end" {
				a.Close()
			} else {
				b.Close()
			}
			if err := <-waiting; !errors.Is(err, io.EOF) {
				t.Errorf("waiting Read: got %v, want io.EOF", err)
			}
			if closer == "writer's end" {
				got, err := io.ReadAll(b)
				if err != nil || string(got) != "kept" {
					t.Errorf("peer read: got %q, %v, want %q", got, err, "kept")
				}
			}
			for _, end := range []io.ReadWriteCloser{a, b} {
				if _, err := end.Write([]byte("x")); !errors.Is(err, io.ErrClosedPipe) {
					t.Errorf("Write after close: got %v, want io.ErrClosedPipe", err)
				}
			}
		})
	}
}
