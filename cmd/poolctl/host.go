package main

// poolctl host: the verbs of the host agent (cxlhost) on this machine.
// They talk to the agent's local Unix socket, not to the box: the agent
// holds the box credentials and the device.

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"cxlpool/host"
	"cxlpool/host/agent"
)

// defaultAgentSocket is where cxlhost listens unless told otherwise.
const defaultAgentSocket = "/run/cxlhost.sock"

func cmdHost(ctx context.Context, a *app, args []string) error {
	sub := "list"
	if len(args) > 0 && args[0] != "" && args[0][0] != '-' {
		sub, args = args[0], args[1:]
	}
	switch sub {
	case "attach":
		return hostAttach(ctx, a, args)
	case "detach":
		return hostDetach(ctx, a, args)
	case "list":
		return hostList(ctx, a, args)
	}
	return usagef("host: unknown subcommand %q (attach, detach, list)", sub)
}

// agentClient is the local agent at --agent, else $CXLHOST_SOCKET, else
// the default socket.
func (a *app) agentClient(flagValue string) *agent.LocalClient {
	p := flagValue
	if p == "" {
		p = a.getenv("CXLHOST_SOCKET")
	}
	if p == "" {
		p = defaultAgentSocket
	}
	return agent.NewLocalClient(strings.TrimPrefix(p, "unix:"))
}

func hostAttach(ctx context.Context, a *app, args []string) error {
	fs := a.flags("host attach", "SIZE [--name N] [--shared NAME | --sharable] [--mode devdax|system-ram] [--agent SOCKET]")
	name := fs.String("name", "", "a `name` for the chunk")
	shareName := fs.String("shared", "", "create or join the share `NAME`: every host attached to it maps the same bytes "+
		"(an administrator allows each host the name first: poolctl hosts HostN --allow-share NAME)")
	shared := fs.Bool("sharable", false, "reserve sharable capacity, so that an administrator can 'poolctl share' it to other hosts")
	mode := fs.String("mode", "devdax", "`devdax` (a DAX device an application maps) or system-ram (a CPU-less NUMA node; Linux hosts only)")
	sock := fs.String("agent", "", "the host agent's `socket` (default $CXLHOST_SOCKET or "+defaultAgentSocket+")")
	pos, err := parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	if m := host.Mode(*mode); m != host.ModeDevDAX && m != host.ModeSystemRAM {
		return usagef("host attach: --mode %q: want devdax or system-ram", *mode)
	}
	n, err := sizeArg(pos[0])
	if err != nil {
		return err
	}
	ctx, cancel := a.deadline(ctx, false)
	defer cancel()
	at, err := a.agentClient(*sock).Attach(ctx, agent.AttachRequest{SizeBytes: n, Name: *name, Shared: *shared, Share: *shareName,
		Mode: host.Mode(*mode)})
	if err != nil {
		return err
	}
	if a.g.json {
		return a.printJSON(at)
	}
	w := a.stdout
	fmt.Fprintf(w, "Attached %s to %s as tag %s (usable after %.3fs; the box granted in %.3fs).\n",
		size(at.Capacity.Size), at.System, at.Tag, at.UsableSeconds, at.GrantSeconds)
	if at.Mode == host.ModeSystemRAM {
		fmt.Fprintf(w, "  Online as system RAM: NUMA node %d (no CPUs; bind with numactl --membind=%d).\n", at.NUMANode, at.NUMANode)
	} else {
		fmt.Fprintf(w, "  Path:  %s (%s)\n", at.Capacity.Path, at.Capacity.Kind)
	}
	if err := printExtents(a, at); err != nil {
		return err
	}
	if at.Capacity.Kind == "simfile" {
		fmt.Fprintln(w, "Simulator: the path is the virtual box's whole memory file; map each extent at its offset.")
	}
	for _, l := range at.Env {
		fmt.Fprintln(w, l)
	}
	return nil
}

func printExtents(a *app, at agent.Attachment) error {
	rows := make([][]string, 0, len(at.Capacity.Extents))
	for i, e := range at.Capacity.Extents {
		rows = append(rows, []string{strconv.Itoa(i), fmt.Sprintf("%#x", e.Offset), strconv.FormatUint(e.Length, 10), size(e.Length)})
	}
	return a.table([]string{"EXTENT", "OFFSET", "BYTES", "SIZE"}, rows)
}

func hostDetach(ctx context.Context, a *app, args []string) error {
	fs := a.flags("host detach", "TAG [--wait] [--force] [--agent SOCKET]")
	wait := fs.Bool("wait", false, "while a program maps the memory, wait until it unmaps it (Ctrl-C gives up; nothing is released)")
	force := fs.Bool("force", false, "unmap the memory from this host's programs still using it (they lose it; only whoever may open "+
		"the agent's socket, the host's administrator). Forcing the box's release is its administrator's: poolctl release --force CONNECTION")
	sock := fs.String("agent", "", "the host agent's `socket`")
	pos, err := parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	ctx, cancel := a.deadline(ctx, *wait) // waiting for a program has no deadline
	defer cancel()
	d, err := a.agentClient(*sock).Detach(ctx, pos[0], agent.DetachOptions{Force: *force, Wait: *wait})
	if err != nil {
		return err
	}
	if a.g.json {
		return a.printJSON(d)
	}
	if d.ChunkFreed {
		fmt.Fprintf(a.stdout, "Detached %s; chunk %s freed.\n", d.Tag, lastSegment(d.Chunk))
	} else {
		fmt.Fprintf(a.stdout, "Detached %s; chunk %s kept: %s.\n", d.Tag, lastSegment(d.Chunk), d.Kept)
	}
	return nil
}

func hostList(ctx context.Context, a *app, args []string) error {
	fs := a.flags("host list", "[--agent SOCKET]")
	sock := fs.String("agent", "", "the host agent's `socket`")
	if _, err := parse(fs, args, 0, 0); err != nil {
		return err
	}
	ctx, cancel := a.deadline(ctx, false)
	defer cancel()
	list, err := a.agentClient(*sock).List(ctx)
	if err != nil {
		return err
	}
	if a.g.json {
		return a.printJSON(list)
	}
	rows := make([][]string, 0, len(list))
	for _, at := range list {
		state := "online"
		switch {
		case at.Capacity.Releasing:
			state = "releasing"
		case at.Capacity.InUse && at.Capacity.ReleasePending:
			state = "release refused: in use"
		case at.Capacity.InUse:
			state = "in use"
		}
		rows = append(rows, []string{at.Tag, at.Name, size(at.Capacity.Size), strconv.Itoa(len(at.Capacity.Extents)), state})
	}
	return a.table([]string{"TAG", "NAME", "SIZE", "EXTENTS", "STATE"}, rows)
}
