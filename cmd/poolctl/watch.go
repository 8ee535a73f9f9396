package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"cxlpool/api/client"
)

// eventOut is one event record in --json output (one JSON object per
// line, so that a consumer can act on each as it comes).
type eventOut struct {
	EventID    string   `json:"event_id"`
	Time       string   `json:"time"`
	Type       string   `json:"type"`
	MessageID  string   `json:"message_id"`
	Severity   string   `json:"severity"`
	Message    string   `json:"message"`
	Args       []string `json:"args,omitempty"`
	Origin     string   `json:"origin,omitempty"`
	Resolution string   `json:"resolution,omitempty"`
}

func cmdWatch(ctx context.Context, a *app, args []string) error {
	fs := a.flags("watch", "[--count N] [--after EVENT_ID]")
	count := fs.Int("count", 0, "stop after `N` events (0: until interrupted)")
	after := fs.String("after", "", "first replay the kept events after `EVENT_ID` (an event_id printed by an earlier watch)")
	if _, err := parse(fs, args, 0, 0); err != nil {
		return err
	}
	if *count < 0 {
		return usagef("watch: --count must not be negative")
	}
	ctx, cancel := a.deadline(ctx, true)
	defer cancel()
	c, err := a.client()
	if err != nil {
		return err
	}
	stream, err := c.EventsAfter(ctx, *after)
	if err != nil {
		return explain(err)
	}
	defer stream.Close()
	fmt.Fprintf(a.stderr, "Watching events at %s (Ctrl-C stops).\n", c.Server())
	enc := json.NewEncoder(a.stdout)
	enc.SetEscapeHTML(false)
	seen := 0
	for {
		ev, err := stream.Next()
		if err != nil {
			// Ctrl-C or --timeout ends a watch normally.
			if ctx.Err() != nil && client.IsClosed(err) {
				return nil
			}
			if errors.Is(err, context.Canceled) || client.IsClosed(err) {
				return fmt.Errorf("watch: the service ended the event stream")
			}
			return fmt.Errorf("watch: %w", err)
		}
		for _, r := range ev.Events {
			o := eventOut{EventID: r.EventID, Time: r.EventTimestamp, Type: r.EventType, MessageID: r.MessageID,
				Severity: r.MessageSeverity, Message: r.Message, Args: r.MessageArgs, Origin: r.Origin(), Resolution: r.Resolution}
			if a.g.json {
				if err := enc.Encode(o); err != nil {
					return err
				}
			} else {
				// The event id first: `watch --after ID` resumes there.
				fmt.Fprintf(a.stdout, "%s  %s  %-8s %-34s  %s  %s\n", o.EventID, o.Time, o.Severity,
					client.MessageKey(o.MessageID), orDash(o.Origin), clean(o.Message))
				if o.Resolution != "" {
					fmt.Fprintf(a.stdout, "    %s\n", clean(o.Resolution))
				}
			}
			seen++
			if *count > 0 && seen >= *count {
				return nil
			}
		}
	}
}

// clean keeps a server-provided string on one printable line.
func clean(s string) string {
	b := []rune(s)
	for i, r := range b {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			b[i] = ' '
		}
	}
	return string(b)
}
