package oemschema

// The CxlPool OEM extension, one complexType per object the service puts
// under Oem.CxlPool (top level: the @odata.type it carries) or below one
// (nested). gen.go writes the CSDL and the JSON schema from this list, so
// the two never disagree; a new Oem property is added here, then
// `go test ./api/oemschema -update` rewrites both files.

// kind is a property's type.
type kind int

const (
	kString   kind = iota
	kInt           // Edm.Int64, JSON integer
	kNumber        // Edm.Decimal, JSON number
	kBool          // Edm.Boolean
	kDateTime      // Edm.DateTimeOffset
	kLink          // a navigation property: {"@odata.id": ...}
	kObject        // a complexType of this extension
)

type prop struct {
	name string
	kind kind
	// of is the link's DMTF entity type ("Memory.Memory") or the
	// object's complexType name.
	of       string
	array    bool
	nullable bool
	write    bool // a client may set it (POST or PATCH)
	desc     string
}

type complexType struct {
	name string
	// top is a type whose objects sit at Oem.CxlPool and carry
	// @odata.type "#CxlPool.v1_0_0.<name>".
	top   bool
	desc  string
	props []prop
}

func str(name, desc string) prop     { return prop{name: name, kind: kString, desc: desc} }
func integer(name, desc string) prop { return prop{name: name, kind: kInt, desc: desc} }
func boolean(name, desc string) prop { return prop{name: name, kind: kBool, desc: desc} }
func when(name, desc string) prop    { return prop{name: name, kind: kDateTime, desc: desc} }
func link(name, of, desc string) prop {
	return prop{name: name, kind: kLink, of: of, desc: desc}
}
func object(name, of, desc string) prop { return prop{name: name, kind: kObject, of: of, desc: desc} }

func (p prop) rw() prop   { p.write = true; return p }
func (p prop) list() prop { p.array = true; return p }
func (p prop) null() prop { p.nullable = true; return p }

