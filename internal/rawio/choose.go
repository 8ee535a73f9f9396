package rawio

import (
	"slices"
	"time"
)

// chooser decides, wait by wait, whether a read that found nothing polls
// or sleeps, by how long waits took each way: polling is worth it only
// where the wake-up it saves is dearer than the CPU it keeps from the
// peer. Across CPUs of a VM it saves most of a round trip; in one
// process, or with the peer on the same CPU, the peer's thread may need
// the very CPU that polls and the answer comes later than it would have.
// The faster way by the median of its last waits is taken, and the other
// is tried every exploreEvery waits, so a change of placement is noticed.
type chooser struct {
	// waits[m] are the last waits the way m took (0 sleep, 1 poll), in
	// a ring; n[m] counts them.
	waits [2][window]time.Duration
	n     [2]int
	best  int // the way taken when not exploring
	count int // waits so far
}

const (
	window       = 8
	exploreEvery = 64
)

// next returns the way the coming wait takes: 1 polls.
func (ch *chooser) next() int {
	ch.count++
	// Each way first gets a window of samples, poll first.
	for _, m := range [...]int{1, 0} {
		if ch.n[m] < window {
			return m
		}
	}
	if ch.count%exploreEvery == 0 {
		return 1 - ch.best
	}
	return ch.best
}

// took records that a wait the way m took lasted d.
func (ch *chooser) took(m int, d time.Duration) {
	ch.waits[m][ch.n[m]%window] = d
	ch.n[m]++
	if ch.n[0] < window || ch.n[1] < window {
		return
	}
	if median(ch.waits[1]) < median(ch.waits[0]) {
		ch.best = 1
	} else {
		ch.best = 0
	}
}

func median(w [window]time.Duration) time.Duration {
	s := w // a copy
	slices.Sort(s[:])
	return s[window/2]
}
