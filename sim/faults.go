package sim

import (
	"io"
	"sync"
	"time"

	"cxlpool/fabric/cci"
)

// Faults injects failures into the box. Every method is safe to call while
// traffic flows; counts apply to the next requests or frames, in arrival
// order across all links.
type Faults struct {
	box *Box

	mu      sync.Mutex
	busy    int
	retry   int
	drop    int
	dropOp  map[cci.Opcode]int
	corrupt int
	delay   time.Duration
}

// Busy makes the next n MCTP requests answer Busy without executing.
func (f *Faults) Busy(n int) { f.mu.Lock(); f.busy = max(n, 0); f.mu.Unlock() }

// RetryRequired makes the next n MCTP requests answer Retry Required
// without executing.
func (f *Faults) RetryRequired(n int) { f.mu.Lock(); f.retry = max(n, 0); f.mu.Unlock() }

// DelayResponses holds every MCTP response for d before sending it; 0 ends
// the delay.
func (f *Faults) DelayResponses(d time.Duration) { f.mu.Lock(); f.delay = max(d, 0); f.mu.Unlock() }

// DropResponses executes the next n MCTP requests but loses their
// responses.
func (f *Faults) DropResponses(n int) { f.mu.Lock(); f.drop = max(n, 0); f.mu.Unlock() }

// CorruptFrames flips one byte in each of the next n frames the box writes
// on a byte-stream link (ServeConn), so the receiver's FCS check fails.
func (f *Faults) CorruptFrames(n int) { f.mu.Lock(); f.corrupt = max(n, 0); f.mu.Unlock() }

// Reset performs a device reset (see the package comment for what
// survives).
func (f *Faults) Reset() { f.box.reset() }

// DropResponsesTo is DropResponses for one opcode: the next n requests
// with that opcode execute but lose their responses, whatever else the
// link carries meanwhile (event pumps, health polls).
func (f *Faults) DropResponsesTo(op cci.Opcode, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.dropOp == nil {
		f.dropOp = make(map[cci.Opcode]int)
	}
	f.dropOp[op] = max(n, 0)
}

// dropResponse reports whether the response to a request with opcode op
// is to be lost, using up one count.
func (f *Faults) dropResponse(op cci.Opcode) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.dropOp[op] > 0 {
		f.dropOp[op]--
		return true
	}
	if f.drop > 0 {
		f.drop--
		return true
	}
	return false
}

// take decrements *c if positive and reports whether it was.
func (f *Faults) take(c *int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if *c > 0 {
		*c--
		return true
	}
	return false
}

func (f *Faults) responseDelay() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.delay
}

// corruptor wraps a byte stream and damages outgoing frames on demand.
type corruptor struct {
	io.ReadWriteCloser
	f *Faults
}

// Write flips a byte of p when a corruption is due. The serial link writes
// one frame per call; the FCS high byte is flipped (it sits third from the
// end and is sent raw), which the receiver's FCS check must reject.
func (c *corruptor) Write(p []byte) (int, error) {
	if len(p) >= 4 && c.f.take(&c.f.corrupt) {
		q := append([]byte(nil), p...)
		i := len(q) / 2
		if q[0] == 0x7e && q[len(q)-1] == 0x7e {
			i = len(q) - 3
		}
		q[i] ^= 0x01
		return c.ReadWriteCloser.Write(q)
	}
	return c.ReadWriteCloser.Write(p)
}
