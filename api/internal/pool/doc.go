// Package pool holds what the pool's resource packages (api/capacity,
// api/board, api/manager, api/telemetry, api/kvstore, api/accounts)
// share and what is not CXL-free, so it cannot live in api/redfish: the
// URIs of the model's resources, so that an event's OriginOfCondition is
// the resource a client can GET (uris.go); the one mapping of the
// domain's errors to Redfish errors, FromDomain (domainerrors.go); the
// small helpers every resource uses to read Ids and write Status and
// sizes (helpers.go); and Deps, what every resource package's constructor
// takes (deps.go).
//
// It is internal: package api re-exports the URIs and FromDomain that
// clients of the service name.
package pool
