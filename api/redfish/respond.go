package redfish

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"
)

// timeFormat is Redfish's Edm.DateTimeOffset.
const TimeFormat = "2006-01-02T15:04:05Z07:00"

// Obj is a JSON object under construction (a resource body). encoding/json
// writes its keys sorted, so bodies and ETags are deterministic.
type Obj = map[string]any

// Link is a navigation property value.
func Link(uri string) Obj { return Obj{"@odata.id": uri} }

// Links is a list of navigation property values (never null).
func Links(uris ...string) []Obj {
	out := make([]Obj, 0, len(uris))
	for _, u := range uris {
		out = append(out, Link(u))
	}
	return out
}

// encodeJSON marshals a body the one way the service does, so that the
// ETag of a GET and the one checked for If-Match agree.
func EncodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// ETag is the weak entity tag of a representation.
func ETag(body []byte) string {
	sum := sha256.Sum256(body)
	return `W/"` + hex.EncodeToString(sum[:12]) + `"`
}

func (s *Service) WriteJSON(c echo.Context, status int, body []byte) error {
	return c.Blob(status, "application/json; charset=utf-8", body)
}

// WriteResource answers with one resource: ETag of the full
// representation, If-None-Match (304), then $select. status is 200 for
// GET and PATCH, 201 for a create (see WriteCreated).
func (s *Service) WriteResource(c echo.Context, status int, res any) error {
	body, err := EncodeJSON(res)
	if err != nil {
		return ErrInternal(err)
	}
	etag := ETag(body)
	h := c.Response().Header()
	h.Set("ETag", etag)
	if o, ok := res.(Obj); ok {
		setDescribedBy(c, o["@odata.type"])
	}
	if c.Request().Method != http.MethodGet && c.Request().Method != http.MethodHead {
		return s.WriteJSON(c, status, body)
	}
	q, qerr := parseQuery(c)
	if qerr != nil {
		return qerr
	}
	if q.paged() || q.filter != nil {
		return ErrQueryNotSupportedOnResource()
	}
	if EtagMatches(c.Request().Header.Get("If-None-Match"), etag) {
		return c.NoContent(http.StatusNotModified)
	}
	if len(q.sel) > 0 {
		if body, err = selectProps(body, q.sel, nil); err != nil {
			return ErrInternal(err)
		}
	}
	return s.WriteJSON(c, status, body)
}

// dmtfSchemaBase is where DMTF publishes its JSON schemas; their $id is
// this URI and the file name.
const dmtfSchemaBase = "http://redfish.dmtf.org/schemas/v1/"

// setDescribedBy adds Link: <schema>; rel=describedby (DSP0266 "Link
// header"): the JSON schema of the resource's @odata.type, versioned as
// the type is ("#Chassis.v1_28_0.Chassis" → Chassis.v1_28_0.json,
// "#ChassisCollection.ChassisCollection" → ChassisCollection.json).
func setDescribedBy(c echo.Context, odataType any) {
	t, _ := odataType.(string)
	parts := strings.Split(strings.TrimPrefix(t, "#"), ".")
	var file string
	switch len(parts) {
	case 2:
		file = parts[0] + ".json"
	case 3:
		file = parts[0] + "." + parts[1] + ".json"
	default:
		return
	}
	h := c.Response().Header()
	if h.Get("Link") != "" {
		return // a finished task monitor's Link names its Task
	}
	h.Set("Link", "<"+dmtfSchemaBase+file+">; rel=describedby")
}

// WriteCreated answers a create with 201, Location and the new resource.
func (s *Service) WriteCreated(c echo.Context, uri string, res any) error {
	c.Response().Header().Set("Location", uri)
	return s.WriteResource(c, http.StatusCreated, res)
}

// NoContent answers a successful DELETE or action without a body.
func (s *Service) NoContent(c echo.Context) error { return c.NoContent(http.StatusNoContent) }

// Collection is a resource collection to write.
type Collection struct {
	ODataID   string // "/redfish/v1/AccountService/Accounts"
	ODataType string // "#ManagerAccountCollection.ManagerAccountCollection"
	Name      string
	// Members are the member URIs the caller may see, in order.
	Members []string
	// Expand returns the member at uri for $expand. Set it only where
	// expansion is cheap (in memory, or one query); nil ignores $expand.
	Expand func(uri string) (any, error)
	// AutoExpand lists the members inline without $expand, as the
	// schema's OData.AutoExpand on Members requires (LogEntryCollection).
	AutoExpand bool
	// Rendered, if set, is RenderCollection of this same collection: the
	// representation without query options, encoded once by a handler
	// that serves the collection unchanged to many requests.
	Rendered *Rendered
}

