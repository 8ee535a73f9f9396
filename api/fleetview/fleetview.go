// Package fleetview serves the box's view of its fleet plane (package
// fleet) on the Redfish service: an OEM resource with what the plane
// knows of every box (records, heads and hosts, free capacity per region)
// and the plane's own state, and a Place action answering "which box can
// give host X N MiB". Nothing here changes any ledger: the answer names
// the box whose API to ask.
//
//   - GET /redfish/v1/Oem/CxlPool/Fleet (appliance roles).
//   - POST …/Actions/CxlPool.Place {Host: "Host3" | "BOX/Host3", SizeMiB}
//     answers Offers (best first) and Refusals, each naming its rule.
//
// While the plane has not joined, the resource says why (Plane.State,
// Plane.LastError) and ManagerStatus makes the Manager's Status Warning
// with a Condition: the box serves its hosts all the same.
package fleetview

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"cxlpool/api/internal/pool"
	"cxlpool/api/oemschema"
	"cxlpool/api/redfish"
	"cxlpool/fleet"
)

// URI is the fleet view.
const URI = "/redfish/v1/Oem/CxlPool/Fleet"

// PlaceURI is its placement action.
const PlaceURI = URI + "/Actions/CxlPool.Place"

// View is the daemon's fleet plane, as the API shows it.
type View interface {
	FleetStatus() Status
	// FleetBoxes lists the live boxes' records; ErrNotJoined before the
	// plane joined.
	FleetBoxes(ctx context.Context) ([]fleet.Inventory, error)
}

// ErrNotJoined is FleetBoxes before the plane has joined.
var ErrNotJoined = errors.New("the fleet plane has not joined yet")

// Status is the plane's state (appliance.FleetState).
type Status struct {
	State     string // Connected, Disconnected, Joining, Retrying, Off
	Box       string
	Servers   string
	Embedded  bool
	LastError string
	Attempts  int
	Since     time.Time
	Next      time.Time
	Queued    int
	Dropped   uint64
}

// Off is the State of a plane the box does not run (a build without the
// embedded server): nothing to warn about.
const Off = "Off"

// Connected reports whether the plane is up.
func (st Status) Connected() bool { return st.State == "Connected" }

// readTimeout bounds a read of the fleet's records.
const readTimeout = 10 * time.Second

type fleetPlaceAction struct {
	Host    *string `json:"Host" rf:"required"`
	SizeMiB *uint64 `json:"SizeMiB" rf:"required"`
}

// Server serves the fleet view on the shared Service.
type Server struct {
	*redfish.Service
	view View
	now  func() time.Time
}

// New returns the fleet view of view (nil: no plane, nothing served);
// Routes registers it.
func New(d pool.Deps, view View) *Server {
	return &Server{Service: d.Service, view: view, now: func() time.Time { return d.Clock().UTC() }}
}

// Routes registers the fleet view's routes.
func (s *Server) Routes() {
	if s.view == nil {
		return
	}
	s.Handle(http.MethodGet, URI, redfish.PrivApplianceView, s.getFleet)
	s.Handle(http.MethodPost, PlaceURI, redfish.PrivApplianceView, s.fleetPlace)
}

func (s *Server) getFleet(c echo.Context) error {
	st := s.view.FleetStatus()
	ctx, cancel := context.WithTimeout(c.Request().Context(), readTimeout)
	defer cancel()
	boxes, err := s.view.FleetBoxes(ctx)
	var readErr string
	if err != nil {
		// The view shows what it can: the plane's state says why the
		// records are missing.
		boxes, readErr = nil, err.Error()
	}
	list := make([]redfish.Obj, 0, len(boxes))
	for _, b := range boxes {
		list = append(list, fleetBox(b))
	}
	health := "OK"
	if !st.Connected() || readErr != "" {
		health = "Warning"
	}
	plane := fleetPlane(st)
	if readErr != "" {
		plane["ReadError"] = readErr
	}
	return s.WriteResource(c, http.StatusOK, redfish.Obj{
		"@odata.id":   URI,
		"@odata.type": oemschema.Type("Fleet"),
		"Id":          "Fleet",
		"Name":        "Fleet",
		"Status":      redfish.Obj{"State": "Enabled", "Health": health},
		"Box":         st.Box,
		"Plane":       plane,
		"Boxes":       list,
	})
}

func fleetPlane(st Status) redfish.Obj {
	o := redfish.Obj{"State": st.State, "Servers": st.Servers, "Embedded": st.Embedded, "Attempts": st.Attempts,
		"QueuedEvents": st.Queued, "DroppedEvents": st.Dropped, "LastError": st.LastError}
	if !st.Since.IsZero() {
		o["Since"] = st.Since.UTC().Format(redfish.TimeFormat)
	}
	if !st.Next.IsZero() {
		o["NextAttempt"] = st.Next.UTC().Format(redfish.TimeFormat)
	}
	return o
}

