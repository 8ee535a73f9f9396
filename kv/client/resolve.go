package client

import (
	"context"
	"fmt"
	"net/url"

	apiclient "cxlpool/api/client"
	"cxlpool/fabric/cci"
	"cxlpool/rdma"
)

// kvNamespacesURI is the box's KV namespaces collection (api's
// KVNamespacesURI).
const kvNamespacesURI = "/redfish/v1/Oem/CxlPool/KVNamespaces"

// RedfishResolve is a rack's Remote.Resolve over the box's Redfish API:
// it reads the namespace's resource with the rack's own account (any
// role that may read it, e.g. ReadOnly) and returns the export of each
// chunk from its Remote.Exports, so a rack learns the exports of chunks
// the namespace grew, after a restart too, without configuration out of
// band. The token is not in the resource (it is shown once, by the Export
// action): the rack keeps it (Config.Token). The resource names the rack
// it is exported to; exports to another rack are refused (ErrNoExport).
func RedfishResolve(api *apiclient.Client, namespace, rack string) func(context.Context) (map[[16]byte]rdma.ExportID, error) {
	return func(ctx context.Context) (map[[16]byte]rdma.ExportID, error) {
		var ns struct {
			Remote *struct {
				Client  string `json:"Client"`
				Exports []struct {
					Tag    string `json:"Tag"`
					Export string `json:"Export"`
				} `json:"Exports"`
			} `json:"Remote"`
		}
		if err := api.Get(ctx, kvNamespacesURI+"/"+url.PathEscape(namespace), &ns); err != nil {
			return nil, fmt.Errorf("kv client: namespace %s's exports: %w", namespace, err)
		}
		if ns.Remote == nil {
			return nil, fmt.Errorf("kv client: namespace %s is not exported: %w", namespace, ErrNoExport)
		}
		if ns.Remote.Client != rack {
			return nil, fmt.Errorf("kv client: namespace %s is exported to rack %q, not %q: %w", namespace, ns.Remote.Client, rack, ErrNoExport)
		}
		out := make(map[[16]byte]rdma.ExportID, len(ns.Remote.Exports))
		for _, e := range ns.Remote.Exports {
			tag, err := cci.ParseTag(e.Tag)
			if err != nil {
				return nil, fmt.Errorf("kv client: namespace %s: export %q of tag %q: %w", namespace, e.Export, e.Tag, err)
			}
			if e.Export == "" {
				return nil, fmt.Errorf("kv client: namespace %s: chunk %s without an export id", namespace, e.Tag)
			}
			out[tag] = rdma.ExportID(e.Export)
		}
		return out, nil
	}
}
