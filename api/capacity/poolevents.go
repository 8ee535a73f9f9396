package capacity

import (
	"cxlpool/api/internal/pool"
	"cxlpool/api/redfish"
	"cxlpool/dcd"
)

// startFeeders announces the grants lost before the start and turns the
// Manager's changes into events until Close.
func (s *Server) startFeeders() {
	s.announceStartLosses() // stranded.go
	if s.mgr == nil {
		return
	}
	ch, cancel := s.mgr.Subscribe(256)
	pool.Feed(s.ctx, s.bg, ch, cancel, func(c dcd.Change) {
		for _, ev := range changeEvents(c) {
			s.Publish(ev)
		}
	})
}

// changeEvents maps a capacity change to the events clients see, with the
// URIs of the resources it touched (see api/internal/pool/uris.go).
func changeEvents(c dcd.Change) []redfish.Event {
	host := pool.HostRef
	switch c.Kind {
	case dcd.ChangeChunk:
		key := redfish.MsgResourceChanged
		switch c.Message {
		case "reserved":
			key = redfish.MsgResourceCreated
		case "deleted":
			key = redfish.MsgResourceRemoved
		}
		return []redfish.Event{{MessageKey: key, Origin: pool.ChunkURI(c.Chunk)}}
	case dcd.ChangeGrant:
		if c.Grant == nil {
			return nil
		}
		key := redfish.MsgStateChanged
		args := []string{pool.ConnectionURI(c.Grant.ID), string(c.Grant.State)}
		switch c.Grant.State {
		case dcd.GrantAdding:
			key, args = redfish.MsgResourceCreated, nil
		case dcd.GrantReleased:
			key, args = redfish.MsgResourceRemoved, nil
		}
		return []redfish.Event{{MessageKey: key, Args: args, Origin: pool.ConnectionURI(c.Grant.ID), Host: host(c.Grant.Host)}}
	case dcd.ChangeHost:
		if c.Message == dcd.QuotaChanged { // a setting, not a state (systempatch.go)
			return []redfish.Event{{MessageKey: redfish.MsgResourceChanged, Origin: pool.SystemURI(c.Host), Host: host(c.Host)}}
		}
		return []redfish.Event{{MessageKey: redfish.MsgStateChanged, Args: []string{pool.SystemURI(c.Host), c.Message},
			Origin: pool.SystemURI(c.Host), Host: host(c.Host)}}
	case dcd.ChangeOrphan, dcd.ChangeDevice:
		msg := c.Message
		if msg == "" {
			msg = string(c.Kind)
		}
		return []redfish.Event{{MessageKey: redfish.MsgStateChanged, Args: []string{pool.DCDURI, msg}, Origin: pool.DCDURI}}
	}
	return nil
}