// Rendered is a collection's representation without query options,
// encoded once with its ETag.
type Rendered struct {
	body []byte
	etag string
}

// RenderCollection encodes col as WriteCollection answers a request
// without query options, for Collection.Rendered.
func RenderCollection(col Collection) (*Rendered, error) {
	members := make([]any, len(col.Members))
	for i, u := range col.Members {
		members[i] = Link(u)
	}
	b, err := EncodeJSON(collectionBody(col, members, ""))
	if err != nil {
		return nil, err
	}
	return &Rendered{body: b, etag: ETag(b)}, nil
}

func collectionBody(col Collection, members []any, nextLink string) Obj {
	body := Obj{
		"@odata.id":           col.ODataID,
		"@odata.type":         col.ODataType,
		"Name":                col.Name,
		"Members":             members,
		"Members@odata.count": len(col.Members),
	}
	if nextLink != "" {
		body["Members@odata.nextLink"] = nextLink
	}
	return body
}

// WriteCollection answers with a collection: $top/$skip paging with
// Members@odata.nextLink, $expand (one level, for collections that declare
// Expand), $filter (for the same collections: filter.go) and $select.
func (s *Service) WriteCollection(c echo.Context, col Collection) error {
	q, qerr := parseQuery(c)
	if qerr != nil {
		return qerr
	}
	setDescribedBy(c, col.ODataType)
	if col.AutoExpand && col.Expand != nil {
		q.expand = true
	}
	if r := col.Rendered; r != nil && !q.paged() && !q.expand && len(q.sel) == 0 && q.filter == nil {
		c.Response().Header().Set("ETag", r.etag)
		if EtagMatches(c.Request().Header.Get("If-None-Match"), r.etag) {
			return c.NoContent(http.StatusNotModified)
		}
		return s.WriteJSON(c, http.StatusOK, r.body)
	}
	all := col.Members
	var expanded map[string]any // members already expanded by the filter
	if q.filter != nil {
		if col.Expand == nil {
			return ErrQueryNotSupportedOnResource()
		}
		all, expanded = nil, map[string]any{}
		for _, u := range col.Members {
			m, err := col.Expand(u)
			if err != nil {
				return err
			}
			ok, err := q.filter.match(m)
			if err != nil {
				return ErrInternal(err)
			}
			if ok {
				all = append(all, u)
				expanded[u] = m
			}
		}
	}
	total := len(all)
	page := all
	skip := min(q.skip, total)
	page = page[skip:]
	if q.hasTop && q.top < len(page) {
		page = page[:q.top]
	}
	members := make([]any, 0, len(page))
	for _, u := range page {
		if q.expand && col.Expand != nil {
			m, ok := expanded[u]
			var err error
			if !ok {
				if m, err = col.Expand(u); err != nil {
					return err
				}
			}
			if len(q.sel) > 0 {
				if m, err = selectValue(m, q.sel); err != nil {
					return ErrInternal(err)
				}
			}
			members = append(members, m)
			continue
		}
		members = append(members, Link(u))
	}
	nextLink := ""
	if next := skip + len(page); q.hasTop && next < total {
		nextLink = col.ODataID + "?$skip=" + strconv.Itoa(next) + "&$top=" + strconv.Itoa(q.top)
		if q.filter != nil {
			nextLink += "&$filter=" + url.QueryEscape(q.filter.raw)
		}
	}
	if q.filter != nil {
		col.Members = all // Members@odata.count counts what matched
	}
	b, err := EncodeJSON(collectionBody(col, members, nextLink))
	if err != nil {
		return ErrInternal(err)
	}
	etag := ETag(b)
	c.Response().Header().Set("ETag", etag)
	if EtagMatches(c.Request().Header.Get("If-None-Match"), etag) {
		return c.NoContent(http.StatusNotModified)
	}
	if len(q.sel) > 0 && !q.expand {
		if b, err = selectProps(b, q.sel, []string{"Members", "Members@odata.count", "Members@odata.nextLink"}); err != nil {
			return ErrInternal(err)
		}
	}
	return s.WriteJSON(c, http.StatusOK, b)
}

