package api

import (
	"net/http"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"

	"cxlpool/api/internal/pool"
	"cxlpool/api/manager"
	"cxlpool/api/oemschema"
	"cxlpool/api/redfish"
)

const (
	serviceRootURI = "/redfish/v1"
	registriesURI  = serviceRootURI + "/Registries"
)

// odataTypes lists every @odata.type the service emits; $metadata
// references the CSDL file of each. A new resource adds its types here
// (TestMetadataReferencesCSDL checks each against the DMTF bundle).
var odataTypes = []string{
	"#ServiceRoot.v1_20_0.ServiceRoot",
	"#SessionService.v1_2_0.SessionService",
	"#SessionCollection.SessionCollection",
	"#Session.v1_8_0.Session",
	"#AccountService.v1_18_1.AccountService",
	"#ManagerAccountCollection.ManagerAccountCollection",
	"#ManagerAccount.v1_14_1.ManagerAccount",
	"#RoleCollection.RoleCollection",
	"#Role.v1_3_3.Role",
	"#ManagerCollection.ManagerCollection",
	"#Manager.v1_24_0.Manager",
	"#LogServiceCollection.LogServiceCollection",
	"#LogService.v1_9_0.LogService",
	"#LogEntryCollection.LogEntryCollection",
	"#LogEntry.v1_21_0.LogEntry",
	"#TaskService.v1_3_0.TaskService",
	"#TaskCollection.TaskCollection",
	"#Task.v1_7_4.Task",
	"#EventService.v1_12_0.EventService",
	"#EventDestinationCollection.EventDestinationCollection",
	"#EventDestination.v1_16_0.EventDestination",
	"#Event.v1_13_0.Event",
	"#MessageRegistryFileCollection.MessageRegistryFileCollection",
	"#MessageRegistryFile.v1_1_5.MessageRegistryFile",
	"#Message.v1_3_0.Message",
	"#ChassisCollection.ChassisCollection",
	"#Chassis.v1_28_0.Chassis",
	"#PCIeDeviceCollection.PCIeDeviceCollection",
	"#PCIeDevice.v1_21_0.PCIeDevice",
	"#CXLLogicalDeviceCollection.CXLLogicalDeviceCollection",
	"#CXLLogicalDevice.v1_3_0.CXLLogicalDevice",
	"#MemoryRegionCollection.MemoryRegionCollection",
	"#MemoryRegion.v1_0_3.MemoryRegion",
	"#FabricAdapterCollection.FabricAdapterCollection",
	"#FabricAdapter.v1_5_3.FabricAdapter",
	"#PortCollection.PortCollection",
	"#Port.v1_18_0.Port",
	"#MemoryDomainCollection.MemoryDomainCollection",
	"#MemoryDomain.v1_5_1.MemoryDomain",
	"#MemoryChunksCollection.MemoryChunksCollection",
	"#MemoryChunks.v1_6_2.MemoryChunks",
	"#FabricCollection.FabricCollection",
	"#Fabric.v1_4_0.Fabric",
	"#EndpointCollection.EndpointCollection",
	"#Endpoint.v1_8_2.Endpoint",
	"#ZoneCollection.ZoneCollection",
	"#Zone.v1_6_3.Zone",
	"#ConnectionCollection.ConnectionCollection",
	"#Connection.v1_4_0.Connection",
	"#ComputerSystemCollection.ComputerSystemCollection",
	"#ComputerSystem.v1_27_0.ComputerSystem",
	"#MemoryCollection.MemoryCollection",
	"#Memory.v1_23_0.Memory",
	"#UpdateService.v1_17_0.UpdateService",
	"#SoftwareInventoryCollection.SoftwareInventoryCollection",
	"#SoftwareInventory.v1_13_0.SoftwareInventory",
	"#Settings.v1_4_0.OperationApplyTimeSupport",
	"#TelemetryService.v1_4_1.TelemetryService",
	"#MetricDefinitionCollection.MetricDefinitionCollection",
	"#MetricDefinition.v1_3_5.MetricDefinition",
	"#MetricReportDefinitionCollection.MetricReportDefinitionCollection",
	"#MetricReportDefinition.v1_4_7.MetricReportDefinition",
	"#MetricReportCollection.MetricReportCollection",
	"#MetricReport.v1_5_2.MetricReport",
	"#ThermalSubsystem.v1_5_0.ThermalSubsystem",
	"#FanCollection.FanCollection",
	"#Fan.v1_6_0.Fan",
	"#ThermalMetrics.v1_3_2.ThermalMetrics",
	"#PowerSubsystem.v1_1_3.PowerSubsystem",
	"#PowerSupplyCollection.PowerSupplyCollection",
	"#PowerSupply.v1_6_0.PowerSupply",
	"#PowerSupplyMetrics.v1_2_0.PowerSupplyMetrics",
	"#SensorCollection.SensorCollection",
	"#Sensor.v1_12_0.Sensor",
	"#ManagerNetworkProtocol.v1_12_0.ManagerNetworkProtocol",
	"#EthernetInterfaceCollection.EthernetInterfaceCollection",
	"#EthernetInterface.v1_12_4.EthernetInterface",
	"#CertificateService.v1_2_1.CertificateService",
	"#CertificateLocations.v1_0_4.CertificateLocations",
	"#CertificateCollection.CertificateCollection",
	"#Certificate.v1_11_0.Certificate",
	"#ActionInfo.v1_5_0.ActionInfo",
	"#JsonSchemaFileCollection.JsonSchemaFileCollection",
	"#JsonSchemaFile.v1_1_5.JsonSchemaFile",
}

