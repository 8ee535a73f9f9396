// Package lograte keeps a repeating failure from flooding the log: a
// slog.Handler wrapper that lets at most Burst records with the same
// message (and the same logger attributes, level) through per Interval
// and then counts the rest, reporting "suppressed K similar log lines" once
// the interval is over. A device link that fails a thousand times a second
// then writes a few lines and a count, not megabytes, while the first
// lines of every distinct message still appear at once.
//
// Records are told apart by their message text, not their attributes: the
// same failure with a different error value or address is the same line.
// The handler starts no goroutines; summaries are written by the next
// record handled after the interval ended (of any message), so a burst
// that simply stops is summarised when anything else is logged.
package lograte

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// Options tune a Handler; zero fields take the defaults in brackets.
type Options struct {
	// Burst is how many records of one message pass per Interval [10].
	Burst int
	// Interval is the window the Burst applies to [10 s].
	Interval time.Duration
	// MaxKeys bounds the messages tracked at once [1024]; past it the
	// oldest window is forgotten (its count is reported first).
	MaxKeys int
	// Now is the clock [time.Now].
	Now func() time.Time
}

// Handler is the rate-limiting wrapper. Handlers derived with WithAttrs
// and WithGroup share the counts.
type Handler struct {
	next   slog.Handler
	prefix string // the derived handler's attributes and groups, for the key
	st     *state
}

type state struct {
	opts Options
	mu   sync.Mutex
	wins map[key]*window
	// sweepAt is when the next window may have ended.
	sweepAt time.Time
}

type key struct {
	prefix string
	level  slog.Level
	msg    string
}

// window is one message's current interval.
type window struct {
	start      time.Time
	n          int // records seen in it
	suppressed int
	// next is the handler the message was last logged through, which
	// writes its summary with the same attributes.
	next slog.Handler
}

// New wraps next.
func New(next slog.Handler, opts Options) *Handler {
	if opts.Burst <= 0 {
		opts.Burst = 10
	}
	if opts.Interval <= 0 {
		opts.Interval = 10 * time.Second
	}
	if opts.MaxKeys <= 0 {
		opts.MaxKeys = 1024
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Handler{next: next, st: &state{opts: opts, wins: map[key]*window{}}}
}

// Enabled reports whether the wrapped handler takes records at level.
func (h *Handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

// Handle passes r on unless its message has had its Burst this interval.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	now := h.st.opts.Now()
	k := key{prefix: h.prefix, level: r.Level, msg: r.Message}
	due, pass := h.st.account(k, now, h.next)
	var errs []error
	for _, s := range due {
		if err := s.write(ctx, now); err != nil {
			errs = append(errs, err)
		}
	}
	if pass {
		if err := h.next.Handle(ctx, r); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// summary is a count of suppressed records to report.
type summary struct {
	next       slog.Handler
	key        key
	suppressed int
	window     time.Duration
}

func (s summary) write(ctx context.Context, now time.Time) error {
	r := slog.NewRecord(now, s.key.level, fmt.Sprintf("suppressed %d similar log lines", s.suppressed), 0)
	r.AddAttrs(slog.String("message", s.key.msg), slog.Int("suppressed", s.suppressed),
		slog.Duration("within", s.window))
	return s.next.Handle(ctx, r)
}

// account counts a record of k at now and says whether it passes, and
// which ended windows' summaries are due.
func (st *state) account(k key, now time.Time, next slog.Handler) (due []summary, pass bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	iv := st.opts.Interval
	if !now.Before(st.sweepAt) {
		// Report every window that ended; forget the quiet ones.
		st.sweepAt = now.Add(iv)
		for wk, w := range st.wins {
			if now.Sub(w.start) < iv {
				st.sweepAt = minTime(st.sweepAt, w.start.Add(iv))
				continue
			}
			if w.suppressed > 0 {
				due = append(due, summary{next: w.next, key: wk, suppressed: w.suppressed, window: iv})
			}
			delete(st.wins, wk)
		}
	}
	w := st.wins[k]
	if w == nil {
		if len(st.wins) >= st.opts.MaxKeys {
			due = append(due, st.evictOldestLocked()...)
		}
		w = &window{start: now}
		st.wins[k] = w
		st.sweepAt = minTime(st.sweepAt, now.Add(iv))
	}
	w.next = next
	w.n++
	if w.n <= st.opts.Burst {
		return due, true
	}
	w.suppressed++
	return due, false
}

func (st *state) evictOldestLocked() []summary {
	var oldest key
	var ow *window
	for k, w := range st.wins {
		if ow == nil || w.start.Before(ow.start) {
			oldest, ow = k, w
		}
	}
	delete(st.wins, oldest)
	if ow.suppressed == 0 {
		return nil
	}
	return []summary{{next: ow.next, key: oldest, suppressed: ow.suppressed, window: st.opts.Interval}}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// WithAttrs returns a handler whose records carry attrs; its messages are
// counted apart from the parent's.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(attrs) == 0 {
		return h
	}
	var b strings.Builder
	b.WriteString(h.prefix)
	for _, a := range attrs {
		b.WriteString(a.String())
		b.WriteByte(' ')
	}
	return &Handler{next: h.next.WithAttrs(attrs), prefix: b.String(), st: h.st}
}

// WithGroup returns a handler that nests later attributes under name.
func (h *Handler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return &Handler{next: h.next.WithGroup(name), prefix: h.prefix + name + ".", st: h.st}
}
