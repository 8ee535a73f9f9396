package capacity

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"cxlpool/api/internal/pool"
	"cxlpool/api/oemschema"
	"cxlpool/api/redfish"
	"cxlpool/dcd"
)

// Systems: one ComputerSystem per host head. The service knows a host
// only through its CXL link, so a system shows the link's state (Status:
// Enabled while the link is up, UnavailableOffline while it is down) and
// the pool memory it holds; host accounts see only their own.

func (s *Server) systemRoutes() {
	if s.capacity == nil {
		return
	}
	s.Handle(http.MethodGet, pool.SystemsURI, redfish.PrivLogin, func(c echo.Context) error {
		v, err := s.view(c.Request().Context())
		if err != nil {
			return err
		}
		var members []string
		for _, ld := range v.visibleHosts(redfish.PrincipalOf(c)) {
			members = append(members, pool.SystemURI(ld))
		}
		return s.WriteCollection(c, redfish.Collection{ODataID: pool.SystemsURI, ODataType: "#ComputerSystemCollection.ComputerSystemCollection",
			Name: "Hosts", Members: members,
			Expand: func(uri string) (any, error) {
				id, _ := pool.RefID(uri, pool.SystemsURI)
				h, _ := pool.ParseSystemID(id)
				o := system(v, h)
				s.systemBoard(c.Request().Context(), o, h) // head power (headpower.go)
				s.systemHostAgent(o, h)                    // hostreports.go
				return o, nil
			}})
	})
	s.Handle(http.MethodGet, pool.SystemsURI+"/:id", redfish.PrivLogin, func(c echo.Context) error {
		v, h, err := s.lookupSystem(c)
		if err != nil {
			return err
		}
		o := system(v, h)
		s.systemBoard(c.Request().Context(), o, h) // head power (headpower.go)
		s.systemHostAgent(o, h)                    // hostreports.go
		return s.WriteResource(c, http.StatusOK, o)
	})
}

// lookupSystem finds the host the path names, if the caller may see it.
func (s *Server) lookupSystem(c echo.Context) (*poolView, dcd.HostID, error) {
	v, err := s.view(c.Request().Context())
	if err != nil {
		return nil, 0, err
	}
	h, err := pool.ParseSystemID(c.Param("id"))
	if err != nil || !hostVisible(redfish.PrincipalOf(c), v, h) {
		return nil, 0, redfish.ErrResourceNotFound("ComputerSystem", c.Param("id"))
	}
	return v, h, nil
}

func system(v *poolView, h dcd.HostID) redfish.Obj {
	head, _ := v.head(h)
	host := v.hosts[h]
	// The ledger's default name is the Id in lower case ("host3"): one
	// spelling everywhere, the Id's, unless someone named the host.
	if strings.EqualFold(host.Name, pool.SystemID(h)) {
		host.Name = ""
	}
	name := host.Name
	if name == "" {
		name = pool.SystemID(h)
	}
	granted := v.hostGrantedBytes(h)
	o := redfish.Obj{
		"@odata.id":   pool.SystemURI(h),
		"@odata.type": "#ComputerSystem.v1_27_0.ComputerSystem",
		"Id":          pool.SystemID(h),
		"Name":        name,
		"Description": "A host attached to the pool through head port " + strconv.Itoa(int(head.Port)),
		"SystemType":  "Physical",
		"Status":      pool.Status(linkState(head)),
		"Memory":      redfish.Link(pool.SystemURI(h) + "/Memory"),
		// The only memory the service knows of: what the pool lends.
		"MemorySummary": redfish.Obj{"TotalSystemMemoryGiB": float64(granted) / (1 << 30)},
		"Links":         redfish.Obj{"Endpoints": redfish.Links(pool.InitiatorURI(h))},
		"Oem": oemschema.Oem("ComputerSystem", redfish.Obj{
			"LinkUp":        head.LinkUp,
			"Port":          head.Port,
			"QuotaMiB":      pool.MiB(host.Quota),
			"GrantedMiB":    pool.MiB(granted),
			"LogicalDevice": redfish.Link(pool.LogicalDeviceURI(h)),
		}),
	}
	if host.Name != "" {
		o["HostName"] = host.Name
	}
	return o
}
