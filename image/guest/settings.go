package guest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// The owner's settings in cxlpool.conf on the data partition are also
// changed through the daemon's Redfish API (host name, NTP, the
// interface's address): the daemon rewrites the file with
// SetConfigValues, and reads what will apply with LoadLayers.

// LoadLayers applies the three configuration layers as the init reads
// them: the defaults file, the data partition's file and the kernel
// command line (read from cmdlinePath). Missing files are not errors.
func (c *Config) LoadLayers(defaultsPath, dataPath, cmdlinePath string) error {
	if err := c.LoadFile(defaultsPath); err != nil {
		return err
	}
	if err := c.LoadFile(dataPath); err != nil {
		return err
	}
	b, err := os.ReadFile(cmdlinePath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("guest: %w", err)
	}
	return c.ParseCmdline(string(b))
}

// SetConfigValues gives each key in set its value in the "key = value"
// file at path: a key's line is replaced where it stands (its last one,
// the one that wins), a key the file lacks is appended, and comments and
// every other line stay as they were. Each key must be a known setting
// and its value valid for it, on one line. The file is replaced
// atomically (written beside it, synced, renamed), so a power cut leaves
// the old settings or the new ones, never half of them; a new file is
// private (0600: it may hold the first admin password).
func SetConfigValues(path string, set map[string]string) error {
	var probe Config
	keys := make([]string, 0, len(set))
	for k, v := range set {
		if strings.ContainsAny(v, "\r\n") || strings.ContainsAny(k, "\r\n=#") {
			return fmt.Errorf("guest: setting %s: want a one-line key and value", k)
		}
		if err := probe.Apply(k, strings.TrimSpace(v)); err != nil {
			return err
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	old, err := os.ReadFile(path)
	mode := fs.FileMode(0o600)
	switch {
	case err == nil:
		if st, err := os.Stat(path); err == nil {
			mode = st.Mode().Perm()
		}
	case errors.Is(err, fs.ErrNotExist):
	default:
		return fmt.Errorf("guest: %w", err)
	}

	var lines []string
	last := map[string]int{} // key -> index of its last line
	sc := bufio.NewScanner(bytes.NewReader(old))
	for sc.Scan() {
		line := sc.Text()
		t := strings.TrimSpace(line)
		if k, _, ok := strings.Cut(t, "="); ok && !strings.HasPrefix(t, "#") {
			last[strings.TrimSpace(k)] = len(lines)
		}
		lines = append(lines, line)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("guest: %s: %w", path, err)
	}
	for _, k := range keys {
		line := k + " = " + strings.TrimSpace(set[k])
		if i, ok := last[k]; ok {
			lines[i] = line
		} else {
			lines = append(lines, line)
		}
	}
	out := []byte(strings.Join(lines, "\n") + "\n")

	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("guest: %w", err)
	}
	defer os.Remove(tmp.Name()) // after a successful rename there is nothing left to remove
	if _, err := tmp.Write(out); err != nil {
		tmp.Close()
		return fmt.Errorf("guest: %w", err)
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return fmt.Errorf("guest: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("guest: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("guest: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("guest: %w", err)
	}
	// The rename is durable once the directory is.
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
