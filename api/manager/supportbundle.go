package manager

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/common/expfmt"

	"cxlpool/api/internal/pool"
	"cxlpool/api/redfish"
	"cxlpool/dcd"
	"cxlpool/fabric/cci"
)

// The support bundle: the Manager's Diagnostic LogService collects, on
// request (LogService.CollectDiagnosticData, DiagnosticDataType Manager),
// one tar.gz of what support needs to understand a box — version, non-secret
// configuration, the box's identity and heads, the capacity ledger, the
// event and audit logs, a metrics snapshot and a goroutine dump — as a
// LogEntry whose AdditionalDataURI downloads it.
//
// What goes in is built member by member from named fields, never by
// copying files or structs wholesale, so that no secret can slip in:
// password hashes, session tokens, the TLS and CSR private keys, export
// tokens and image signing keys are never read. Each member is capped
// (bundleMemberLimit; the manifest says when one was cut) and only the
// newest bundleKeep bundles are kept, so the disk use is bounded.
const (
	logDiagnostic           = "Diagnostic"
	collectDiagnosticAction = "LogService.CollectDiagnosticData"

	bundleDir         = "diagnostics"
	bundleKeep        = 4
	bundleMemberLimit = 8 << 20
	bundleFormat      = "cxlpool-support-bundle/1"
)

// bundleState serialises collections and numbers the bundles.
type bundleState struct {
	mu      sync.Mutex
	running bool
	last    int64 // the highest Id given out by this process
}

func (s *Server) bundlePath(id int64) string {
	return filepath.Join(s.cfg.DataDir, bundleDir, "bundle-"+strconv.FormatInt(id, 10)+".tar.gz")
}

// bundleInfo is one collected bundle on disk.
type bundleInfo struct {
	ID      int64
	Created time.Time
	Size    int64
}

