package main

// The fleet plane's state in poolctl status: read from the box's fleet
// view (api.FleetURI), so that an operator sees a box that serves its
// hosts but is out of its fleet, and why.

import (
	"context"
	"fmt"
	"net/http"

	"cxlpool/api/client"
)

// fleetURI is the box's fleet view (api.FleetURI).
const fleetURI = "/redfish/v1/Oem/CxlPool/Fleet"

// fleetStatusOut is the plane's state on the box asked.
type fleetStatusOut struct {
	State     string `json:"state"`
	Box       string `json:"box,omitempty"`
	Servers   string `json:"servers,omitempty"`
	Embedded  bool   `json:"embedded,omitempty"`
	LastError string `json:"last_error,omitempty"`
	Attempts  int    `json:"attempts,omitempty"`
	Queued    int    `json:"queued_events,omitempty"`
	Dropped   uint64 `json:"dropped_events,omitempty"`
	Boxes     int    `json:"boxes"`
}

// boxFleet reads the fleet view; nil when the box runs no plane (404) or
// the account may not see it (403).
func boxFleet(ctx context.Context, c *client.Client) (*fleetStatusOut, error) {
	var v struct {
		Box   string
		Plane struct {
			State, Servers, LastError string
			Embedded                  bool
			Attempts, QueuedEvents    int
			DroppedEvents             uint64
		}
		Boxes []struct{ Box string }
	}
	if err := c.Get(ctx, fleetURI, &v); err != nil {
		if s := client.StatusOf(err); s == http.StatusNotFound || s == http.StatusForbidden {
			return nil, nil
		}
		return nil, err
	}
	return &fleetStatusOut{State: v.Plane.State, Box: v.Box, Servers: v.Plane.Servers, Embedded: v.Plane.Embedded,
		LastError: v.Plane.LastError, Attempts: v.Plane.Attempts, Queued: v.Plane.QueuedEvents, Dropped: v.Plane.DroppedEvents,
		Boxes: len(v.Boxes)}, nil
}

// String is the status line.
func (f *fleetStatusOut) String() string {
	where := f.Servers
	if f.Embedded {
		where += " (embedded)"
	}
	s := fmt.Sprintf("%s, box %s on %s", f.State, f.Box, where)
	if f.State == "Connected" || f.State == "Disconnected" {
		boxes := fmt.Sprintf("%d boxes", f.Boxes)
		if f.Boxes == 1 {
			boxes = "1 box"
		}
		s += ", " + boxes + " in the fleet"
	} else {
		s += fmt.Sprintf(": not joined after %s (%s); the box serves its hosts and retries", plural(f.Attempts, "attempt"), f.LastError)
	}
	if f.Queued > 0 || f.Dropped > 0 {
		s += fmt.Sprintf("; %d events queued, %d dropped", f.Queued, f.Dropped)
	}
	return s
}
