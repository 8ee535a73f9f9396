package policy

import (
	"context"
	"sync"
	"time"
)

// Watchdog is a software watchdog: whoever is watched calls Kick after
// each unit of progress; Check (run periodically by Run) calls the hook
// once when no kick came for longer than the timeout, and re-arms on the
// next kick. It runs on its own goroutine so it notices a loop that is
// blocked, not just slow.
type Watchdog struct {
	timeout time.Duration
	now     func() time.Time
	hook    func(stalled time.Duration)

	mu    sync.Mutex
	last  time.Time
	fired bool
}

// NewWatchdog returns a watchdog armed from now.
func NewWatchdog(timeout time.Duration, now func() time.Time, hook func(stalled time.Duration)) *Watchdog {
	if now == nil {
		now = time.Now
	}
	return &Watchdog{timeout: timeout, now: now, hook: hook, last: now()}
}

// Kick records progress.
func (w *Watchdog) Kick() {
	w.mu.Lock()
	w.last, w.fired = w.now(), false
	w.mu.Unlock()
}

// Check calls the hook if the last kick is older than the timeout and the
// hook has not fired since; it reports whether the watched loop is
// stalled.
func (w *Watchdog) Check() bool {
	w.mu.Lock()
	stalled := w.now().Sub(w.last)
	fire := stalled > w.timeout && !w.fired
	if fire {
		w.fired = true
	}
	over := stalled > w.timeout
	w.mu.Unlock()
	if fire && w.hook != nil {
		w.hook(stalled)
	}
	return over
}

// Run calls Check every period until ctx ends.
func (w *Watchdog) Run(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.Check()
		}
	}
}
