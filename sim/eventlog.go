package sim

import (
	"slices"

	"cxlpool/fabric/cci"
)

// eventLog is one bounded CXL event log (CXL 3.1 §8.2.9.2). Records are
// kept oldest first. When full, new records are lost and the overflow
// state records how many and when; it stays set until the log has been
// read and cleared down to empty.
type eventLog struct {
	size       int
	recs       []cci.EventRecord
	lastHandle uint16
	overflow   bool
	ovCount    uint16
	firstOv    uint64
	lastOv     uint64
	armed      bool // an empty→non-empty transition may notify (FM logs)
}

func newEventLog(size int) *eventLog { return &eventLog{size: size, armed: true} }

func (l *eventLog) free() int { return l.size - len(l.recs) }

// nextHandle returns a non-zero handle not currently in the log.
func (l *eventLog) nextHandle() uint16 {
	for {
		l.lastHandle++
		if l.lastHandle == 0 {
			continue
		}
		if !slices.ContainsFunc(l.recs, func(r cci.EventRecord) bool { return r.Handle == l.lastHandle }) {
			return l.lastHandle
		}
	}
}

// add appends r with a fresh handle and timestamp ts. It reports whether
// the log went from empty to non-empty; a full log counts an overflow.
func (l *eventLog) add(r cci.EventRecord, ts uint64) (becameNonEmpty bool) {
	if len(l.recs) >= l.size {
		if !l.overflow {
			l.overflow = true
			l.firstOv = ts
		}
		if l.ovCount < 0xffff {
			l.ovCount++
		}
		l.lastOv = ts
		return false
	}
	r.Handle = l.nextHandle()
	r.Timestamp = ts
	l.recs = append(l.recs, r)
	return len(l.recs) == 1
}

// get returns up to max oldest records and whether more remain.
func (l *eventLog) get(max int) (cci.GetEventRecordsResp, bool) {
	n := min(max, len(l.recs))
	resp := cci.GetEventRecordsResp{
		Overflow:      l.overflow,
		More:          n < len(l.recs),
		OverflowCount: l.ovCount,
		FirstOverflow: l.firstOv,
		LastOverflow:  l.lastOv,
		Records:       slices.Clone(l.recs[:n]),
	}
	return resp, resp.More
}

// clear applies Clear Event Records. Handles must name the oldest records
// in temporal order; otherwise nothing is cleared and the result is
// Invalid Handle. Clear All is allowed only on an overflowed log and with
// no handles.
func (l *eventLog) clear(all bool, handles []uint16) error {
	if all {
		if !l.overflow || len(handles) != 0 {
			return cci.InvalidInput
		}
		l.recs = nil
		l.resetOverflow()
		return nil
	}
	if len(handles) > len(l.recs) {
		return cci.InvalidHandle
	}
	for i, h := range handles {
		if h == 0 || l.recs[i].Handle != h {
			return cci.InvalidHandle
		}
	}
	l.recs = slices.Delete(l.recs, 0, len(handles))
	if len(l.recs) == 0 {
		l.resetOverflow()
	}
	return nil
}

func (l *eventLog) resetOverflow() {
	l.overflow = false
	l.ovCount = 0
	l.firstOv = 0
	l.lastOv = 0
}

// reset empties the log as a device reset does.
func (l *eventLog) reset() {
	l.recs = nil
	l.resetOverflow()
	l.armed = true
}