// IfMatch checks the request's If-Match against current, the resource as
// its GET would show it. No header passes; "*" passes for an existing
// resource; otherwise one of the listed tags must match (weakly).
func (s *Service) IfMatch(c echo.Context, current any) error {
	hdr := c.Request().Header.Get("If-Match")
	if hdr == "" {
		return nil
	}
	body, err := EncodeJSON(current)
	if err != nil {
		return ErrInternal(err)
	}
	if !EtagMatches(hdr, ETag(body)) {
		return ErrPreconditionFailed()
	}
	return nil
}

// etagMatches reports whether the If-Match/If-None-Match list hdr names
// etag, comparing weakly (W/ ignored).
func EtagMatches(hdr, etag string) bool {
	if hdr == "" {
		return false
	}
	want := strings.TrimPrefix(etag, "W/")
	for _, t := range strings.Split(hdr, ",") {
		t = strings.TrimSpace(t)
		if t == "*" || strings.TrimPrefix(t, "W/") == want {
			return true
		}
	}
	return false
}

// query is the parsed Redfish query of a GET.
type query struct {
	sel       [][]string // $select paths, split at "/"
	top, skip int
	hasTop    bool
	hasSkip   bool
	expand    bool
	filter    *filter // nil: no $filter
}

func (q query) paged() bool { return q.hasTop || q.hasSkip }

var selectPath = regexp.MustCompile(`^[A-Za-z0-9_@.#]+(/[A-Za-z0-9_@.#]+)*$`)
var expandValue = regexp.MustCompile(`^([*.~])(\(\$levels=([0-9]{1,3})\))?$`)

// parseQuery reads the OData query options the service supports. Unknown
// options that start with "$" are refused (501, as DSP0266 requires);
// others are ignored.
func parseQuery(c echo.Context) (query, *Error) {
	var q query
	for k, vs := range c.QueryParams() {
		v := vs[len(vs)-1]
		switch k {
		case "$select":
			for _, p := range strings.Split(v, ",") {
				p = strings.TrimSpace(p)
				if !selectPath.MatchString(p) {
					return q, ErrQueryValue(v, k)
				}
				q.sel = append(q.sel, strings.Split(p, "/"))
			}
		case "$top", "$skip":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return q, ErrQueryValue(v, k)
			}
			if k == "$top" {
				q.top, q.hasTop = n, true
			} else {
				q.skip, q.hasSkip = n, true
			}
		case "$expand":
			m := expandValue.FindStringSubmatch(v)
			if m == nil {
				return q, ErrQueryValue(v, k)
			}
			// One level is all the service expands ($levels above
			// 1 is served as 1, as MaxLevels advertises).
			q.expand = true
			if m[3] != "" {
				if n, _ := strconv.Atoi(m[3]); n < 1 {
					return q, ErrQueryValue(v, k)
				}
			}
		case "$filter":
			f, err := parseFilter(v)
			if err != nil {
				return q, ErrQueryValue(v, k)
			}
			q.filter = f
		default:
			if strings.HasPrefix(k, "$") {
				return q, ErrQueryUnsupported(k)
			}
		}
	}
	return q, nil
}

// selectProps keeps the selected properties of a JSON object plus the
// OData annotations (and keep), as $select requires.
func selectProps(body []byte, sel [][]string, keep []string) ([]byte, error) {
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return nil, err
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return body, nil
	}
	out := selectObj(obj, sel)
	for _, k := range keep {
		if x, ok := obj[k]; ok {
			out[k] = x
		}
	}
	return EncodeJSON(out)
}

func selectValue(v any, sel [][]string) (any, error) {
	b, err := EncodeJSON(v)
	if err != nil {
		return nil, err
	}
	b, err = selectProps(b, sel, nil)
	if err != nil {
		return nil, err
	}
	return json.RawMessage(b), nil
}

func selectObj(obj map[string]any, sel [][]string) map[string]any {
	out := map[string]any{}
	for k, v := range obj {
		if strings.HasPrefix(k, "@odata.") {
			out[k] = v
		}
	}
	for _, p := range sel {
		x, ok := obj[p[0]]
		if !ok {
			continue
		}
		if len(p) == 1 {
			out[p[0]] = x
			continue
		}
		sub, ok := x.(map[string]any)
		if !ok {
			continue
		}
		inner := selectObj(sub, [][]string{p[1:]})
		if prev, ok := out[p[0]].(map[string]any); ok {
			for k, v := range inner {
				prev[k] = v
			}
			continue
		}
		out[p[0]] = inner
	}
	return out
}
