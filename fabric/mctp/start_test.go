package mctp

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// TestStartThenWait: Start puts the request on the link and returns; Wait
// takes the response later, as Request would have returned it.
func TestStartThenWait(t *testing.T) {
	entered := make(chan struct{}, 1)
	h := func(ctx context.Context, src EID, typ MsgType, msg []byte) ([]byte, bool) {
		select {
		case entered <- struct{}{}:
		default:
		}
		return echo(ctx, src, typ, msg)
	}
	fm, _ := pair(t, h)
	p, err := fm.Start(devEID, MsgTypeCXLCCI, []byte("hello"))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	<-entered // the device got it before anyone waited
	got, err := p.Wait(withTimeout(t))
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if want := "re:hello"; string(got) != want {
		t.Errorf("response: got %q, want %q", got, want)
	}
	if _, err := p.Wait(withTimeout(t)); err == nil {
		t.Error("second Wait: got nil error, want the response already taken")
	}
	// Its tag is free again: eight more requests fit.
	for i := range tagCount {
		if _, err := fm.Request(withTimeout(t), devEID, MsgTypeCXLCCI, fmt.Appendf(nil, "%d", i)); err != nil {
			t.Fatalf("Request %d after Wait: %v", i, err)
		}
	}
}

// TestStartNeverWaitsForATag: with all eight tags taken, Start fails at
// once with ErrNoTag and sends nothing; once a tag is free it works.
func TestStartNeverWaitsForATag(t *testing.T) {
	release := make(chan struct{})
	seen := make(chan string, 2*tagCount)
	h := func(ctx context.Context, src EID, typ MsgType, msg []byte) ([]byte, bool) {
		seen <- string(msg)
		<-release
		return echo(ctx, src, typ, msg)
	}
	fm, _ := pair(t, h)
	var held []*Pending
	for i := range tagCount {
		p, err := fm.Start(devEID, MsgTypeCXLCCI, fmt.Appendf(nil, "held %d", i))
		if err != nil {
			t.Fatalf("Start %d: %v", i, err)
		}
		held = append(held, p)
	}
	if _, err := fm.Start(devEID, MsgTypeCXLCCI, []byte("ninth")); !errors.Is(err, ErrNoTag) {
		t.Fatalf("ninth Start: got %v, want ErrNoTag", err)
	}
	for range tagCount {
		<-seen
	}
	close(release)
	for i, p := range held {
		if _, err := p.Wait(withTimeout(t)); err != nil {
			t.Errorf("Wait %d: %v", i, err)
		}
	}
	if _, err := fm.Request(withTimeout(t), devEID, MsgTypeCXLCCI, []byte("after")); err != nil {
		t.Fatalf("Request after the tags were freed: %v", err)
	}
	close(seen)
	for m := range seen {
		if m == "ninth" {
			t.Error("the refused ninth request reached the device")
		}
	}
}
