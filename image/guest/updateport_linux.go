package guest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"cxlpool/image/update"
)

// UpdatePortName names the maintenance port: a virtio-serial port through
// which a VM host (or a factory fixture) streams an image into the box
// without the network: an 8-byte big-endian length, then the bundle. The
// box applies it exactly as the API's update push does (signature,
// security version, inactive slot, trial) and reboots into the trial; it
// answers on the console. Boxes without such a port ignore it.
const UpdatePortName = "cxlpool.update"

// errIdle is a read that ended before any byte: no sender.
var errIdle = errors.New("no sender")

// updatePort serves the maintenance port if the machine has one.
func (in *Init) updatePort(ctx context.Context, cfg Config) {
	path := filepath.Join(VirtioPortDir, UpdatePortName)
	if !hasVirtioPort(UpdatePortName) || waitVirtioPort(ctx, path, time.Second) != nil {
		return
	}
	svc, err := update.ServiceFromBoot(cfg.Disk, update.DefaultKeysDir, update.CmdlinePath)
	if err != nil {
		in.printf("update port: %v", err)
		return
	}
	for ctx.Err() == nil {
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			in.printf("update port: %v", err)
			return
		}
		err = in.receive(ctx, svc, f)
		f.Close()
		if errors.Is(err, errIdle) {
			// Nobody is connected on the host side: reads end at once.
			select {
			case <-ctx.Done():
			case <-time.After(250 * time.Millisecond):
			}
			continue
		}
		if err == nil {
			in.printf("update: rebooting into slot %s for its trial boot", update.Other(svc.Running))
			reboot()
			return
		}
		in.printf("update refused: %v", err)
	}
}

func hasVirtioPort(name string) bool {
	ports, _ := filepath.Glob("/sys/class/virtio-ports/*/name")
	for _, p := range ports {
		if b, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(b)) == name {
			return true
		}
	}
	return false
}

// receive reads one length-prefixed bundle and applies it.
func (in *Init) receive(ctx context.Context, svc *update.Service, r io.Reader) error {
	var hdr [8]byte
	if n, err := io.ReadFull(r, hdr[:]); n == 0 && errors.Is(err, io.EOF) {
		return errIdle
	} else if err != nil {
		return fmt.Errorf("length: %w", err)
	}
	total := int64(binary.BigEndian.Uint64(hdr[:]))
	in.printf("update: receiving %d bytes", total)
	next := int64(10)
	lr := io.LimitReader(r, total)
	m, err := svc.Apply(ctx, lr, func(n int64) {
		if total > 0 && n*100/total >= next {
			in.printf("update: %d%% written", n*100/total)
			next = n*100/total/10*10 + 10
		}
	})
	if err != nil {
		// Read what the sender still sends before answering, so that
		// the next transfer starts at its own length.
		_, _ = io.Copy(io.Discard, lr)
		return err
	}
	in.printf("update: version %s (security version %d) verified and written to slot %s: trial pending",
		m.Version, m.SecurityVersion, update.Other(svc.Running))
	return nil
}
