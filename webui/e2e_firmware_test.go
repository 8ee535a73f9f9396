package webui_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"

	"cxlpool/api"
	"cxlpool/api/apitest"
	"cxlpool/image/manifest"
	"cxlpool/image/update"
)

// fwSlots stands in for the box's A/B image slots: Apply reads the pushed
// image (reporting progress) and makes slot B the pending trial; Activate
// follows the real rules closely enough for the page (the running slot
// cancels a trial; another slot must be ready).
type fwSlots struct {
	mu    sync.Mutex
	slots []update.SlotStatus
	got   int64
}

func newFWSlots() *fwSlots {
	return &fwSlots{slots: []update.SlotStatus{
		{Slot: update.SlotA, SlotInfo: update.SlotInfo{State: update.StateReady, Version: "1.0.0", SecurityVersion: 3, Size: 40 << 20},
			Active: true, Running: true},
		{Slot: update.SlotB, SlotInfo: update.SlotInfo{State: update.StateEmpty}},
	}}
}

func (f *fwSlots) Apply(ctx context.Context, r io.Reader, progress func(int64)) (*manifest.Manifest, error) {
	buf := make([]byte, 64<<10)
	var n int64
	for {
		k, err := r.Read(buf)
		n += int64(k)
		if k > 0 {
			progress(n)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("update: reading: %w", err)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got = n
	f.slots[1].SlotInfo = update.SlotInfo{State: update.StateReady, Version: "2.0.0", SecurityVersion: 4, Size: n}
	f.slots[1].Trial = true
	return &manifest.Manifest{Version: "2.0.0"}, nil
}

func (f *fwSlots) Slots() ([]update.SlotStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.slots), nil
}

func (f *fwSlots) Activate(slot string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := slices.IndexFunc(f.slots, func(s update.SlotStatus) bool { return s.Slot == slot })
	switch {
	case i < 0:
		return update.ErrUnknownSlot
	case f.slots[i].Running:
		for j := range f.slots {
			f.slots[j].Trial = false
		}
		return nil
	case f.slots[i].State != update.StateReady:
		return update.ErrSlotNotReady
	}
	f.slots[i].Trial = true
	return nil
}

func (f *fwSlots) trial() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.slots {
		if s.Trial {
			return s.Slot
		}
	}
	return ""
}

// TestFirmwareInBrowser: an administrator sees both slots, uploads an
// image through the form and watches it reach Completed, cancels the
// trial it starts, activates the slot again and reboots into it; a
// read-only user sees the slots and no control.
func TestFirmwareInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Skipf("no Chromium at %s (apt-get install chromium): %v", chromiumPath, err)
	}
	slots := newFWSlots()
	reboots := make(chan struct{}, 1)
	env := apitest.NewServer(t, apitest.Options{Config: func(c *api.Config) {
		c.Update = slots
		c.Reboot = func(context.Context) error { reboots <- struct{}{}; return nil }
	}})
	img := filepath.Join(t.TempDir(), "cxlpool-2.0.0.bundle")
	const imgSize = 3 << 20
	if err := os.WriteFile(img, make([]byte, imgSize), 0o644); err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, env.HTTP.URL)
	b.login("admin", apitest.AdminPassword)

	b.page("firmware", "Firmware")
	b.wait("two slots", `document.querySelectorAll('#fw-slots [data-slot]').length === 2`)
	if got := eval[string](b, `document.querySelector('#fw-slots [data-slot="Image-A"]').textContent`); !strings.Contains(got, "running") {
		t.Errorf("slot A badges %q, want running", got)
	}
	b.shot("fw-01-slots")

	// Upload through the form: the browser's progress, then the task's.
	b.do("choose the image", chromedp.SetUploadFiles(chromedp.CSS("#fw-file"), []string{img}))
	b.wait("upload enabled", `!document.querySelector('#fw-send').disabled`)
	b.do("upload", chromedp.Click(chromedp.CSS("#fw-send")))
	b.wait("upload progress shown", `document.querySelector('#fw-progress progress')`)
	b.wait("update task completed", `[...document.querySelectorAll('#fw-upload .task .badge')].some(x => x.textContent === 'Completed')`)
	b.wait("upload at 100%", `document.querySelector('#fw-progress progress').value === 100`)
	b.wait("staged message", `document.querySelector('#fw-uploaded')`)
	if msgs := eval[string](b, `document.querySelector('#fw-upload .task-msgs').textContent`); !strings.Contains(msgs, "successfully updated") {
		t.Errorf("task messages shown %q, want the server's UpdateSuccessful", msgs)
	}
	b.wait("slot B pending", `document.querySelector('#fw-trial') && document.querySelector('[data-slot="Image-B"]').textContent.includes('pending trial')`)
	b.shot("fw-02-uploaded")
	slots.mu.Lock()
	if slots.got < imgSize {
		t.Errorf("the box received %d bytes, want at least the %d of the image", slots.got, imgSize)
	}
	slots.mu.Unlock()

	// Cancel the trial, then activate the slot again and reboot into it.
	b.clickLabel("Cancel the trial of Image-B")
	b.wait("cancel dialog", `document.querySelector('dialog[open] #confirm-ok')`)
	b.do("confirm the cancel", chromedp.Click(chromedp.CSS("#confirm-ok")))
	b.wait("trial cancelled", `document.querySelector('#fw-activated')`)
	b.do("close", chromedp.Click(chromedp.CSS("#confirm-ok")))
	b.wait("no trial", `!document.querySelector('#fw-trial') && document.querySelector('button[aria-label="Activate Image-B"]')`)
	if got := slots.trial(); got != "" {
		t.Errorf("slot on trial after the cancel: %q, want none", got)
	}

	b.clickLabel("Activate Image-B")
	b.wait("activate dialog", `document.querySelector('dialog[open] #confirm-ok')`)
	b.shot("fw-03-activate-confirm")
	b.do("confirm the activation", chromedp.Click(chromedp.CSS("#confirm-ok")))
	b.wait("activated", `document.querySelector('#fw-activated') && document.querySelector('#confirm-ok').textContent === 'Reboot now'`)
	if got := slots.trial(); got != update.SlotB {
		t.Errorf("slot on trial after the activation: %q, want b", got)
	}
	b.do("reboot now", chromedp.Click(chromedp.CSS("#confirm-ok")))
	b.wait("restarting", `[...document.querySelectorAll('dialog[open] .alert.info')].some(x => x.textContent.includes('restarting'))`)
	<-reboots // the test would time out if Manager.Reset never called the hook
	b.do("close", chromedp.Click(chromedp.CSS("#confirm-ok")))
	b.wait("slot B pending again", `document.querySelector('#fw-trial') && document.querySelector('#fw-reboot')`)
	b.shot("fw-04-pending")

	// A read-only user sees the slots and nothing to press.
	b.logout()
	b.login(apitest.UserReadOnly, apitest.UserPassword)
	b.page("firmware", "Firmware")
	b.wait("two slots for the reader", `document.querySelectorAll('#fw-slots [data-slot]').length === 2 && document.querySelector('#fw-trial')`)
	if n := eval[int](b, `document.querySelectorAll('main button, main input, main select').length`); n != 0 {
		t.Errorf("firmware controls offered to a read-only user: %d, want none", n)
	}
	b.shot("fw-05-readonly")

	if errs := b.errors(); len(errs) > 0 {
		t.Errorf("browser console errors:\n%s", strings.Join(errs, "\n"))
	}
}
