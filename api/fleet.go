package api

import "cxlpool/api/fleetview"

// The fleet view is served by package api/fleetview; these are the names
// the daemon and the tests give it here.
type (
	// FleetView is fleetview.View.
	FleetView = fleetview.View
	// FleetStatus is fleetview.Status.
	FleetStatus = fleetview.Status
)

// Names of the fleet view (fleetview).
const (
	FleetURI      = fleetview.URI
	FleetPlaceURI = fleetview.PlaceURI
	FleetOff      = fleetview.Off
)

// ErrFleetNotJoined is fleetview.ErrNotJoined.
var ErrFleetNotJoined = fleetview.ErrNotJoined
