package api

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"cxlpool/api/oemschema"
	"cxlpool/api/redfish"
)

// The box's own schema store: the CxlPool OEM extension's CSDL (which
// $metadata references) and its JSON schema (a JsonSchemaFile, as DMTF's
// model and bmcweb publish them), so that a client without network
// access validates every Oem.CxlPool object. DMTF's own schemas stay at
// their published URIs (the Link headers name them).
const (
	jsonSchemasURI  = serviceRootURI + "/JsonSchemas"
	oemSchemaFileID = oemschema.Namespace
	oemSchemaURI    = jsonSchemasURI + "/" + oemSchemaFileID
	csdlStoreURI    = serviceRootURI + "/schemas"
)

func (s *Server) schemaStoreRoutes() {
	// Public like $metadata, which points here: a client reads both to
	// learn the service's types before it logs in.
	s.Handle(http.MethodGet, csdlStoreURI+"/:file", redfish.Public, func(c echo.Context) error {
		if c.Param("file") != oemschema.CSDLFile {
			return redfish.ErrResourceNotFound("Schema", c.Param("file"))
		}
		return c.Blob(http.StatusOK, "application/xml; charset=utf-8", oemschema.CSDL())
	})
	s.Handle(http.MethodGet, jsonSchemasURI, redfish.PrivLogin, func(c echo.Context) error {
		return s.WriteCollection(c, redfish.Collection{
			ODataID: jsonSchemasURI, ODataType: "#JsonSchemaFileCollection.JsonSchemaFileCollection",
			Name: "JSON Schema Files", Members: []string{oemSchemaURI},
			Expand: func(string) (any, error) { return oemSchemaFile(), nil },
		})
	})
	s.Handle(http.MethodGet, oemSchemaURI, redfish.PrivLogin, func(c echo.Context) error {
		return s.WriteResource(c, http.StatusOK, oemSchemaFile())
	})
	s.Handle(http.MethodGet, oemschema.JSONSchemaURI, redfish.PrivLogin, func(c echo.Context) error {
		return s.WriteJSON(c, http.StatusOK, oemschema.JSONSchema())
	})
}

func oemSchemaFile() redfish.Obj {
	return redfish.Obj{
		"@odata.id":   oemSchemaURI,
		"@odata.type": "#JsonSchemaFile.v1_1_5.JsonSchemaFile",
		"Id":          oemSchemaFileID,
		"Name":        "CxlPool OEM Schema File",
		"Description": "The JSON schema of the CxlPool OEM extension (Oem.CxlPool); its CSDL is " + oemschema.CSDLURI,
		"Schema":      "#" + oemschema.Namespace,
		"Languages":   []string{"en"},
		"Location": []redfish.Obj{{
			"Language": "en",
			"Uri":      oemschema.JSONSchemaURI,
		}},
	}
}
