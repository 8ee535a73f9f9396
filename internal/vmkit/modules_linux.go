package vmkit

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// LoadModules loads, in the guest, each module file the file order names
// (one path a line, dependencies first); one already loaded is fine.
func LoadModules(order string) error {
	b, err := os.ReadFile(order)
	if err != nil {
		return err
	}
	for line := range strings.Lines(string(b)) {
		p := strings.TrimSpace(line)
		if p == "" {
			continue
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		err = unix.FinitModule(int(f.Fd()), "", 0)
		f.Close()
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("load %s: %w", p, err)
		}
	}
	return nil
}