// topLevel are ServiceRoot's navigation properties and their URIs; each
// is linked only when this build serves it.
var topLevel = []struct{ prop, uri string }{
	{"AccountService", "/redfish/v1/AccountService"},
	{"CertificateService", manager.CertificateServiceURI},
	{"Chassis", "/redfish/v1/Chassis"},
	{"EventService", redfish.EventServiceURI},
	{"Fabrics", "/redfish/v1/Fabrics"},
	{"JsonSchemas", jsonSchemasURI},
	{"Managers", pool.ManagersURI},
	{"Registries", registriesURI},
	{"SessionService", redfish.SessionServiceURI},
	{"Systems", SystemsURI},
	{"Tasks", redfish.TaskServiceURI},
	{"TelemetryService", "/redfish/v1/TelemetryService"},
	{"UpdateService", "/redfish/v1/UpdateService"},
}

func (s *Server) serviceRootRoutes() {
	s.Handle(http.MethodGet, "/redfish", redfish.Public, func(c echo.Context) error {
		return s.WriteResource(c, http.StatusOK, redfish.Obj{"v1": "/redfish/v1/"})
	})
	s.Handle(http.MethodGet, serviceRootURI, redfish.Public, func(c echo.Context) error {
		return s.WriteResource(c, http.StatusOK, s.serviceRoot(redfish.PrincipalOf(c)))
	})
	s.Handle(http.MethodGet, serviceRootURI+"/odata", redfish.Public, func(c echo.Context) error {
		value := []redfish.Obj{{"name": "Service", "kind": "Singleton", "url": "/redfish/v1/"}}
		for _, t := range topLevel {
			if s.HasRoute(t.uri) {
				value = append(value, redfish.Obj{"name": t.prop, "kind": "Singleton", "url": t.uri})
			}
		}
		return s.WriteResource(c, http.StatusOK, redfish.Obj{"@odata.context": "/redfish/v1/$metadata", "value": value})
	})
	s.Handle(http.MethodGet, serviceRootURI+"/$metadata", redfish.Public, func(c echo.Context) error {
		return c.Blob(http.StatusOK, "application/xml; charset=utf-8", []byte(metadataXML()))
	})
	s.schemaStoreRoutes()
}

// serviceRoot is the service root as p sees it: a caller who sent
// credentials gets links only to what it may read (a HostUser no
// CertificateService it would get 403 from); an anonymous one, every
// service this build has, to learn where to log in and what is there.
func (s *Server) serviceRoot(p *redfish.Principal) redfish.Obj {
	readable := func(uri string) bool {
		if p == nil {
			return s.HasRoute(uri)
		}
		return s.CanRead(p, uri)
	}
	links := redfish.Obj{"Sessions": redfish.Link(redfish.SessionsURI)}
	if readable(pool.ManagerURI) {
		links["ManagerProvidingService"] = redfish.Link(pool.ManagerURI)
	}
	o := redfish.Obj{
		"@odata.id":      serviceRootURI,
		"@odata.type":    "#ServiceRoot.v1_20_0.ServiceRoot",
		"Id":             "RootService",
		"Name":           "Root Service",
		"RedfishVersion": pool.RedfishVersion,
		"UUID":           s.UUID(),
		"Vendor":         "cxlpool",
		"Product":        "cxlpool CXL memory pool",
		"ProtocolFeaturesSupported": redfish.Obj{
			"ExpandQuery":          redfish.Obj{"ExpandAll": true, "Levels": true, "Links": true, "NoLinks": true, "MaxLevels": 1},
			"SelectQuery":          true,
			"TopSkipQuery":         true,
			"FilterQuery":          true,
			"OnlyMemberQuery":      false,
			"ExcerptQuery":         false,
			"MultipleHTTPRequests": true,
			"DeepOperations":       redfish.Obj{"DeepPATCH": false, "DeepPOST": false},
		},
		"Links": links,
	}
	for _, t := range topLevel {
		if readable(t.uri) {
			o[t.prop] = redfish.Link(t.uri)
		}
	}
	return o
}

