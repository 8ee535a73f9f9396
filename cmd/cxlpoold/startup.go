package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"cxlpool/appliance"
)

// startup times the daemon's start, phase by phase, for the one log line
// that says where a slow boot went (the box's boot-to-API time has a goal:
// image/README.md).
type startup struct {
	begin, last time.Time
	attrs       []any
}

func beginStartup() *startup {
	now := time.Now()
	return &startup{begin: now, last: now}
}

// phase records the time since the previous phase ended under name.
func (s *startup) phase(name string) {
	now := time.Now()
	s.attrs = append(s.attrs, name, now.Sub(s.last).Round(time.Millisecond))
	s.last = now
}

// done logs the phases.
func (s *startup) done(log *slog.Logger) {
	log.Info("started", append([]any{"total", time.Since(s.begin).Round(time.Millisecond)}, s.attrs...)...)
}

// waitStartGate blocks until the supervisor that started the daemon
// writes a byte to file descriptor fd (--start-gate): the box's init
// starts the daemon while it still loads modules and mounts the data
// partition, so that the program's own start (a fifth of a second under
// emulation) overlaps that work. A gate closed without that byte means
// the supervisor withdrew this start.
func waitStartGate(fd int) error {
	f := os.NewFile(uintptr(fd), "start-gate")
	if f == nil {
		return fmt.Errorf("--start-gate: %d is not a file descriptor", fd)
	}
	defer f.Close()
	var b [1]byte
	if n, err := f.Read(b[:]); n != 1 {
		return fmt.Errorf("--start-gate: closed before it opened (%v)", err)
	}
	return nil
}

// startAsync runs app.Start in the background. The returned function
// waits for it (as often as called) and returns its error.
func startAsync(ctx context.Context, app *appliance.Appliance) func() error {
	done := make(chan struct{})
	var err error
	go func() {
		defer close(done)
		err = app.Start(ctx)
	}()
	return func() error {
		<-done
		return err
	}
}
