package mctp

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"runtime"
	"strings"
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

// TestStartNeverWaitsForTheLink: while another message is being written
// (here: stuck on a link nobody reads), Start fails at once with ErrNoTag
// and sends nothing; once the link drains it works.
func TestStartNeverWaitsForTheLink(t *testing.T) {
	a, b := Pipe()
	fm := NewEndpoint(a, Config{EID: fmEID}, nil)
	start(t, fm)
	dev := NewEndpoint(b, Config{EID: devEID, MessageTypes: []MsgType{MsgTypeFMAPI, MsgTypeCXLCCI}}, echo)
	// Three large requests hold more packets than the pipe does: one of
	// them blocks inside its write, holding the link.
	const big = 3
	done := make(chan error, big)
	for range big {
		go func() {
			_, err := fm.Request(withTimeout(t), devEID, MsgTypeCXLCCI, make([]byte, 1000))
			done <- err
		}()
	}
	// Until the three hold their tags and one of them the link.
	for {
		fm.mu.Lock()
		n := bits.OnesCount8(fm.tagsUsed[devEID])
		fm.mu.Unlock()
		if n == big && !fm.wmu.TryLock() {
			break
		} else if n == big {
			fm.wmu.Unlock()
		}
		runtime.Gosched()
	}
	var early []*Pending // Starts that went out before the link was stuck
	for {
		p, err := fm.Start(devEID, MsgTypeCXLCCI, []byte("small"))
		if err == nil {
			early = append(early, p)
			continue
		}
		if !errors.Is(err, ErrNoTag) {
			t.Fatalf("Start while the link is stuck: %v", err)
		}
		if !strings.Contains(err.Error(), "being written") {
			t.Fatalf("Start refused for another reason than the busy link: %v", err)
		}
		break
	}
	start(t, dev) // the device reads: the link drains
	for range big {
		if err := <-done; err != nil {
			t.Fatalf("a large request: %v", err)
		}
	}
	for _, p := range early {
		if _, err := p.Wait(withTimeout(t)); err != nil {
			t.Errorf("Wait of an early Start: %v", err)
		}
	}
	p, err := fm.Start(devEID, MsgTypeCXLCCI, []byte("after"))
	if err != nil {
		t.Fatalf("Start once the link drained: %v", err)
	}
	if got, err := p.Wait(withTimeout(t)); err != nil || string(got) != "re:after" {
		t.Errorf("Wait: got %q, %v; want %q", got, err, "re:after")
	}
}
