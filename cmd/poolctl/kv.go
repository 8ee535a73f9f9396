package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"cxlpool/api/client"
	"cxlpool/internal/bytesize"
)

// kvNamespacesURI is the KV-cache store's namespaces (api/kvnamespaces.go).
const kvNamespacesURI = "/redfish/v1/Oem/CxlPool/KVNamespaces"

// kvNamespace is the part of a namespace resource poolctl shows.
type kvNamespace struct {
	ID           string   `json:"Id"`
	ChunkSizeMiB uint64   `json:"ChunkSizeMiB"`
	QuotaMiB     uint64   `json:"QuotaMiB"`
	Hosts        []string `json:"Hosts"`
	Created      string   `json:"Created"`
	Chunks       []struct {
		MemoryChunk struct {
			ID string `json:"@odata.id"`
		} `json:"MemoryChunk"`
		Tag     string `json:"Tag"`
		SizeMiB uint64 `json:"SizeMiB"`
	} `json:"Chunks"`
	Stats struct {
		Blocks        uint64 `json:"Blocks"`
		UsedBytes     uint64 `json:"UsedBytes"`
		ReservedBytes uint64 `json:"ReservedBytes"`
		CapacityMiB   uint64 `json:"CapacityMiB"`
		Evictions     uint64 `json:"Evictions"`
		Sessions      int    `json:"Sessions"`
	} `json:"Stats"`
	Tokens []struct {
		Host  string `json:"Host"`
		Token string `json:"Token"`
	} `json:"Tokens"`
	Remote *struct {
		Client      string `json:"Client"`
		Token       string `json:"Token"`
		ExportToken string `json:"ExportToken"`
		Exports     []struct {
			MemoryChunk struct {
				ID string `json:"@odata.id"`
			} `json:"MemoryChunk"`
			Tag    string `json:"Tag"`
			Export string `json:"Export"`
		} `json:"Exports"`
	} `json:"Remote"`
}

// kvRemoteOut is a namespace's export to a rack in --json output.
type kvRemoteOut struct {
	Client      string        `json:"client"`
	Token       string        `json:"token,omitempty"`
	ExportToken string        `json:"export_token,omitempty"`
	Exports     []kvExportOut `json:"exports"`
}

type kvExportOut struct {
	Export string `json:"export"`
	Chunk  string `json:"chunk"`
	Tag    string `json:"tag"`
}

// kvOut is a namespace in --json output.
type kvOut struct {
	Name          string            `json:"name"`
	URI           string            `json:"uri"`
	ChunkBytes    uint64            `json:"chunk_bytes"`
	QuotaBytes    uint64            `json:"quota_bytes"`
	CapacityBytes uint64            `json:"capacity_bytes"`
	UsedBytes     uint64            `json:"used_bytes"`
	Blocks        uint64            `json:"blocks"`
	Evictions     uint64            `json:"evictions"`
	Sessions      int               `json:"sessions"`
	Hosts         []string          `json:"hosts"`
	Chunks        []string          `json:"chunks"`
	Tags          []string          `json:"tags"`
	Tokens        map[string]string `json:"tokens,omitempty"`
	Remote        *kvRemoteOut      `json:"remote,omitempty"`
}

func toKVOut(n kvNamespace) kvOut {
	o := kvOut{Name: n.ID, URI: kvNamespacesURI + "/" + n.ID, ChunkBytes: n.ChunkSizeMiB << 20, QuotaBytes: n.QuotaMiB << 20,
		CapacityBytes: n.Stats.CapacityMiB << 20, UsedBytes: n.Stats.UsedBytes, Blocks: n.Stats.Blocks,
		Evictions: n.Stats.Evictions, Sessions: n.Stats.Sessions, Hosts: n.Hosts}
	for _, c := range n.Chunks {
		o.Chunks = append(o.Chunks, lastSegment(c.MemoryChunk.ID))
		o.Tags = append(o.Tags, c.Tag)
	}
	if len(n.Tokens) > 0 {
		o.Tokens = map[string]string{}
		for _, t := range n.Tokens {
			o.Tokens[t.Host] = t.Token
		}
	}
	if r := n.Remote; r != nil {
		o.Remote = &kvRemoteOut{Client: r.Client, Token: r.Token, ExportToken: r.ExportToken, Exports: []kvExportOut{}}
		for _, e := range r.Exports {
			o.Remote.Exports = append(o.Remote.Exports, kvExportOut{Export: e.Export, Chunk: lastSegment(e.MemoryChunk.ID), Tag: e.Tag})
		}
	}
	if o.Hosts == nil {
		o.Hosts = []string{}
	}
	return o
}