// listBundles lists the collected bundles, oldest first.
func (s *Server) listBundles() ([]bundleInfo, error) {
	ents, err := os.ReadDir(filepath.Join(s.cfg.DataDir, bundleDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []bundleInfo
	for _, e := range ents {
		n, ok := strings.CutPrefix(e.Name(), "bundle-")
		if !ok {
			continue
		}
		n, ok = strings.CutSuffix(n, ".tar.gz")
		id, err := strconv.ParseInt(n, 10, 64)
		if !ok || err != nil || id <= 0 {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		out = append(out, bundleInfo{ID: id, Created: fi.ModTime().UTC(), Size: fi.Size()})
	}
	slices.SortFunc(out, func(a, b bundleInfo) int { return int(a.ID - b.ID) })
	return out, nil
}

func (s *Server) findBundle(id int64) (bundleInfo, bool) {
	bs, err := s.listBundles()
	if err != nil {
		return bundleInfo{}, false
	}
	i := slices.IndexFunc(bs, func(b bundleInfo) bool { return b.ID == id })
	if i < 0 {
		return bundleInfo{}, false
	}
	return bs[i], true
}

func (s *Server) diagnosticService() redfish.Obj {
	uri := logServiceURI(logDiagnostic)
	return redfish.Obj{
		"@odata.id":             uri,
		"@odata.type":           "#LogService.v1_9_0.LogService",
		"Id":                    logDiagnostic,
		"Name":                  "Diagnostic data",
		"Description":           "Support bundles: version, configuration, box, capacity ledger, logs, metrics and goroutines, without secrets",
		"ServiceEnabled":        true,
		"MaxNumberOfRecords":    bundleKeep,
		"OverWritePolicy":       "WrapsWhenFull",
		"LogEntryType":          "OEM",
		"LogPurposes":           []string{"Diagnostic"},
		"Entries":               redfish.Link(uri + "/Entries"),
		"Status":                redfish.Obj{"State": "Enabled", "Health": "OK"},
		"DiagnosticDataDetails": []redfish.Obj{{"DiagnosticDataType": "Manager"}},
		"Actions": redfish.Obj{
			"#" + collectDiagnosticAction: redfish.Obj{
				"target": uri + "/Actions/" + collectDiagnosticAction,
				"DiagnosticDataType@Redfish.AllowableValues": []string{"Manager"},
			},
			"#LogService.ClearLog": redfish.Obj{"target": uri + "/Actions/LogService.ClearLog"},
		},
	}
}

func (s *Server) diagnosticEntry(b bundleInfo) redfish.Obj {
	uri := logEntryURI(logDiagnostic, b.ID)
	return redfish.Obj{
		"@odata.id":               uri,
		"@odata.type":             "#LogEntry.v1_21_0.LogEntry",
		"Id":                      strconv.FormatInt(b.ID, 10),
		"Name":                    "Support bundle " + strconv.FormatInt(b.ID, 10),
		"Created":                 b.Created.Format(redfish.TimeFormat),
		"EntryType":               "Oem",
		"OemRecordFormat":         "CxlPoolSupportBundle",
		"Severity":                "OK",
		"Message":                 "Support bundle (tar.gz, " + strconv.FormatInt(b.Size, 10) + " bytes)",
		"DiagnosticDataType":      "Manager",
		"AdditionalDataURI":       uri + "/attachment",
		"AdditionalDataSizeBytes": b.Size,
	}
}

// collectRequest is CollectDiagnosticData's body. Sending the data
// elsewhere (TargetURI and its credentials) is not supported: the bundle
// is downloaded from the box.
type collectRequest struct {
	DiagnosticDataType    *string `json:"DiagnosticDataType"`
	OEMDiagnosticDataType *string `json:"OEMDiagnosticDataType"`
	TargetURI             *string `json:"TargetURI"`
	UserName              *string `json:"UserName"`
	Password              *string `json:"Password"`
	TransferProtocol      *string `json:"TransferProtocol"`
	TargetDevice          any     `json:"TargetDevice"`
}

func (s *Server) supportBundleRoutes() {
	uri := logServiceURI(logDiagnostic)
	s.Handle(http.MethodGet, uri, redfish.PrivApplianceView, func(c echo.Context) error {
		return s.WriteResource(c, http.StatusOK, s.diagnosticService())
	})
	s.Handle(http.MethodGet, uri+"/Entries", redfish.PrivApplianceView, func(c echo.Context) error {
		bs, err := s.listBundles()
		if err != nil {
			return redfish.ErrInternal(err)
		}
		byURI := map[string]bundleInfo{}
		uris := make([]string, len(bs))
		for i, b := range bs {
			uris[i] = logEntryURI(logDiagnostic, b.ID)
			byURI[uris[i]] = b
		}
		return s.WriteCollection(c, redfish.Collection{
			ODataID: uri + "/Entries", ODataType: "#LogEntryCollection.LogEntryCollection",
			Name: "Diagnostic Entries", Members: uris,
			Expand:     func(u string) (any, error) { return s.diagnosticEntry(byURI[u]), nil },
			AutoExpand: true,
		})
	})
	s.Handle(http.MethodGet, uri+"/Entries/:id", redfish.PrivApplianceView, func(c echo.Context) error {
		b, err := s.lookupBundle(c)
		if err != nil {
			return err
		}
		return s.WriteResource(c, http.StatusOK, s.diagnosticEntry(b))
	})
	// The bundle itself: only administrators, who may collect it.
	s.Handle(http.MethodGet, uri+"/Entries/:id/attachment", redfish.PrivConfigureManager, func(c echo.Context) error {
		b, err := s.lookupBundle(c)
		if err != nil {
			return err
		}
		f, err := os.Open(s.bundlePath(b.ID))
		if errors.Is(err, fs.ErrNotExist) {
			return redfish.ErrResourceNotFound("LogEntry", c.Param("id"))
		}
		if err != nil {
			return redfish.ErrInternal(err)
		}
		defer f.Close()
		name := fmt.Sprintf("cxlpool-support-%s-%d-%s.tar.gz", s.bundleBoxName(), b.ID, b.Created.Format("20060102T150405Z"))
		h := c.Response().Header()
		h.Set("Content-Type", "application/gzip")
		h.Set("Content-Disposition", `attachment; filename="`+name+`"`)
		http.ServeContent(c.Response(), c.Request(), name, b.Created, f)
		return nil
	})
	s.Handle(http.MethodPost, uri+"/Actions/"+collectDiagnosticAction, redfish.PrivConfigureManager, s.collectDiagnosticData)
	s.Handle(http.MethodPost, uri+"/Actions/LogService.ClearLog", redfish.PrivConfigureManager, func(c echo.Context) error {
		var body struct{}
		if c.Request().ContentLength != 0 {
			if err := s.Decode(c, &body); err != nil {
				return err
			}
		}
		s.bundles.mu.Lock()
		defer s.bundles.mu.Unlock()
		if s.bundles.running {
			return redfish.ErrResourceInUse()
		}
		bs, err := s.listBundles()
		if err != nil {
			return redfish.ErrInternal(err)
		}
		for _, b := range bs {
			if err := os.Remove(s.bundlePath(b.ID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return redfish.ErrInternal(err)
			}
		}
		return s.NoContent(c)
	})
}

func (s *Server) lookupBundle(c echo.Context) (bundleInfo, error) {
	id, err := strconv.ParseInt(c.Param("id"), 10, 64)
	if err != nil {
		return bundleInfo{}, redfish.ErrResourceNotFound("LogEntry", c.Param("id"))
	}
	b, ok := s.findBundle(id)
	if !ok {
		return bundleInfo{}, redfish.ErrResourceNotFound("LogEntry", c.Param("id"))
	}
	return b, nil
}

// bundleBoxName names the box in a bundle's file name: its serial number,
// or the service UUID without a device.
func (s *Server) bundleBoxName() string {
	if s.mgr != nil {
		return pool.SerialString(s.mgr.Box().Identity.Serial)
	}
	return s.UUID()
}

func (s *Server) collectDiagnosticData(c echo.Context) error {
	var req collectRequest
	if err := s.Decode(c, &req); err != nil {
		return err
	}
	const act = collectDiagnosticAction
	if req.DiagnosticDataType == nil {
		return actionErr("Base.ActionParameterMissing", act, "DiagnosticDataType")
	}
	if *req.DiagnosticDataType != "Manager" {
		return actionErr("Base.ActionParameterValueNotInList", *req.DiagnosticDataType, "DiagnosticDataType", act)
	}
	for _, p := range []struct {
		name    string
		present bool
	}{
		{"OEMDiagnosticDataType", req.OEMDiagnosticDataType != nil},
		{"TargetURI", req.TargetURI != nil},
		{"UserName", req.UserName != nil},
		{"Password", req.Password != nil},
		{"TransferProtocol", req.TransferProtocol != nil},
		{"TargetDevice", req.TargetDevice != nil},
	} {
		if p.present {
			return actionErr("Base.ActionParameterNotSupported", p.name, act)
		}
	}
	s.bundles.mu.Lock()
	if s.bundles.running {
		s.bundles.mu.Unlock()
		return redfish.ErrResourceInUse()
	}
	s.bundles.running = true
	s.bundles.mu.Unlock()
	user := ""
	if p := redfish.PrincipalOf(c); p != nil {
		user = p.User
	}
	target := redfish.Target{Type: "LogService", ID: logDiagnostic, URI: logServiceURI(logDiagnostic)}
	t := s.StartTask(c, redfish.TaskOptions{Name: "Collect support bundle", Target: target},
		func(ctx context.Context, t *redfish.Task) (redfish.TaskResult, error) {
			defer func() {
				s.bundles.mu.Lock()
				s.bundles.running = false
				s.bundles.mu.Unlock()
			}()
			b, err := s.collectBundle(ctx, t, user)
			if err != nil {
				return redfish.TaskResult{}, redfish.ErrInternal(fmt.Errorf("api: support bundle: %w", err))
			}
			s.log.Info("support bundle collected", "id", b.ID, "bytes", b.Size, "user", user)
			return redfish.TaskResult{Status: http.StatusCreated, Location: logEntryURI(logDiagnostic, b.ID),
				Body: s.diagnosticEntry(b), Messages: []redfish.Msg{redfish.M("Base.Created")}}, nil
		})
	return s.Accepted(c, t)
}

// cappedBuffer keeps the first limit bytes written to it and notes that
// more came; writes never fail, so a producer always finishes.
type cappedBuffer struct {
	buf       bytes.Buffer
	limit     int
	truncated bool
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	room := b.limit - b.buf.Len()
	if len(p) > room {
		b.buf.Write(p[:max(room, 0)])
		b.truncated = true
		return len(p), nil
	}
	return b.buf.Write(p)
}

// bundleMember is one file of the bundle as the manifest lists it.
type bundleMember struct {
	Name      string `json:"Name"`
	Bytes     int    `json:"Bytes"`
	SHA256    string `json:"SHA256"`
	Truncated bool   `json:"Truncated,omitempty"`
	Error     string `json:"Error,omitempty"`
}

// collectBundle writes a new bundle (temporary file, synced, renamed) and
// drops the oldest beyond bundleKeep.
func (s *Server) collectBundle(ctx context.Context, t *redfish.Task, user string) (bundleInfo, error) {
	dir := filepath.Join(s.cfg.DataDir, bundleDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return bundleInfo{}, err
	}
	// A collection a crash interrupted left its temporary file; only one
	// collection runs at a time, so any there now is such a leftover.
	if tmps, err := filepath.Glob(filepath.Join(dir, ".bundle-*")); err == nil {
		for _, tmp := range tmps {
			if err := os.Remove(tmp); err != nil {
				s.log.Warn("removing an unfinished support bundle", "path", tmp, "err", err)
			}
		}
	}
	existing, err := s.listBundles()
	if err != nil {
		return bundleInfo{}, err
	}
	s.bundles.mu.Lock()
	id := s.bundles.last + 1
	for _, b := range existing {
		id = max(id, b.ID+1)
	}
	s.bundles.last = id
	s.bundles.mu.Unlock()

	now := s.now()
	producers := s.bundleProducers(ctx, user, now)
	path := s.bundlePath(id)
	err = writeFileAtomicFunc(path, 0o600, func(w io.Writer) error {
		gz := gzip.NewWriter(w)
		tw := tar.NewWriter(gz)
		var manifest []bundleMember
		add := func(name string, data []byte) error {
			return tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: now,
				Typeflag: tar.TypeReg, Format: tar.FormatPAX})
		}
		for i, p := range producers {
			if err := ctx.Err(); err != nil {
				return err
			}
			buf := &cappedBuffer{limit: bundleMemberLimit}
			m := bundleMember{Name: p.name}
			if err := p.write(buf); err != nil {
				m.Error = err.Error()
				fmt.Fprintf(buf, "\n(collection failed: %v)\n", err)
			}
			data := buf.buf.Bytes()
			sum := sha256.Sum256(data)
			m.Bytes, m.SHA256, m.Truncated = len(data), hex.EncodeToString(sum[:]), buf.truncated
			manifest = append(manifest, m)
			if err := add(p.name, data); err != nil {
				return err
			}
			if _, err := tw.Write(data); err != nil {
				return err
			}
			t.SetPercent(90 * (i + 1) / (len(producers) + 1))
		}
		mb, err := json.MarshalIndent(redfish.Obj{
			"Format": bundleFormat, "Id": id, "Created": now.Format(redfish.TimeFormat), "CollectedBy": user,
			"FirmwareVersion": s.cfg.FirmwareVersion, "ServiceUUID": s.UUID(), "Box": s.bundleBoxName(),
			"Files": manifest,
			"NeverIncluded": []string{"password hashes", "session tokens", "TLS and CSR private keys",
				"export tokens", "image signing keys", "event subscription destinations"},
			"MemberLimitBytes": bundleMemberLimit,
		}, "", "  ")
		if err != nil {
			return err
		}
		if err := add("manifest.json", mb); err != nil {
			return err
		}
		if _, err := tw.Write(mb); err != nil {
			return err
		}
		if err := tw.Close(); err != nil {
			return err
		}
		return gz.Close()
	})
	if err != nil {
		return bundleInfo{}, err
	}
	if err := os.Chtimes(path, now, now); err != nil {
		return bundleInfo{}, err
	}
	for len(existing) >= bundleKeep {
		if err := os.Remove(s.bundlePath(existing[0].ID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("removing an old support bundle", "err", err)
		}
		existing = existing[1:]
	}
	b, ok := s.findBundle(id)
	if !ok {
		return bundleInfo{}, fmt.Errorf("bundle %d vanished", id)
	}
	return b, nil
}

type bundleProducer struct {
	name  string
	write func(io.Writer) error
}

// jsonMember writes v as indented JSON.
func jsonMember(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

func (s *Server) bundleProducers(ctx context.Context, user string, now time.Time) []bundleProducer {
	return []bundleProducer{
		{"version.json", func(w io.Writer) error { return jsonMember(w, s.bundleVersion(now, user)) }},
		{"config.json", func(w io.Writer) error {
			v, err := s.bundleConfig(ctx)
			if err != nil {
				return err
			}
			return jsonMember(w, v)
		}},
		{"box.json", func(w io.Writer) error { return jsonMember(w, s.bundleBox()) }},
		{"ledger.json", func(w io.Writer) error {
			v, err := s.bundleLedger(ctx)
			if err != nil {
				return err
			}
			return jsonMember(w, v)
		}},
		{"eventlog.json", func(w io.Writer) error { return s.bundleLog(ctx, w, redfish.LogEvent) }},
		{"auditlog.json", func(w io.Writer) error { return s.bundleLog(ctx, w, redfish.LogAudit) }},
		{"tasks.json", func(w io.Writer) error { return jsonMember(w, s.bundleTasks()) }},
		{"metrics.txt", s.bundleMetrics},
		{"goroutines.txt", func(w io.Writer) error { return pprof.Lookup("goroutine").WriteTo(w, 2) }},
	}
}

func (s *Server) bundleVersion(now time.Time, user string) redfish.Obj {
	o := redfish.Obj{
		"FirmwareVersion": s.cfg.FirmwareVersion,
		"GoVersion":       runtime.Version(),
		"OS":              runtime.GOOS,
		"Arch":            runtime.GOARCH,
		"CPUs":            runtime.NumCPU(),
		"Goroutines":      runtime.NumGoroutine(),
		"Collected":       now.Format(redfish.TimeFormat),
		"CollectedBy":     user,
		"RedfishVersion":  pool.RedfishVersion,
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		settings := map[string]string{}
		for _, st := range bi.Settings {
			settings[st.Key] = st.Value
		}
		deps := make([]string, 0, len(bi.Deps))
		for _, d := range bi.Deps {
			deps = append(deps, d.Path+" "+d.Version)
		}
		o["Build"] = redfish.Obj{"Main": bi.Main.Path + " " + bi.Main.Version, "Settings": settings, "Modules": deps}
	}
	return o
}

// bundleConfig is the configuration without secrets: policies, limits,
// which features this build serves, the accounts without their password
// hashes, the public certificate's summary and the data directory's file
// names (never their contents).
func (s *Server) bundleConfig(ctx context.Context) (redfish.Obj, error) {
	settings := redfish.Obj{}
	for _, k := range []string{redfish.SettingSessionTimeout, redfish.SettingLockoutThreshold, redfish.SettingLockoutDuration} {
		v, err := s.Store().Setting(ctx, k, "")
		if err != nil {
			return nil, err
		}
		settings[k] = v
	}
	accounts := []redfish.Obj{}
	for _, a := range s.Store().Accounts() {
		o := redfish.Obj{"Id": a.ID, "UserName": a.UserName, "Role": a.Role, "Enabled": a.Enabled,
			"PasswordChangeRequired": a.PasswordChangeRequired, "Created": a.Created, "Updated": a.Updated}
		if a.HostID != nil {
			o["System"] = pool.SystemID(dcd.HostID(*a.HostID))
		}
		accounts = append(accounts, o)
	}
	subs, err := s.Store().Subscriptions(ctx)
	if err != nil {
		return nil, err
	}
	cfg := s.cfg
	o := redfish.Obj{
		"DataDir": cfg.DataDir, "FirmwareVersion": cfg.FirmwareVersion, "ServiceUUID": s.UUID(),
		"Settings":           settings,
		"Accounts":           accounts,
		"Sessions":           s.Auth().SessionCount(),
		"EventSubscriptions": len(subs),
		"TLSCertificate":     s.bundleCertSummary(),
		"DataDirFiles":       s.bundleDataFiles(),
	}
	for k, v := range cfg.BundleSettings {
		o[k] = v
	}
	return o, nil
}

// bundleCertSummary describes the public certificate in cert.pem.
func (s *Server) bundleCertSummary() redfish.Obj {
	b, err := os.ReadFile(s.tlsPath(certFile))
	if err != nil {
		return redfish.Obj{"Error": err.Error()}
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return redfish.Obj{"Error": "cert.pem holds no PEM block"}
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return redfish.Obj{"Error": err.Error()}
	}
	sum := sha256.Sum256(c.Raw)
	return redfish.Obj{"Subject": c.Subject.String(), "Issuer": c.Issuer.String(), "NotBefore": c.NotBefore, "NotAfter": c.NotAfter,
		"SHA256": strings.ToUpper(colonHex(sum[:])), "DNSNames": c.DNSNames}
}

// bundleDataFiles lists the data directory: names, sizes, modes, times.
func (s *Server) bundleDataFiles() []redfish.Obj {
	out := []redfish.Obj{}
	root := s.cfg.DataDir
	_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() && strings.Count(rel, string(filepath.Separator)) >= 2 {
			return fs.SkipDir
		}
		fi, err := d.Info()
		if err != nil || rel == "." {
			return nil
		}
		out = append(out, redfish.Obj{"Path": rel, "Bytes": fi.Size(), "Mode": fi.Mode().String(), "Modified": fi.ModTime().UTC()})
		if len(out) >= 1000 {
			return fs.SkipAll
		}
		return nil
	})
	return out
}

// bundleBox is the box as discovery saw it: identity, heads (link state
// per host), regions, and which hosts are fenced.
func (s *Server) bundleBox() redfish.Obj {
	if s.mgr == nil {
		return redfish.Obj{"Error": "no capacity manager in this service"}
	}
	box := s.mgr.Box()
	fenced := redfish.Obj{}
	for _, h := range box.Heads {
		if why, ok := s.mgr.Fenced(dcd.HostID(h.LD)); ok {
			fenced[pool.SystemID(dcd.HostID(h.LD))] = why
		}
	}
	return redfish.Obj{"Identity": box.Identity, "Serial": pool.SerialString(box.Identity.Serial), "Heads": box.Heads,
		"Regions": box.Regions, "TotalDynamic": box.TotalDynamic, "AddPolicies": box.AddPolicies,
		"ReleasePolicies": box.ReleasePolicies, "ExtentsPerHost": box.ExtentsPerHost, "TagsPerHost": box.TagsPerHost,
		"DiscoveredAt": box.DiscoveredAt, "Fenced": fenced, "StartReconcile": s.mgr.StartReport()}
}

// bundleLedger is the capacity ledger: hosts (quotas), regions, chunks,
// every grant with its extents, and orphans.
func (s *Server) bundleLedger(ctx context.Context) (redfish.Obj, error) {
	if s.mgr == nil {
		return redfish.Obj{"Error": "no capacity manager in this service"}, nil
	}
	l := s.mgr.Ledger()
	hosts, err := l.Hosts(ctx)
	if err != nil {
		return nil, err
	}
	regions, err := l.Regions(ctx)
	if err != nil {
		return nil, err
	}
	chunks, err := l.Chunks(ctx)
	if err != nil {
		return nil, err
	}
	grants, err := l.Grants(ctx, dcd.GrantFilter{})
	if err != nil {
		return nil, err
	}
	orphans, err := l.Orphans(ctx)
	if err != nil {
		return nil, err
	}
	type extent struct {
		DPA, Length uint64
		Tag         string
		SharedSeq   uint16
	}
	exts := func(in []cci.Extent) []extent {
		out := make([]extent, 0, len(in))
		for _, e := range in {
			out = append(out, extent{DPA: e.DPA, Length: e.Length, Tag: e.Tag.String(), SharedSeq: e.SharedSeq})
		}
		return out
	}
	hostsOut := make([]redfish.Obj, 0, len(hosts))
	for _, h := range hosts {
		hostsOut = append(hostsOut, redfish.Obj{"Id": pool.SystemID(h.ID), "Port": h.Port, "Name": h.Name,
			"QuotaBytes": h.Quota, "LinkUp": h.LinkUp})
	}
	chunksOut := make([]redfish.Obj, 0, len(chunks))
	for _, c := range chunks {
		chunksOut = append(chunksOut, redfish.Obj{"Id": c.ID, "Name": c.Name, "Region": c.Region, "Bytes": c.Size,
			"Tag": c.Tag.String(), "Sharable": c.Sharable, "Created": c.Created})
	}
	grantsOut := make([]redfish.Obj, 0, len(grants))
	for _, g := range grants {
		grantsOut = append(grantsOut, redfish.Obj{"Id": g.ID, "Chunk": g.Chunk, "Host": pool.SystemID(g.Host), "State": g.State,
			"Extents": exts(g.Extents), "Bytes": g.Size(), "Reason": g.Reason, "Created": g.Created, "Updated": g.Updated})
	}
	orphansOut := make([]redfish.Obj, 0, len(orphans))
	for _, o := range orphans {
		orphansOut = append(orphansOut, redfish.Obj{"Host": pool.SystemID(o.Host), "Tag": o.Tag.String(), "Extents": exts(o.Extents), "Found": o.Found})
	}
	return redfish.Obj{"Hosts": hostsOut, "Regions": regions, "Chunks": chunksOut, "Grants": grantsOut, "Orphans": orphansOut,
		"Quotas": quotas(hosts)}, nil
}

// quotas maps each host with a quota to it (bytes).
func quotas(hosts []dcd.Host) redfish.Obj {
	o := redfish.Obj{}
	for _, h := range hosts {
		if h.Quota > 0 {
			o[pool.SystemID(h.ID)] = h.Quota
		}
	}
	return o
}

func (s *Server) bundleLog(ctx context.Context, w io.Writer, log string) error {
	entries, err := s.Store().LogEntries(ctx, log, nil)
	if err != nil {
		return err
	}
	out := make([]redfish.Obj, 0, len(entries))
	for _, e := range entries {
		o := redfish.Obj{"Id": e.ID, "Created": e.Created.Format(redfish.TimeFormat), "Severity": e.Severity, "Message": e.Message}
		if log == redfish.LogAudit {
			o["User"], o["Method"], o["URI"], o["Status"], o["Client"] = e.UserName, e.Method, e.URI, e.Status, e.Client
		} else {
			o["MessageId"], o["MessageArgs"], o["Origin"] = e.MessageID, redfish.NonNil(e.Args), e.Origin
		}
		if e.HostID != nil {
			o["System"] = pool.SystemID(dcd.HostID(*e.HostID))
		}
		out = append(out, o)
	}
	return jsonMember(w, out)
}

func (s *Server) bundleTasks() []redfish.Obj {
	bodies := s.TaskBodies()
	out := make([]redfish.Obj, 0, len(bodies))
	for _, b := range bodies {
		out = append(out, redfish.Obj{"Id": b["Id"], "Name": b["Name"], "TaskState": b["TaskState"], "StartTime": b["StartTime"],
			"EndTime": b["EndTime"], "Messages": b["Messages"]})
	}
	return out
}

// bundleMetrics is /metrics at the moment of collection.
func (s *Server) bundleMetrics(w io.Writer) error {
	mfs, err := s.Gatherer().Gather()
	for _, mf := range mfs {
		if _, werr := expfmt.MetricFamilyToText(w, mf); werr != nil {
			return werr
		}
	}
	return err
}