// extension is the whole extension, in the order the files list it.
func extension() []complexType {
	return []complexType{
		{name: "ManagerAccount", top: true, desc: "The host an account of a host role is bound to.", props: []prop{
			str("SystemId", "The Id of the ComputerSystem (host) the account is bound to.").rw(),
			link("System", "ComputerSystem.ComputerSystem", "The ComputerSystem (host) the account is bound to."),
		}},
		{name: "ComputerSystem", top: true, desc: "A host's head port, quota and granted pool memory.", props: []prop{
			boolean("LinkUp", "Whether the host's CXL link to its head port is up."),
			integer("Port", "The head port the host is attached to."),
			integer("QuotaMiB", "The most pool memory the host may hold, in MiB (0: the pool's DefaultHostQuotaMiB applies).").rw(),
			integer("GrantedMiB", "The pool memory granted to the host, in MiB."),
			link("LogicalDevice", "CXLLogicalDevice.CXLLogicalDevice", "The logical device of the multi-headed device that serves the host."),
			object("HostAgent", "HostAgent", "The host agent (cxlhost) that reports what the host does with its memory."),
			str("Shares", "The shares (named sharable chunks) an administrator allows the host to create or join.").list(),
		}},
		{name: "HostAgent", desc: "A host's agent as the box last heard from it.", props: []prop{
			str("State", "Reporting, Silent (no report within its time to live: the host or its agent is gone) or None (never reported)."),
			integer("TagCount", "The number of tags (grants) the agent last reported."),
			str("Agent", "The reporting program and its version."),
		}},
		{name: "Memory", top: true, desc: "The grant that lends a host this memory.", props: []prop{
			link("Connection", "Connection.Connection", "The connection (grant) the memory comes from."),
			integer("ExtentCount", "The number of device extents the memory is made of."),
			object("Host", "HostMemory", "What the host did with the memory, as its agent reports."),
		}},
		{name: "HostMemory", desc: "A grant on its host: accepted by the host (it answered the add) is not yet usable on the host.", props: []prop{
			str("State", "NotReported (no agent reports for the host), AgentSilent (its reports stopped), NotSurfaced (accepted, not usable yet), "+
				"Usable, InUse (mapped by a program), ReleaseRefusedInUse (a release waits for the program) or Releasing."),
			boolean("Accepted", "Whether the host accepted the capacity: the grant is granted."),
			boolean("Usable", "Whether the host surfaced the capacity as memory an application maps."),
			boolean("InUse", "Whether a program on the host maps the memory."),
			str("Mode", "How the host surfaces it: devdax, system-ram or simfile (the virtual box)."),
			str("Path", "What an application opens on the host (a /dev/daxX.Y device, or the virtual box's memory file)."),
			when("Reported", "When the agent reported this."),
		}},
		{name: "Connection", top: true, desc: "The grant of a memory chunk to a host.", props: []prop{
			str("GrantState", "The state of the grant in the capacity ledger."),
			integer("GrantedMiB", "The memory granted, in MiB."),
			integer("ExtentCount", "The number of device extents of the grant."),
			when("Created", "When the grant was made."),
			link("Memory", "Memory.Memory", "The memory the host sees for this grant, once granted."),
		}},
		{name: "MemoryChunks", top: true, desc: "Where a chunk lives in the device and who holds it.", props: []prop{
			boolean("Sharable", "Whether the chunk lies in a sharable region (may be granted to several hosts).").rw(),
			integer("Region", "The dynamic capacity region the chunk lies in.").rw(),
			str("Tag", "The chunk's tag (a UUID), which names its extents in the device."),
			when("Created", "When the chunk was reserved."),
			object("Grants", "ChunkGrant", "The grants of the chunk the caller may see.").list(),
			str("Name", "The chunk's name.").rw(),
			str("Owner", "The Id of the ComputerSystem (host) that reserved the chunk."),
			boolean("Stranded", "Whether the chunk is stranded: no host holds it and a grant of it was lost since its last release."),
			object("LostGrants", "LostGrant", "The lost grants that strand the chunk, as far as the caller may see them.").list(),
			object("Extents", "ChunkExtent", "The device (DPA) ranges the chunk's holders hold, lowest first; a chunk may lie in several.").list(),
		}},
		{name: "ChunkExtent", desc: "One device address range of a chunk.", props: []prop{
			integer("OffsetMiB", "The range's start in the device's address space (DPA), in MiB."),
			integer("SizeMiB", "The range's length, in MiB."),
		}},
		{name: "LostGrant", desc: "A grant whose capacity the device no longer holds.", props: []prop{
			str("Connection", "The Id of the grant's Connection."),
			str("SystemId", "The Id of the ComputerSystem (host) the chunk was granted to."),
			str("Reason", "Why the grant was recorded lost."),
			when("Lost", "When the grant was recorded lost."),
		}},
		{name: "FreedStrandedChunks", top: true, desc: "What #CxlPool.FreeStrandedChunks freed.", props: []prop{
			link("FreedChunks", "MemoryChunks.MemoryChunks", "The chunks freed.").list(),
			integer("FreedMiB", "The capacity freed, in MiB."),
		}},
		{name: "ChunkGrant", desc: "One grant of a chunk.", props: []prop{
			link("Connection", "Connection.Connection", "The connection of the grant."),
			str("SystemId", "The Id of the ComputerSystem (host) the chunk is granted to."),
			str("State", "The state of the grant in the capacity ledger."),
		}},
		{name: "MemoryDomain", top: true, desc: "How the pool's capacity is used.", props: []prop{
			integer("FreeMiB", "The capacity no chunk holds, in MiB."),
			object("Regions", "DomainRegion", "The dynamic capacity regions of the device.").list(),
			integer("ReservedMiB", "The capacity of chunks reserved and not granted, in MiB."),
			integer("GrantedMiB", "The capacity granted to hosts, in MiB."),
			integer("SharedMiB", "The capacity of sharable chunks granted to several hosts, in MiB."),
			integer("OrphanedMiB", "The capacity the device holds for no chunk of the ledger, in MiB."),
			integer("QuotaMiB", "The caller's own host quota, in MiB (0: the default host quota applies)."),
			integer("HeldMiB", "The capacity counted against the caller's host quota, in MiB."),
			integer("DefaultHostQuotaMiB", "The quota of hosts without one of their own, in MiB; a fair share of the pool until set.").rw(),
			boolean("DefaultHostQuotaIsFairShare", "Whether the default host quota is the fair share (pool ÷ heads) because no administrator set one."),
			integer("StrandedChunks", "How many chunks are stranded by lost grants."),
			integer("StrandedMiB", "The capacity of the stranded chunks, in MiB."),
		}},
		{name: "DomainRegion", desc: "One dynamic capacity region.", props: []prop{
			integer("Region", "The region's index."),
			boolean("Sharable", "Whether the region's capacity may be shared between hosts."),
			integer("SizeMiB", "The region's size, in MiB."),
			integer("FreeMiB", "The region's capacity no chunk holds, in MiB."),
			integer("BlockSizeMiB", "The region's block size, in MiB."),
			boolean("SanitizeOnRelease", "Whether the device sanitizes capacity a host releases itself in this region."),
			str("AllocationRefused", "Why no new chunk is placed in the region, when none is."),
		}},
		{name: "DynamicCapacityDevice", top: true, desc: "The identity and limits of the multi-headed dynamic capacity device.", props: []prop{
			str("VendorId", "The PCI vendor ID (0xNNNN)."),
			str("DeviceId", "The PCI device ID (0xNNNN)."),
			str("SubsystemVendorId", "The PCI subsystem vendor ID (0xNNNN)."),
			str("SubsystemId", "The PCI subsystem ID (0xNNNN)."),
			integer("TotalCapacityMiB", "The device's total capacity, in MiB."),
			integer("ExtentsPerHost", "The most extents the device keeps for one host."),
			integer("TagsPerHost", "The most tags the device keeps for one host."),
		}},
		{name: "LocalCXLDevice", top: true, desc: "A CXL memory device of the management computer, as the Linux CXL driver shows it.", props: []prop{
			str("Name", "The driver's name of the device (memN)."),
			integer("RAMBytes", "The device's volatile capacity, in bytes."),
			integer("PMEMBytes", "The device's persistent capacity, in bytes."),
			integer("NUMANode", "The NUMA node of the device (-1: none)."),
			str("Host", "The host bridge the device is below."),
			str("IdentifyError", "Why the device's mailbox did not answer Identify."),
		}},
		{name: "Fabric", top: true, desc: "Where remote clients reach exported pool memory.", props: []prop{
			str("Transport", "The transport exports are served over."),
			str("Address", "The address the export server listens on."),
		}},
		{name: "Export", top: true, desc: "Pool memory exported to a remote client.", props: []prop{
			str("Client", "The remote client the memory is exported to.").rw(),
			integer("Offset", "The offset of the export in the chunk, in bytes.").rw(),
			integer("Length", "The length of the export, in bytes.").rw(),
			when("Created", "When the export was made."),
			when("Expiry", "When the export ends.").rw(),
			object("Traffic", "ExportTraffic", "The operations the client made on the export."),
			str("Token", "The client's access token: shown only in the answer that creates the export."),
		}},
		{name: "ExportTraffic", desc: "The operations a remote client made on an export.", props: []prop{
			integer("Reads", "The number of READ operations."),
			integer("Writes", "The number of WRITE operations."),
			integer("Atomics", "The number of atomic operations."),
			integer("BytesRead", "The bytes read."),
			integer("BytesWritten", "The bytes written."),
		}},
		{name: "LogEntry", top: true, desc: "The change request an audit log entry records.", props: []prop{
			str("Method", "The request's HTTP method."),
			str("URI", "The request's URI."),
			integer("StatusCode", "The HTTP status of the answer."),
			str("Client", "The address the request came from."),
		}},
		{name: "Fan", top: true, desc: "The sensor of a fan's speed.", props: []prop{
			link("SpeedSensor", "Sensor.Sensor", "The sensor that reads the fan's speed."),
		}},
		{name: "SoftwareInventory", top: true, desc: "A slot of the box's A/B image.", props: []prop{
			str("State", "The slot's state."),
			boolean("Trial", "Whether the slot boots next on trial."),
			boolean("Active", "Whether the slot is the one the box boots."),
			boolean("Running", "Whether the running image came from the slot."),
			integer("SecurityVersion", "The image's security version (rollback protection)."),
			str("Error", "Why the slot's image is not usable."),
		}},
		{name: "TelemetryService", top: true, desc: "The hotness stream and the CHMU configuration.", props: []prop{
			str("DisabledReason", "Why the service is disabled."),
			str("StreamUri", "The WebSocket URI of the live hotness stream."),
			str("StreamTicketUri", "Where a client gets a ticket that opens the stream."),
			prop{name: "FramesPerSecond", kind: kNumber, desc: "How many frames per second the stream sends."},
			object("CHMU", "CHMU", "The CXL Hotness Monitoring Unit's configuration.").rw(),
			object("CHMUCapabilities", "CHMUCapabilities", "What the CXL Hotness Monitoring Unit can do."),
		}},
		{name: "CHMU", desc: "The CXL Hotness Monitoring Unit's configuration.", props: []prop{
			boolean("Enabled", "Whether the unit counts accesses.").rw(),
			str("AccessType", "The accesses counted.").rw(),
			integer("UnitBytes", "The size of a counted unit, in bytes.").rw(),
			integer("Threshold", "The count at which a unit is hot.").rw(),
			str("Mode", "Epoch or AlwaysOn.").rw(),
			integer("EpochMilliseconds", "The epoch length, in milliseconds.").rw(),
			integer("DownSamplingFactor", "One access in this many is counted.").rw(),
			boolean("RandomDownSampling", "Whether down-sampling is random.").rw(),
			boolean("OverflowInterrupt", "Whether a hotlist overflow interrupts.").rw(),
			boolean("LevelInterrupt", "Whether the hotlist fill level interrupts.").rw(),
			integer("FillThreshold", "The hotlist fill level that interrupts.").rw(),
			integer("Ranges", "The monitored ranges (null: all).").list().null().rw(),
		}},
		{name: "CHMUCapabilities", desc: "What the CXL Hotness Monitoring Unit can do.", props: []prop{
			integer("Instances", "The number of units."),
			integer("HotlistEntries", "The size of a unit's hotlist."),
			str("AccessTypes", "The access types a unit can count.").list(),
			integer("UnitBytes", "The unit sizes supported, in bytes.").list(),
			integer("DownSamplingFactors", "The down-sampling factors supported.").list(),
			str("Modes", "The modes supported.").list(),
			integer("MinEpochMilliseconds", "The shortest epoch, in milliseconds."),
			integer("MaxEpochMilliseconds", "The longest epoch, in milliseconds."),
			integer("RangeBytes", "The size of a monitored range, in bytes."),
			integer("RangeCount", "The number of ranges a unit can monitor."),
			boolean("RandomDownSampling", "Whether random down-sampling is supported."),
			boolean("OverflowInterrupt", "Whether an overflow interrupt is supported."),
			boolean("LevelInterrupt", "Whether a fill-level interrupt is supported."),
		}},
		{name: "MetricReport", top: true, desc: "The unit size, placement hints and collector counters of a hotness report.", props: []prop{
			integer("UnitBytes", "The size of a reported unit, in bytes."),
			object("Hints", "Hints", "The host's placement advice."),
			object("Collector", "Collector", "The collector's counters."),
			when("Start", "The start of a history report's window."),
			when("End", "The end of a history report's window."),
			integer("IntervalSeconds", "The width of a history report's buckets, in seconds."),
		}},
		{name: "MetricValue", top: true, desc: "Where a hot unit is.", props: []prop{
			integer("DPA", "The unit's device physical address."),
			integer("Bytes", "The unit's size, in bytes."),
			integer("ErrorBound", "The most the count may be over."),
			boolean("Shared", "Whether the unit lies in shared capacity."),
			prop{name: "Min", kind: kNumber, desc: "A history bucket's lowest sample."},
			prop{name: "Max", kind: kNumber, desc: "A history bucket's highest sample."},
			integer("Samples", "How many samples a history bucket holds."),
		}},
		{name: "Hints", desc: "A host's placement advice.", props: []prop{
			object("Promote", "PromoteHint", "The units to keep close.").list(),
			object("Shrink", "ShrinkHint", "The held memory that has gone cold.").list(),
			integer("HeldBytes", "The pool memory the host holds, in bytes."),
			integer("ColdBytes", "The held memory that has gone cold, in bytes."),
		}},
		{name: "PromoteHint", desc: "A unit to keep close.", props: []prop{
			integer("DPA", "The unit's device physical address."),
			integer("Bytes", "The unit's size, in bytes."),
			integer("Accesses", "The unit's access count."),
			integer("ErrorBound", "The most the count may be over."),
			link("Memory", "Memory.Memory", "The host memory the unit lies in."),
		}},
		{name: "ShrinkHint", desc: "Held memory that has gone cold.", props: []prop{
			integer("Bytes", "The size of the memory, in bytes."),
			integer("ColdBytes", "The part of it that is cold, in bytes."),
			link("Memory", "Memory.Memory", "The host memory."),
		}},
		{name: "KVNamespaceCollection", top: true, desc: "The KV-cache store's namespaces (/redfish/v1/Oem/CxlPool/KVNamespaces).", props: []prop{
			str("Name", "The collection's name."),
			link("Members", "CxlPool.KVNamespace", "The namespaces.").list(),
			integer("Members@odata.count", "The number of namespaces."),
		}},
		{name: "KVNamespace", top: true, desc: "A namespace of the KV-cache store: blocks in shared pool memory granted to every member host.", props: []prop{
			str("Id", "The namespace's name."),
			str("Name", "The namespace's name: 1-63 of a-z, 0-9 and -_. after the first.").rw(),
			integer("ChunkSizeMiB", "The size of each chunk the namespace adds, in MiB (a multiple of the region's block size).").rw(),
			integer("QuotaMiB", "The most pool memory the namespace may hold, in MiB; below what it holds, a PATCH releases its coldest chunks.").rw(),
			str("Hosts", "The Ids of the member hosts' ComputerSystems.").list().rw(),
			link("Systems", "ComputerSystem.ComputerSystem", "The member hosts.").list(),
			when("Created", "When the namespace was created."),
			object("Chunks", "KVChunk", "The chunks of shared pool memory that hold the namespace's blocks.").list(),
			object("Stats", "KVStats", "The namespace's numbers."),
			object("Tokens", "KVToken", "The member hosts' tokens for the KV protocol: only in the answer that creates them.").list(),
			object("Remote", "KVRemote", "The remote rack the namespace is exported to (null: none).").null(),
		}},
		{name: "KVRemote", desc: "A namespace's export to a remote rack: one token for the index and every chunk's export.", props: []prop{
			str("Client", "The remote rack's name (the exports' client)."),
			object("Exports", "KVExport", "The export of each chunk, read-write.").list(),
			str("Token", "The rack's token, 64 hex digits (the KV protocol's form): only in the Export action's answer."),
			str("ExportToken", "The same token as unpadded base64url (the export protocol's form): only in the Export action's answer."),
		}},
		{name: "KVExport", desc: "The export of one chunk of a namespace.", props: []prop{
			link("MemoryChunk", "MemoryChunks.MemoryChunks", "The chunk."),
			str("Tag", "The chunk's Dynamic Capacity tag, as the index names it in block locations."),
			str("Export", "The export's Id, which the rack opens with the token."),
			link("RDMAConnection", "Connection.Connection", "The export."),
			integer("Length", "The export's length, in bytes (the chunk's capacity)."),
		}},
		{name: "KVChunk", desc: "A chunk of a namespace.", props: []prop{
			link("MemoryChunk", "MemoryChunks.MemoryChunks", "The chunk."),
			str("Tag", "The chunk's Dynamic Capacity tag, as the hosts' mappings name it."),
			integer("SizeMiB", "The chunk's size, in MiB."),
		}},
		{name: "KVStats", desc: "A namespace's numbers.", props: []prop{
			integer("Blocks", "The committed blocks."),
			integer("UsedBytes", "The bytes of committed blocks (rounded to the allocation unit)."),
			integer("ReservedBytes", "The bytes of reservations not yet committed."),
			integer("FreeBytes", "The bytes the namespace's allocator has free (capacity less live blocks, including deleted ones still pinned)."),
			integer("CapacityMiB", "The namespace's chunks, in MiB."),
			integer("Evictions", "The blocks evicted since the daemon started."),
			integer("Sessions", "The clients' open sessions."),
		}},
		{name: "KVToken", desc: "A member host's token for the KV protocol.", props: []prop{
			str("Host", "The host's ComputerSystem Id."),
			str("Token", "The token, 64 hex digits; shown once."),
		}},
		{name: "Fleet", top: true, desc: "What the box's fleet plane knows of every box (/redfish/v1/Oem/CxlPool/Fleet); POST {Host, SizeMiB} to its Actions/CxlPool.Place asks which box can give a host that much.", props: []prop{
			str("Id", "Fleet."),
			str("Name", "The resource's name."),
			object("Status", "FleetHealth", "Warning while the plane is not connected or the records could not be read."),
			str("Box", "This box's fleet identity, box-<device serial>."),
			object("Plane", "FleetPlane", "The fleet plane's state on this box."),
			object("Boxes", "FleetBox", "Every live box's record, by box id.").list(),
		}},
		{name: "FleetHealth", desc: "The fleet view's status.", props: []prop{
			str("State", "Enabled."),
			str("Health", "OK, or Warning while the plane is not connected."),
		}},
		{name: "FleetPlane", desc: "The fleet plane's state on this box.", props: []prop{
			str("State", "Connected, Disconnected (joined; the client reconnects by itself), Joining or Retrying (the box joins in the background with backoff)."),
			str("Servers", "The NATS servers: the one connected to, or the ones configured."),
			boolean("Embedded", "The box runs the NATS server itself."),
			str("LastError", "Why the last attempt to join failed; empty once joined."),
			integer("Attempts", "Attempts to join so far."),
			when("Since", "When the plane entered its State."),
			when("NextAttempt", "When the next attempt to join is due (Retrying)."),
			integer("QueuedEvents", "Events waiting for the stream's acknowledgement."),
			integer("DroppedEvents", "Events dropped since the start because the bounded queue overflowed while the plane was unreachable."),
			str("ReadError", "Why the boxes' records could not be read now."),
		}},
		{name: "FleetBox", desc: "One box's inventory record on the fleet plane.", props: []prop{
			str("Box", "The box's id, box-<device serial>."),
			str("Serial", "The device's serial number."),
			str("Firmware", "The device's firmware revision."),
			str("API", "The box's Redfish service root: where its capacity is asked for."),
			str("Export", "The box's export server for remote racks (tcp://HOST:PORT); empty: none."),
			str("Health", "The box's health: OK, Warning or Critical."),
			when("Updated", "When the box last wrote its record."),
			integer("FreeMiB", "Free capacity over all regions, in MiB."),
			object("Heads", "FleetHead", "The device's heads and the hosts cabled to them.").list(),
			object("Regions", "FleetRegion", "Capacity per dynamic capacity region.").list(),
		}},
		{name: "FleetHead", desc: "A head of a box and the host cabled to it.", props: []prop{
			integer("LD", "The head's logical device."),
			integer("Port", "The head's port."),
			str("Host", "The host's name on its box."),
			boolean("LinkUp", "The head's link is up."),
			integer("GrantedMiB", "Capacity the host holds, in MiB."),
			integer("QuotaMiB", "The most the host may hold, in MiB; 0: no limit."),
		}},
		{name: "FleetRegion", desc: "A dynamic capacity region's accounting on a box.", props: []prop{
			integer("Region", "The region's index."),
			integer("SizeMiB", "The region's length, in MiB."),
			integer("BlockSizeMiB", "The region's block size, in MiB."),
			integer("FreeMiB", "Capacity no chunk reserves, in MiB."),
			integer("ReservedMiB", "Capacity chunks reserve, in MiB."),
			integer("GrantedMiB", "The part of it hosts hold, in MiB."),
			boolean("Sharable", "The region's capacity may be shared by hosts."),
		}},
		{name: "FleetPlacement", top: true, desc: "The answer of #CxlPool.Place: which box can give the host the size.", props: []prop{
			str("Host", "The host asked about: HOST, or BOX/HOST.").rw(),
			integer("SizeMiB", "The size asked for, in MiB.").rw(),
			boolean("Remote", "The host is cabled to no box: only exports can serve it."),
			object("Offers", "FleetOffer", "The boxes that can, best (most free) first.").list(),
			str("Refusals", "Why the other boxes cannot, each naming its rule.").list(),
		}},
		{name: "FleetOffer", desc: "A box that can give the host the size.", props: []prop{
			str("Box", "The box's id."),
			str("API", "The box's Redfish service root: ask there."),
			str("Export", "The box's export server (Via export)."),
			str("Via", "head: through the host's own head; export: an export to a remote rack."),
			str("Host", "The host's name on that box (Via head)."),
			integer("LD", "The host's head (Via head)."),
			integer("Region", "The region with the most free capacity that fits."),
			integer("FreeMiB", "That region's free capacity, in MiB."),
		}},
		{name: "Trigger", top: true, desc: "The open alerts of a trigger.", props: []prop{
			object("Alerts", "TriggerAlert", "The series beyond one of the trigger's thresholds.").list(),
		}},
		{name: "TriggerAlert", desc: "A series beyond one of its trigger's thresholds.", props: []prop{
			str("MetricProperty", "The resource the series is about."),
			str("Series", "The series: the metric, and the subject after a slash."),
			str("Severity", "Warning or Critical."),
			str("Threshold", "The threshold crossed: UpperCritical, UpperWarning, LowerWarning or LowerCritical."),
			prop{name: "ThresholdReading", kind: kNumber, desc: "The crossed threshold's value."},
			prop{name: "Reading", kind: kNumber, desc: "The series' last reading."},
			when("Since", "When the series crossed the threshold."),
			boolean("Acknowledged", "Whether someone acknowledged the alert."),
			str("AcknowledgedBy", "Who acknowledged it."),
			when("AcknowledgedAt", "When it was acknowledged."),
		}},
		{name: "Collector", desc: "The hotness collector's counters.", props: []prop{
			integer("Records", "The hotlist records read."),
			integer("Accesses", "The accesses the records count."),
			integer("Unmapped", "The records of addresses no chunk holds."),
			integer("Drains", "The hotlist drains."),
			integer("DrainErrors", "The drains that failed."),
			integer("Overflows", "The hotlist overflows."),
			integer("Epochs", "The epochs ended."),
			integer("Resets", "The unit resets."),
		}},
	}
}
