// Package redfish is a DMTF Redfish protocol core on echo, knowing nothing
// of what it serves: one could serve another device with it. Package api
// serves cxlpool's resources on it.
//
// A Service gives every resource the same protocol habits:
//   - routes with a declared privilege each, 401 before 405, Allow by the
//     caller's privileges, HEAD from GET (router.go); a Basic-authenticated
//     change from a browser must come from the service's origin with a
//     JSON body (basicrule.go);
//   - errors only from the message registries it carries (errors.go,
//     registry.go, registries/), with Config.MapError for the device's own
//     errors;
//   - strict JSON decoding (decode.go), ETags and If-Match, $select, $top,
//     $skip, $expand (respond.go) and $filter (filter.go);
//   - sessions, HTTP Basic, lockout and throttling (auth.go, sessions.go),
//     the accounts database with settings, logs and subscriptions
//     (store.go), roles and privileges with host isolation (principal.go),
//     the password policy (password.go, passwords/);
//   - the audit log of every change and the event log (audit.go), tasks for
//     long operations (tasks.go), the event bus feeding SSE and push
//     subscriptions (events.go), Prometheus metrics (metrics.go);
//   - the transport's limits: deadlines, body guards, connection caps per
//     source (limits.go).
//
// A resource registers its routes with Service.Handle (HandleUpload for a
// multipart push) between New and Start:
//
//	svc.Handle(http.MethodGet, "/redfish/v1/Things/:id", redfish.PrivLogin, getThing)
//
// Handlers read the caller with PrincipalOf (CanSeeHost for host
// isolation: 404 for other hosts' resources), decode bodies with Decode,
// answer with WriteResource/WriteCreated/WriteCollection/NoContent, check
// If-Match with IfMatch, return *Error values and Publish events; long
// operations StartTask and answer Accepted.
//
// Not here (yet): the TLS listener and its certificates (api/manager's
// tls.go and certificates.go, tied to the CertificateService), and the
// AccountService resource (api's accounts.go). The accounts database's
// migrations still create the pool's chunk_owners table.
package redfish