func fleetBox(b fleet.Inventory) redfish.Obj {
	heads := make([]redfish.Obj, 0, len(b.Heads))
	for _, h := range b.Heads {
		heads = append(heads, redfish.Obj{"LD": h.LD, "Port": h.Port, "Host": h.Host, "LinkUp": h.LinkUp,
			"GrantedMiB": h.Granted >> 20, "QuotaMiB": h.Quota >> 20})
	}
	regions := make([]redfish.Obj, 0, len(b.Regions))
	for _, r := range b.Regions {
		regions = append(regions, redfish.Obj{"Region": r.Index, "SizeMiB": r.Length >> 20, "BlockSizeMiB": r.BlockSize >> 20,
			"FreeMiB": r.Free >> 20, "ReservedMiB": r.Reserved >> 20, "GrantedMiB": r.Granted >> 20, "Sharable": r.Sharable})
	}
	return redfish.Obj{"Box": string(b.Box), "Serial": b.Serial, "Firmware": b.Firmware, "API": b.API, "Export": b.Export,
		"Health": string(b.Health), "Updated": b.Updated.UTC().Format(redfish.TimeFormat), "FreeMiB": b.Free() >> 20,
		"Heads": heads, "Regions": regions}
}

func (s *Server) fleetPlace(c echo.Context) error {
	var req fleetPlaceAction
	if err := s.Decode(c, &req); err != nil {
		return err
	}
	if *req.SizeMiB == 0 {
		return redfish.ErrPropertyValueOutOfRange("0", "SizeMiB")
	}
	if box, name := fleet.HostRef(*req.Host); name == "" || (box != "" && !box.Valid()) {
		return redfish.ErrPropertyValueFormat(*req.Host, "Host")
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), readTimeout)
	defer cancel()
	boxes, err := s.view.FleetBoxes(ctx)
	if err != nil {
		e := redfish.ErrServiceUnavailable(pool.RetryDeviceSeconds).WithCause(err)
		e.Messages[0].Resolution = "The box has not read the fleet's records (" + err.Error() +
			"); the fleet view's Plane says why. Retry once the plane is connected."
		return e
	}
	ans, err := fleet.Place(boxes, *req.Host, *req.SizeMiB<<20)
	if err != nil {
		// A BOX/HOST whose box has no such host: the request names
		// something the fleet does not have.
		e := redfish.ErrPropertyValueNotInList(*req.Host, "Host").WithCause(err)
		e.Messages[0].Resolution = err.Error() + ". Name a host of the fleet (its name on its box, or BOX/HOST)."
		return e
	}
	offers := make([]redfish.Obj, 0, len(ans.Offers))
	for _, o := range ans.Offers {
		offers = append(offers, redfish.Obj{"Box": string(o.Box), "API": o.API, "Export": o.Export, "Via": string(o.Via),
			"Host": o.Host, "LD": o.LD, "Region": o.Region, "FreeMiB": o.Free >> 20})
	}
	refusals := ans.Refusals
	if refusals == nil {
		refusals = []string{}
	}
	return c.JSON(http.StatusOK, redfish.Obj{
		"@odata.type": oemschema.Type("FleetPlacement"),
		"Host":        ans.Host, "SizeMiB": ans.Size >> 20, "Remote": ans.Remote,
		"Offers": offers, "Refusals": refusals,
	})
}

// ManagerStatus makes the Manager's Status (in o) Warning, with a
// Condition saying why, while the box is not in its fleet.
func (s *Server) ManagerStatus(o redfish.Obj) {
	if s.view == nil {
		return
	}
	st := s.view.FleetStatus()
	if st.Connected() || st.State == Off {
		return
	}
	m := s.Registries().Resolve(redfish.M("Base.CouldNotEstablishConnection", st.Servers))
	why := "The fleet plane is " + st.State
	if st.LastError != "" {
		why += ": " + st.LastError
	}
	cond := redfish.Obj{"MessageId": m.MessageID, "Message": m.Message + " " + why + ".", "MessageArgs": m.MessageArgs,
		"Severity": "Warning", "Resolution": "The box keeps serving its hosts and retries by itself (see " + URI +
			"); free the fleet server's port or fix its address, credentials or CA.",
		"Timestamp": s.now().Format(redfish.TimeFormat), "OriginOfCondition": redfish.Link(URI)}
	if !st.Since.IsZero() {
		cond["Timestamp"] = st.Since.UTC().Format(redfish.TimeFormat)
	}
	o["Status"] = redfish.Obj{"State": "Enabled", "Health": "Warning", "Conditions": []redfish.Obj{cond}}
}
