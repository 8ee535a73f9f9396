package main

// poolctl fleet events: the fleet's event stream (every box's Redfish
// events and capacity changes), replayed from a sequence or a time and
// optionally followed, filtered by box, host and kind. It reads; it
// changes nothing.

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"cxlpool/fleet"
	fleetnats "cxlpool/fleet/nats"
)

func fleetEvents(ctx context.Context, a *app, args []string) error {
	fs, v := a.fleetFlags("fleet events", "[--from SEQ | --since TIME] [--follow] [--box BOX] [--host LD|-] [--kind redfish|capacity]")
	from := fs.Uint64("from", 0, "replay from this stream `sequence` (printed as SEQ; 0: from the start, or --since)")
	since := fs.String("since", "", "replay the events since `TIME`: RFC 3339, or a duration ago (10m)")
	follow := fs.Bool("follow", false, "go on printing new events until interrupted (or --timeout)")
	box := fs.String("box", "", "only this `box`'s events (box-<serial>)")
	host := fs.String("host", "", "only the events of the host on head `LD` (a number), or - for the boxes' own")
	kind := fs.String("kind", "", "only events of this `kind`: redfish or capacity")
	if _, err := parse(fs, args, 0, 0); err != nil {
		return err
	}
	filter, err := fleet.EventFilter(fleet.BoxID(*box), *host, *kind)
	if err != nil {
		return usagef("fleet events: %v", err)
	}
	r := fleetnats.Replay{From: *from, Filter: filter, Follow: *follow}
	if *since != "" {
		if *from != 0 {
			return usagef("fleet events: --from and --since exclude each other")
		}
		if r.Since, err = sinceArg(*since, time.Now()); err != nil {
			return usagef("fleet events: --since: %v", err)
		}
	}
	ctx, cancel := a.deadline(ctx, *follow)
	defer cancel()
	p, err := a.fleetPlane(ctx, v)
	if err != nil {
		return err
	}
	defer p.Close()
	if a.g.json && !*follow {
		out := []fleetnats.Event{}
		if err := p.Replay(ctx, r, func(e fleetnats.Event) error { out = append(out, e); return nil }); err != nil {
			return err
		}
		return a.printJSON(out)
	}
	enc := json.NewEncoder(a.stdout)
	enc.SetEscapeHTML(false)
	if !a.g.json {
		fmt.Fprintln(a.stdout, eventRow("SEQ", "TIME", "BOX", "HOST", "KIND", "EVENT"))
	}
	return p.Replay(ctx, r, func(e fleetnats.Event) error {
		if a.g.json { // following: one object a line, as they come
			return enc.Encode(e)
		}
		h := "-"
		if e.Host != nil {
			h = strconv.Itoa(int(*e.Host))
		}
		_, err := fmt.Fprintln(a.stdout, eventRow(strconv.FormatUint(e.Seq, 10), e.Time.UTC().Format(time.RFC3339), string(e.Box), h, e.Kind, eventText(e.Envelope)))
		return err
	})
}

// eventRow is a line of fixed columns: a followed stream cannot be
// aligned after the fact as a table is.
func eventRow(seq, at, box, host, kind, what string) string {
	return fmt.Sprintf("%-6s  %-20s  %-20s  %-4s  %-8s  %s", seq, at, box, host, kind, what)
}

// eventText says what happened, in a few words.
func eventText(e fleet.Envelope) string {
	switch e.Kind {
	case fleet.KindRedfish:
		s := e.MessageID
		if len(e.Args) > 0 {
			s += " [" + strings.Join(e.Args, ", ") + "]"
		}
		if e.Origin != "" {
			s += " " + e.Origin
		}
		return s
	case fleet.KindCapacity:
		// "chunk 1: reserved", "grant 1 of chunk 1: granted 4 GiB".
		var what []string
		if e.Grant != 0 {
			what = append(what, fmt.Sprintf("grant %d", e.Grant))
		}
		if e.Chunk != 0 {
			what = append(what, fmt.Sprintf("chunk %d", e.Chunk))
		}
		s := strings.Join(what, " of ")
		if s == "" {
			s = e.Change
		}
		msg := e.Message
		if msg == "" {
			msg = e.State
		}
		if e.Size != 0 {
			msg = strings.TrimSpace(msg + " " + size(e.Size))
		}
		if msg == "" {
			return s
		}
		return s + ": " + msg
	}
	return e.Kind
}

// sinceArg reads an RFC 3339 time or a duration before now.
func sinceArg(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return time.Time{}, fmt.Errorf("%q: want an RFC 3339 time or a positive duration (10m)", s)
	}
	return now.Add(-d), nil
}
