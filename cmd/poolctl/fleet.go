package main

// poolctl fleet: the fleet plane's view of every box (fleet, fleet/nats).
// It reads the boxes' inventory records from NATS and answers placement
// questions from them; it changes nothing. Capacity is then asked of the
// owning box's own API (poolctl --server URL request ...): no box, and no
// fleet view, changes another box's ledger.

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"cxlpool/fleet"
	fleetnats "cxlpool/fleet/nats"
)

// defaultFleet is a box's embedded fleet server.
const defaultFleet = "nats://127.0.0.1:4222"

func cmdFleet(ctx context.Context, a *app, args []string) error {
	sub := "boxes"
	if len(args) > 0 && args[0] != "" && args[0][0] != '-' {
		sub, args = args[0], args[1:]
	}
	switch sub {
	case "boxes", "hosts", "free":
		return fleetList(ctx, a, sub, args)
	case "place":
		return fleetPlace(ctx, a, args)
	case "events":
		return fleetEvents(ctx, a, args) // fleetevents.go
	}
	return usagef("fleet: unknown subcommand %q (boxes, hosts, free, place, events)", sub)
}

// fleetFlags are the plane's address and credentials.
type fleetFlagValues struct{ urls, creds, ca *string }

func (a *app) fleetFlags(name, synopsis string) (*flag.FlagSet, fleetFlagValues) {
	fs := a.flags(name, synopsis+" [--nats URLS] [--creds FILE]")
	def := a.getenv("POOLCTL_FLEET")
	if def == "" {
		def = defaultFleet
	}
	v := fleetFlagValues{
		urls:  fs.String("nats", def, "the fleet's NATS `servers`, comma separated ($POOLCTL_FLEET)"),
		creds: fs.String("creds", a.getenv("POOLCTL_FLEET_CREDS"), "fleet credentials `file`: .creds, nkey seed or USER:PASSWORD; a box's own is DATA/fleet.creds ($POOLCTL_FLEET_CREDS)"),
		ca:    fs.String("nats-ca", "", "CA `file` for tls:// fleet servers"),
	}
	return fs, v
}

func (a *app) fleetPlane(ctx context.Context, v fleetFlagValues) (*fleetnats.Plane, error) {
	if *v.creds == "" {
		return nil, usagef("fleet: --creds is required (the fleet plane takes no anonymous client); a box's embedded plane: --creds DATA/fleet.creds")
	}
	return fleetnats.ConnectReader(ctx, fleetnats.Config{URLs: strings.Split(*v.urls, ","), CredsFile: *v.creds, CAFile: *v.ca, Name: "poolctl"})
}

func (a *app) fleetBoxes(ctx context.Context, v fleetFlagValues) ([]fleet.Inventory, error) {
	ctx, cancel := a.deadline(ctx, false)
	defer cancel()
	p, err := a.fleetPlane(ctx, v)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	return p.Boxes(ctx)
}

func fleetList(ctx context.Context, a *app, sub string, args []string) error {
	fs, v := a.fleetFlags("fleet "+sub, "")
	if _, err := parse(fs, args, 0, 0); err != nil {
		return err
	}
	boxes, err := a.fleetBoxes(ctx, v)
	if err != nil {
		return err
	}
	switch sub {
	case "hosts":
		type hostOut struct {
			Box fleet.BoxID `json:"box"`
			fleet.Head
		}
		var out []hostOut
		rows := [][]string{}
		for _, b := range boxes {
			for _, h := range b.Heads {
				out = append(out, hostOut{b.Box, h})
				link, quota := "down", "none"
				if h.LinkUp {
					link = "up"
				}
				if h.Quota > 0 {
					quota = size(h.Quota)
				}
				rows = append(rows, []string{string(b.Box), h.Host, strconv.Itoa(int(h.LD)), link, size(h.Granted), quota})
			}
		}
		if a.g.json {
			return a.printJSON(out)
		}
		return a.table([]string{"BOX", "HOST", "LD", "LINK", "GRANTED", "QUOTA"}, rows)
	case "free":
		type regionOut struct {
			Box fleet.BoxID `json:"box"`
			fleet.RegionCapacity
		}
		var out []regionOut
		rows := [][]string{}
		for _, b := range boxes {
			for _, r := range b.Regions {
				out = append(out, regionOut{b.Box, r})
				rows = append(rows, []string{string(b.Box), strconv.Itoa(r.Index), size(r.Free), size(r.Reserved), size(r.Granted), size(r.Length)})
			}
		}
		if a.g.json {
			return a.printJSON(out)
		}
		return a.table([]string{"BOX", "REGION", "FREE", "RESERVED", "GRANTED", "SIZE"}, rows)
	}
	if a.g.json {
		if boxes == nil {
			boxes = []fleet.Inventory{}
		}
		return a.printJSON(boxes)
	}
	rows := [][]string{}
	for _, b := range boxes {
		up := 0
		for _, h := range b.Heads {
			if h.LinkUp {
				up++
			}
		}
		rows = append(rows, []string{string(b.Box), b.Serial, b.Firmware, string(b.Health),
			fmt.Sprintf("%d/%d", up, len(b.Heads)), size(b.Free()), b.API, b.Updated.UTC().Format(time.RFC3339)})
	}
	return a.table([]string{"BOX", "SERIAL", "FIRMWARE", "HEALTH", "LINKS", "FREE", "API", "UPDATED"}, rows)
}

func fleetPlace(ctx context.Context, a *app, args []string) error {
	fs, v := a.fleetFlags("fleet place", "HOST|BOX/HOST SIZE")
	pos, err := parse(fs, args, 2, 2)
	if err != nil {
		return err
	}
	n, err := sizeArg(pos[1])
	if err != nil {
		return err
	}
	boxes, err := a.fleetBoxes(ctx, v)
	if err != nil {
		return err
	}
	ans, err := fleet.Place(boxes, pos[0], n)
	if err != nil {
		return err
	}
	if a.g.json {
		return a.printJSON(ans)
	}
	if len(ans.Offers) == 0 {
		why := "no box in the fleet can"
		if len(ans.Refusals) > 0 {
			why += ": " + strings.Join(ans.Refusals, "; ")
		}
		return fmt.Errorf("%s get %s: %s", pos[0], size(n), why)
	}
	rows := [][]string{}
	for _, o := range ans.Offers {
		rows = append(rows, []string{string(o.Box), string(o.Via), strconv.Itoa(o.Region), size(o.Free), o.API})
	}
	if err := a.table([]string{"BOX", "VIA", "REGION", "FREE", "API"}, rows); err != nil {
		return err
	}
	best := ans.Offers[0]
	if best.Via == fleet.ViaHead {
		fmt.Fprintf(a.stdout, "\nAsk %s: poolctl --server %s request %s --host %s\n", best.Box, strings.TrimSuffix(best.API, "/redfish/v1"), size(n), best.Host)
	} else {
		fmt.Fprintf(a.stdout, "\n%s is cabled to no box: ask %s for a chunk and export it (poolctl --server %s request %s, then export create CHUNK --client %s)\n",
			pos[0], best.Box, strings.TrimSuffix(best.API, "/redfish/v1"), size(n), pos[0])
	}
	for _, r := range ans.Refusals {
		fmt.Fprintf(a.stdout, "not offered: %s\n", r)
	}
	return nil
}
