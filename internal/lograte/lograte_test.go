package lograte_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"cxlpool/internal/lograte"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// lines logs through a rate-limited text handler and returns what came
// out, one line per record, without the time.
func newLogger(burst int, c *clock) (*slog.Logger, *bytes.Buffer) {
	var buf bytes.Buffer
	text := slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}})
	return slog.New(lograte.New(text, lograte.Options{Burst: burst, Interval: 10 * time.Second, Now: c.now})), &buf
}

func lines(buf *bytes.Buffer) []string {
	s := strings.TrimSuffix(buf.String(), "\n")
	buf.Reset()
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func TestSuppressesRepeats(t *testing.T) {
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	log, buf := newLogger(2, c)
	link := log.With("component", "link")
	tests := []struct {
		name    string
		advance time.Duration
		log     func()
		want    []string
	}{
		{"burst passes", 0, func() {
			for i := range 5 {
				link.Warn("device link lost", "try", i)
			}
		}, []string{
			`level=WARN msg="device link lost" component=link try=0`,
			`level=WARN msg="device link lost" component=link try=1`,
		}},
		{"other messages and loggers are counted apart", time.Second, func() {
			link.Info("device link back")
			log.Warn("device link lost")
			link.Error("device link lost")
		}, []string{
			`level=INFO msg="device link back" component=link`,
			`level=WARN msg="device link lost"`,
			`level=ERROR msg="device link lost" component=link`,
		}},
		{"still inside the interval", 8 * time.Second, func() {
			link.Warn("device link lost", "try", 9)
		}, nil},
		{"the next interval reports the count first", 2 * time.Second, func() {
			link.Warn("device link lost", "try", 10)
		}, []string{
			`level=WARN msg="suppressed 4 similar log lines" component=link message="device link lost" suppressed=4 within=10s`,
			`level=WARN msg="device link lost" component=link try=10`,
		}},
		{"a burst that stopped is reported by any later record", 10 * time.Second, func() {
			for range 3 {
				link.Warn("device link lost")
			}
			c.t = c.t.Add(30 * time.Second)
			log.Info("something else")
		}, []string{
			`level=WARN msg="device link lost" component=link`,
			`level=WARN msg="device link lost" component=link`,
			`level=WARN msg="suppressed 1 similar log lines" component=link message="device link lost" suppressed=1 within=10s`,
			`level=INFO msg="something else"`,
		}},
	}
	for _, tt := range tests {
		c.t = c.t.Add(tt.advance)
		tt.log()
		if diff := cmp.Diff(tt.want, lines(buf)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tt.name, diff)
		}
	}
}

func TestBoundedKeys(t *testing.T) {
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	var buf bytes.Buffer
	h := lograte.New(slog.NewTextHandler(&buf, nil), lograte.Options{Burst: 1, MaxKeys: 2, Now: c.now})
	log := slog.New(h)
	for _, m := range []string{"a", "a", "b", "c"} { // the second a is suppressed; c forgets a
		log.Info(m)
		c.t = c.t.Add(time.Millisecond)
	}
	if got := strings.Count(buf.String(), "suppressed 1 similar"); got != 1 {
		t.Errorf("summaries of the forgotten message: got %d, want 1:\n%s", got, buf.String())
	}
	if !h.Enabled(context.Background(), slog.LevelInfo) || h.Enabled(context.Background(), slog.LevelDebug) {
		t.Error("Enabled does not follow the wrapped handler")
	}
}