func cmdKV(ctx context.Context, a *app, args []string) error {
	sub := "list"
	if len(args) > 0 && args[0] != "" && args[0][0] != '-' {
		sub, args = args[0], args[1:]
	}
	switch sub {
	case "list":
		return kvList(ctx, a, args)
	case "show":
		return kvShow(ctx, a, args)
	case "create":
		return kvCreate(ctx, a, args)
	case "resize":
		return kvResize(ctx, a, args)
	case "join", "leave":
		return kvMember(ctx, a, sub, args)
	case "delete":
		return kvDelete(ctx, a, args)
	case "export", "unexport":
		return kvExport(ctx, a, sub, args)
	}
	return usagef("kv: unknown subcommand %q (list, show, create, resize, join, leave, delete, export, unexport)", sub)
}

func kvList(ctx context.Context, a *app, args []string) error {
	return list(ctx, a, "kv list", args,
		func(ctx context.Context, c *client.Client) ([]kvOut, error) {
			var col struct {
				Members []struct {
					ID string `json:"@odata.id"`
				} `json:"Members"`
			}
			if err := c.Get(ctx, kvNamespacesURI, &col); err != nil {
				return nil, err
			}
			out := make([]kvOut, 0, len(col.Members))
			for _, m := range col.Members {
				var n kvNamespace
				if err := c.Get(ctx, m.ID, &n); err != nil {
					return nil, err
				}
				out = append(out, toKVOut(n))
			}
			return out, nil
		},
		[]string{"NAMESPACE", "HOSTS", "CHUNKS", "CAPACITY", "QUOTA", "USED", "BLOCKS", "EVICTIONS", "SESSIONS"},
		func(o kvOut) []string {
			return []string{o.Name, strings.Join(o.Hosts, ","), fmt.Sprint(len(o.Chunks)), size(o.CapacityBytes), size(o.QuotaBytes),
				size(o.UsedBytes), fmt.Sprint(o.Blocks), fmt.Sprint(o.Evictions), fmt.Sprint(o.Sessions)}
		})
}

// kvURI is a namespace's URI from its name.
func kvURI(name string) (string, error) {
	if name == "" || strings.ContainsAny(name, "/?#%") {
		return "", usagef("namespace %q: want its name", name)
	}
	return kvNamespacesURI + "/" + name, nil
}

func (a *app) printKV(n kvNamespace, verb string) error {
	o := toKVOut(n)
	if a.g.json {
		return a.printJSON(o)
	}
	if verb != "" {
		fmt.Fprintf(a.stdout, "%s namespace %s.\n", verb, o.Name)
	}
	// The count first: the chunk ids alone ("2") read as a count.
	fmt.Fprintf(a.stdout, "namespace: %s\nhosts:     %s\nchunks:    %d (ids %s; %s of quota %s, %s each)\nused:      %s in %d blocks, %d evictions, %d sessions\n",
		o.Name, strings.Join(o.Hosts, ", "), len(o.Chunks), orDash(strings.Join(o.Chunks, ", ")), size(o.CapacityBytes), size(o.QuotaBytes),
		size(o.ChunkBytes), size(o.UsedBytes), o.Blocks, o.Evictions, o.Sessions)
	for i, t := range o.Tags {
		fmt.Fprintf(a.stdout, "tag:       %s (chunk %s)\n", t, o.Chunks[i])
	}
	if len(n.Tokens) > 0 {
		for _, t := range n.Tokens {
			fmt.Fprintf(a.stdout, "token %s: %s\n", t.Host, t.Token)
		}
		fmt.Fprintln(a.stdout, "The tokens are shown only this once: give each host its own now (CXLPOOL_KV_TOKEN).")
	}
	if r := o.Remote; r != nil {
		fmt.Fprintf(a.stdout, "remote:    %s\n", r.Client)
		for _, e := range r.Exports {
			fmt.Fprintf(a.stdout, "export:    %s (chunk %s, tag %s)\n", e.Export, e.Chunk, e.Tag)
		}
		if r.Token != "" {
			fmt.Fprintf(a.stdout, "rack token: %s (export protocol form: %s)\n", r.Token, r.ExportToken)
			fmt.Fprintln(a.stdout, "The rack's token is shown only this once: it opens the index (as the rack) and every export above.")
		}
	}
	return nil
}

func kvShow(ctx context.Context, a *app, args []string) error {
	fs := a.flags("kv show", "NAME")
	pos, err := parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	uri, err := kvURI(pos[0])
	if err != nil {
		return err
	}
	ctx, cancel := a.deadline(ctx, false)
	defer cancel()
	c, err := a.client()
	if err != nil {
		return err
	}
	var n kvNamespace
	if err := c.Get(ctx, uri, &n); err != nil {
		return explain(err)
	}
	return a.printKV(n, "")
}

