package main

import (
	"context"
	"fmt"
	"strings"

	"cxlpool/api/client"
	"cxlpool/internal/bytesize"
)

// quotaOut is the answer of quota: the host as `hosts --json` shows it,
// and the service's note when the new quota is below what the host holds.
type quotaOut struct {
	hostOut
	Note string `json:"note,omitempty"`
}

// quotaArg reads a quota: a size in binary units, whole MiB; 0 or "none"
// for no limit.
func quotaArg(arg string) (uint64, error) {
	if strings.EqualFold(strings.TrimSpace(arg), "none") {
		return 0, nil
	}
	n, err := bytesize.Parse(arg)
	if err != nil {
		return 0, usagef("%v", err)
	}
	if n%mebibyte != 0 {
		return 0, usagef("quota %q: want a whole number of MiB (or 0 or none for no limit)", arg)
	}
	return n, nil
}

// cmdQuota sets a host's quota (PATCH Systems/HostN
// Oem.CxlPool.QuotaMiB): every later grant to the host, whoever asks,
// must fit under it.
func cmdQuota(ctx context.Context, a *app, args []string) error {
	fs := a.flags("quota", "HostN SIZE|none")
	pos, err := parse(fs, args, 2, 2)
	if err != nil {
		return err
	}
	sys, err := systemArg(pos[0])
	if err != nil {
		return err
	}
	quota, err := quotaArg(pos[1])
	if err != nil {
		return err
	}
	ctx, cancel := a.deadline(ctx, false)
	defer cancel()
	c, err := a.client()
	if err != nil {
		return err
	}
	body := map[string]any{"Oem": map[string]any{"CxlPool": map[string]any{"QuotaMiB": quota / mebibyte}}}
	r, err := c.Patch(ctx, client.SystemsURI+"/"+sys, body)
	if err != nil {
		return explain(err)
	}
	var answer struct {
		client.System
		Info []struct {
			Message    string `json:"Message"`
			Resolution string `json:"Resolution"`
		} `json:"@Message.ExtendedInfo"`
	}
	if err := r.Decode(&answer); err != nil {
		return err
	}
	out := quotaOut{hostOut: toHostOut(answer.System)}
	for _, m := range answer.Info {
		if m.Resolution != "" {
			out.Note = m.Resolution
		}
	}
	if a.g.json {
		return a.printJSON(out)
	}
	if out.QuotaBytes == 0 {
		fmt.Fprintf(a.stdout, "%s has no quota now (holds %s).\n", out.System, size(out.GrantedBytes))
	} else {
		fmt.Fprintf(a.stdout, "%s's quota is %s now (holds %s).\n", out.System, size(out.QuotaBytes), size(out.GrantedBytes))
	}
	if out.Note != "" {
		fmt.Fprintf(a.stderr, "poolctl: note: %s\n", out.Note)
	}
	return nil
}
