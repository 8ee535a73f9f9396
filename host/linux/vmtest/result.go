// Package vmtest runs the Linux host backend (host/linux) for real: one
// QEMU guest (TCG) with a CXL host bridge (pxb-cxl), two root ports, a
// cxl-type3 memory device and a CXL Fixed Memory Window, booting Debian's
// kernel (the one the box image uses) with a small initramfs whose init
// is ./guest (the modules it needs, nothing else). The guest reports its
// checks and timings on the console.
//
// QEMU 7.2 (Debian 12) emulates only persistent Type-3 memory and kernel
// 6.1 has no ram regions (no create_ram_region, no DEV_DAX_CXL), so the
// path run here is the persistent one: pmem region → devdax namespace →
// /dev/daxX.Y → kmem. The ram-region path runs only on the fake sysfs
// tree of host/linux's tests.
//
// Only with CXLPOOL_VMTEST=1 (make vmtest-host); it needs
// qemu-system-x86_64, xz and /boot/vmlinuz-* with its /lib/modules.
package vmtest

// ResultPrefix starts the guest's one result line on the console.
const ResultPrefix = "CXLPOOL-HOSTVM-RESULT "

// Result is what the guest reports: its checks as steps, the busy
// refusals' texts, the NUMA node system-ram came up as, and the timings.
type Result struct {
	Kernel   string   `json:"kernel"`
	Serial   string   `json:"serial"`
	Region   string   `json:"region_type"`
	Dax      string   `json:"dax"`
	Size     uint64   `json:"size"`
	Node     int      `json:"numa_node"`
	NodeMiB  uint64   `json:"numa_node_mib"`
	BusySelf string   `json:"busy_self"`
	BusyPeer string   `json:"busy_peer"`
	Attach   []int64  `json:"attach_usable_us"`       // attach + first mmap
	Release  []int64  `json:"release_gone_us"`        // teardown only (KeepContents)
	Zeroed   []int64  `json:"release_gone_zeroed_us"` // zeroing, then teardown (the default)
	Steps    []string `json:"steps"`
	Error    string   `json:"error,omitempty"`
}