// metadataXML is the CSDL service document: one edmx:Reference per DMTF
// schema file the service's types come from.
func metadataXML() string {
	includes := map[string][]string{} // file stem → namespaces
	for _, t := range odataTypes {
		parts := strings.Split(strings.TrimPrefix(t, "#"), ".")
		stem := parts[0]
		if !slices.Contains(includes[stem], stem) {
			includes[stem] = append(includes[stem], stem)
		}
		if len(parts) == 3 {
			includes[stem] = append(includes[stem], parts[0]+"."+parts[1])
		}
	}
	includes["Resource"] = []string{"Resource", "Resource.v1_0_0"}
	includes["RedfishExtensions"] = []string{"RedfishExtensions.v1_0_0"}
	var b strings.Builder
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	b.WriteString(`<edmx:Edmx xmlns:edmx="http://docs.oasis-open.org/odata/ns/edmx" Version="4.0">` + "\n")
	stems := make([]string, 0, len(includes))
	for k := range includes {
		stems = append(stems, k)
	}
	slices.Sort(stems)
	for _, stem := range stems {
		b.WriteString(`  <edmx:Reference Uri="http://redfish.dmtf.org/schemas/v1/` + stem + `_v1.xml">` + "\n")
		for _, ns := range includes[stem] {
			alias := ""
			if ns == "RedfishExtensions.v1_0_0" {
				alias = ` Alias="Redfish"`
			}
			b.WriteString(`    <edmx:Include Namespace="` + ns + `"` + alias + `/>` + "\n")
		}
		b.WriteString("  </edmx:Reference>\n")
	}
	// The OEM extension, from the box's own schema store (schemas.go).
	b.WriteString(`  <edmx:Reference Uri="` + oemschema.CSDLURI + `">` + "\n")
	b.WriteString(`    <edmx:Include Namespace="` + oemschema.Vendor + `"/>` + "\n")
	b.WriteString(`    <edmx:Include Namespace="` + oemschema.Namespace + `"/>` + "\n")
	b.WriteString("  </edmx:Reference>\n")
	b.WriteString(`  <edmx:DataServices>
    <Schema xmlns="http://docs.oasis-open.org/odata/ns/edm" Namespace="Service">
      <EntityContainer Name="Service" Extends="ServiceRoot.v1_20_0.ServiceContainer"/>
    </Schema>
  </edmx:DataServices>
</edmx:Edmx>
`)
	return b.String()
}

// --- Registries: the message registries, for clients that look up
// MessageIds. ---

func (s *Server) registryRoutes() {
	s.Handle(http.MethodGet, registriesURI, redfish.PrivLogin, func(c echo.Context) error {
		ids := s.Registries().IDs()
		slices.Sort(ids)
		uris := make([]string, len(ids))
		for i, id := range ids {
			uris[i] = registriesURI + "/" + id
		}
		return s.WriteCollection(c, redfish.Collection{
			ODataID: registriesURI, ODataType: "#MessageRegistryFileCollection.MessageRegistryFileCollection",
			Name: "Message Registries", Members: uris,
			Expand: func(uri string) (any, error) { return registryFile(uri[len(registriesURI)+1:]), nil },
		})
	})
	s.Handle(http.MethodGet, registriesURI+"/:id", redfish.PrivLogin, func(c echo.Context) error {
		id := c.Param("id")
		if _, ok := s.Registries().File(id); !ok {
			return redfish.ErrResourceNotFound("MessageRegistryFile", id)
		}
		return s.WriteResource(c, http.StatusOK, registryFile(id))
	})
	s.Handle(http.MethodGet, registriesURI+"/:id/:file", redfish.PrivLogin, func(c echo.Context) error {
		id := c.Param("id")
		b, ok := s.Registries().File(id)
		if !ok || c.Param("file") != id+".json" {
			return redfish.ErrResourceNotFound("MessageRegistry", id)
		}
		return s.WriteJSON(c, http.StatusOK, b)
	})
}

func registryFile(id string) redfish.Obj {
	prefix, rest, _ := strings.Cut(id, ".")
	v := strings.Split(rest, ".")
	registry := id
	if len(v) >= 2 {
		registry = prefix + "." + v[0] + "." + v[1]
	}
	return redfish.Obj{
		"@odata.id":   registriesURI + "/" + id,
		"@odata.type": "#MessageRegistryFile.v1_1_5.MessageRegistryFile",
		"Id":          id,
		"Name":        prefix + " Message Registry File",
		"Registry":    registry,
		"Languages":   []string{"en"},
		"Location": []redfish.Obj{{
			"Language":       "en",
			"Uri":            registriesURI + "/" + id + "/" + id + ".json",
			"PublicationUri": "https://redfish.dmtf.org/registries/" + id + ".json",
		}},
	}
}
