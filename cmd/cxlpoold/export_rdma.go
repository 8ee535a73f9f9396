package main

import (
	"flag"

	"cxlpool/appliance"
)

// addExportRDMAFlag is --export-rdma: exports over RDMA verbs beside TCP.
// The default (auto) needs a build with -tags verbs (cgo, libibverbs) and
// an RDMA device (a NIC's, or soft-RoCE: rdma link add rxe0 type rxe
// netdev eth0); without either the daemon serves TCP only and logs why.
func addExportRDMAFlag(fs *flag.FlagSet) *string {
	return fs.String("export-rdma", appliance.ExportRDMAAuto,
		"with --export-listen, also serve exports over RDMA verbs: auto (the first RDMA device, if the build has the verbs tag and the machine a device), a device name (rxe0, mlx5_0: must open), or off")
}