// kvDo sends one change and decodes the namespace it answers with.
func (a *app) kvDo(ctx context.Context, method, uri string, body any) (kvNamespace, error) {
	var n kvNamespace
	ctx, cancel := a.deadline(ctx, true)
	defer cancel()
	c, err := a.client()
	if err != nil {
		return n, err
	}
	resp, err := c.Do(ctx, method, uri, body)
	if err != nil {
		return n, explain(err)
	}
	if len(resp.Body) > 0 {
		if err := json.Unmarshal(resp.Body, &n); err != nil {
			return n, fmt.Errorf("kv: answer of %s %s: %w", method, uri, err)
		}
	}
	return n, nil
}

func kvCreate(ctx context.Context, a *app, args []string) error {
	fs := a.flags("kv create", "NAME --hosts Host0,Host1 [--chunk SIZE] [--quota SIZE]")
	hosts := fs.String("hosts", "", "the member hosts, comma separated (`HostN,…`)")
	chunk := bytesize.Value(256 << 20)
	fs.Var(&chunk, "chunk", "the `size` of each chunk the namespace adds (a multiple of the box's block size)")
	var quota bytesize.Value
	fs.Var(&quota, "quota", "the most pool memory the namespace may grow to (default: one chunk)")
	pos, err := parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	if *hosts == "" {
		return usagef("kv create: --hosts is required")
	}
	if uint64(chunk) == 0 || uint64(chunk)%mebibyte != 0 || uint64(quota)%mebibyte != 0 {
		return usagef("kv create: --chunk and --quota must be whole MiB")
	}
	body := map[string]any{"Name": pos[0], "ChunkSizeMiB": uint64(chunk) >> 20, "Hosts": strings.Split(*hosts, ",")}
	if quota != 0 {
		body["QuotaMiB"] = uint64(quota) >> 20
	}
	n, err := a.kvDo(ctx, http.MethodPost, kvNamespacesURI, body)
	if err != nil {
		return err
	}
	return a.printKV(n, "Created")
}

func kvResize(ctx context.Context, a *app, args []string) error {
	fs := a.flags("kv resize", "NAME QUOTA")
	pos, err := parse(fs, args, 2, 2)
	if err != nil {
		return err
	}
	uri, err := kvURI(pos[0])
	if err != nil {
		return err
	}
	q, err := sizeArg(pos[1])
	if err != nil {
		return err
	}
	n, err := a.kvDo(ctx, http.MethodPatch, uri, map[string]any{"QuotaMiB": q >> 20})
	if err != nil {
		return err
	}
	return a.printKV(n, "Resized")
}

func kvMember(ctx context.Context, a *app, verb string, args []string) error {
	fs := a.flags("kv "+verb, "NAME HostN")
	pos, err := parse(fs, args, 2, 2)
	if err != nil {
		return err
	}
	uri, err := kvURI(pos[0])
	if err != nil {
		return err
	}
	action := "/Actions/CxlPool.Join"
	word := "Joined " + pos[1] + " to"
	if verb == "leave" {
		action, word = "/Actions/CxlPool.Leave", "Removed "+pos[1]+" from"
	}
	n, err := a.kvDo(ctx, http.MethodPost, uri+action, map[string]any{"Host": pos[1]})
	if err != nil {
		return err
	}
	return a.printKV(n, word)
}

// kvExport exports a namespace to a remote rack (its chunks through the
// export protocol, one token for all and for the index), or ends it.
func kvExport(ctx context.Context, a *app, verb string, args []string) error {
	usage := "NAME --client RACK"
	if verb == "unexport" {
		usage = "NAME"
	}
	fs := a.flags("kv "+verb, usage)
	rack := fs.String("client", "", "the remote rack (`name`) the namespace is exported to")
	pos, err := parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	uri, err := kvURI(pos[0])
	if err != nil {
		return err
	}
	if verb == "unexport" {
		n, err := a.kvDo(ctx, http.MethodPost, uri+"/Actions/CxlPool.Unexport", map[string]any{})
		if err != nil {
			return err
		}
		return a.printKV(n, "Revoked the remote rack's exports of")
	}
	if *rack == "" {
		return usagef("kv export: --client RACK is required")
	}
	n, err := a.kvDo(ctx, http.MethodPost, uri+"/Actions/CxlPool.Export", map[string]any{"Client": *rack})
	if err != nil {
		return err
	}
	return a.printKV(n, "Exported to "+*rack+":")
}

func kvDelete(ctx context.Context, a *app, args []string) error {
	fs := a.flags("kv delete", "NAME")
	pos, err := parse(fs, args, 1, 1)
	if err != nil {
		return err
	}
	uri, err := kvURI(pos[0])
	if err != nil {
		return err
	}
	if _, err := a.kvDo(ctx, http.MethodDelete, uri, nil); err != nil {
		return err
	}
	if a.g.json {
		return a.printJSON(map[string]string{"name": pos[0], "uri": uri, "state": "deleted"})
	}
	fmt.Fprintf(a.stdout, "Deleted namespace %s: its blocks are gone and its chunks went back to the pool.\n", pos[0])
	return nil
}
