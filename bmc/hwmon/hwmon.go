// Package hwmon reads the management computer's own sensors from the Linux
// hwmon class (Documentation/hwmon/sysfs-interface.rst):
// /sys/class/hwmon/hwmonN/{name, tempK_input, tempK_label, tempK_max,
// tempK_crit, fanK_input, inK_input, currK_input, powerK_input, …}, with
// the values in millidegrees Celsius, RPM, millivolts, milliamperes and
// microwatts. Sensors come back as bmc.Sensors so the API can list them
// next to the board's.
//
// IDs are "<chip>_<attribute>" (e.g. "coretemp_temp1"); chips that share
// a name get "_1", "_2"… in hwmon-number order, since hwmonN numbers are
// not stable across boots but the order of identical drivers usually is.
package hwmon

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"cxlpool/bmc"
)

// DefaultRoot is where the kernel publishes the hwmon class.
const DefaultRoot = "/sys/class/hwmon"

// Reader reads one hwmon tree.
type Reader struct {
	fsys fs.FS
	now  func() time.Time
}

// New returns a reader of the tree at root (DefaultRoot if empty) stamping
// readings with now (time.Now if nil).
func New(root string, now func() time.Time) *Reader {
	if root == "" {
		root = DefaultRoot
	}
	return NewFS(os.DirFS(root), now)
}

// NewFS returns a reader of a tree in fsys, whose root holds the hwmonN
// entries (directories or symlinks to them).
func NewFS(fsys fs.FS, now func() time.Time) *Reader {
	if now == nil {
		now = time.Now
	}
	return &Reader{fsys: fsys, now: now}
}

// kinds maps an attribute prefix to its reading type and scale.
var kinds = map[string]struct {
	rt    bmc.ReadingType
	scale float64
}{
	"temp":  {bmc.Temperature, 1e-3},
	"fan":   {bmc.Rotational, 1},
	"in":    {bmc.Voltage, 1e-3},
	"curr":  {bmc.Current, 1e-3},
	"power": {bmc.Power, 1e-6},
}

var inputRE = regexp.MustCompile(`^(temp|fan|in|curr|power)(\d+)_input$`)

// chip is one hwmonN directory.
type chip struct {
	index int    // N of hwmonN
	dir   string // where the attributes are (hwmonN or hwmonN/device)
	name  string
	key   string // the ID prefix
}

// Read returns every sensor of every chip, ordered by ID. A sensor whose
// value cannot be read (EIO, ENODATA, a set _fault flag) is returned
// invalid rather than failing the whole read; only an unreadable root is
// an error.
func (r *Reader) Read() ([]bmc.Sensor, error) {
	entries, err := fs.ReadDir(r.fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("hwmon: %w", err)
	}
	var chips []*chip
	for _, e := range entries {
		n, ok := strings.CutPrefix(e.Name(), "hwmon")
		idx, err := strconv.Atoi(n)
		if !ok || err != nil {
			continue
		}
		c := &chip{index: idx, dir: e.Name()}
		name, err := r.text(path.Join(c.dir, "name"))
		if err != nil {
			// Drivers of old kernels put everything under device/.
			c.dir = path.Join(e.Name(), "device")
			if name, err = r.text(path.Join(c.dir, "name")); err != nil {
				continue
			}
		}
		c.name = name
		chips = append(chips, c)
	}
	slices.SortFunc(chips, func(a, b *chip) int { return a.index - b.index })
	seen := map[string]int{}
	for _, c := range chips {
		base := sanitize(c.name)
		c.key = base
		if n := seen[base]; n > 0 {
			c.key = fmt.Sprintf("%s_%d", base, n)
		}
		seen[base]++
	}
	now := r.now()
	var out []bmc.Sensor
	for _, c := range chips {
		files, err := fs.ReadDir(r.fsys, c.dir)
		if err != nil {
			continue
		}
		for _, f := range files {
			m := inputRE.FindStringSubmatch(f.Name())
			if m == nil {
				continue
			}
			out = append(out, r.sensor(c, m[1], m[1]+m[2], now))
		}
	}
	slices.SortFunc(out, func(a, b bmc.Sensor) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// sensor reads attribute attr (e.g. "temp1") of kind (e.g. "temp").
func (r *Reader) sensor(c *chip, kind, attr string, now time.Time) bmc.Sensor {
	k := kinds[kind]
	s := bmc.Sensor{
		ID: c.key + "_" + attr, Name: c.name + " " + attr, ReadingType: k.rt,
		PhysicalContext: physicalContext(c.name), Updated: now, Health: bmc.OK, State: bmc.Enabled,
	}
	if label, err := r.text(path.Join(c.dir, attr+"_label")); err == nil && label != "" {
		s.Name = c.name + " " + label
	}
	value := func(suffix string) *float64 {
		v, err := r.number(path.Join(c.dir, attr+"_"+suffix))
		if err != nil {
			return nil
		}
		v *= k.scale
		return &v
	}
	t := &s.Thresholds
	switch kind {
	case "temp":
		t.UpperCaution, t.UpperCritical, t.UpperFatal = value("max"), value("crit"), value("emergency")
		t.LowerCaution, t.LowerCritical = value("min"), value("lcrit")
		if h := value("max_hyst"); h != nil && t.UpperCaution != nil {
			t.Hysteresis = round(*t.UpperCaution - *h)
		}
	case "fan":
		t.LowerCaution = value("min")
	default:
		t.UpperCaution, t.UpperCritical = value("max"), value("crit")
		t.LowerCaution, t.LowerCritical = value("min"), value("lcrit")
	}
	if fault, err := r.number(path.Join(c.dir, attr+"_fault")); err == nil && fault != 0 {
		s.State, s.Health = bmc.UnavailableOffline, bmc.Warning
		return s
	}
	v := value("input")
	if v == nil {
		s.State, s.Health = bmc.UnavailableOffline, bmc.Warning
		return s
	}
	s.Reading, s.Valid = round(*v), true
	s.Level = t.Classify(s.Reading)
	s.Health = s.Level.Health()
	return s
}

// round trims float noise from the unit conversion (6 decimals is finer
// than any hwmon unit).
func round(v float64) float64 { return math.Round(v*1e6) / 1e6 }

func (r *Reader) text(name string) (string, error) {
	b, err := fs.ReadFile(r.fsys, name)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

func (r *Reader) number(name string) (float64, error) {
	s, err := r.text(name)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, errors.Join(fs.ErrInvalid, err)
	}
	return float64(v), nil
}

// sanitize keeps letters, digits and underscores.
func sanitize(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return "hwmon"
	}
	return b.String()
}

// physicalContext guesses a Redfish PhysicalContext from the driver name.
func physicalContext(name string) string {
	switch {
	case name == "coretemp" || name == "k10temp" || name == "zenpower" || strings.HasPrefix(name, "cpu"):
		return "CPU"
	case name == "nvme" || name == "drivetemp":
		return "StorageDevice"
	case strings.HasPrefix(name, "power_meter"):
		return "PowerSupply"
	}
	return "SystemBoard"
}
