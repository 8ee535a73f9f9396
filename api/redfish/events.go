package redfish

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
)

const (
	EventServiceURI  = "/redfish/v1/EventService"
	subscriptionsURI = EventServiceURI + "/Subscriptions"
	sseURI           = EventServiceURI + "/SSE"
)

// Event is something that happened, published on the service's bus: it
// goes to the EventLog, to SSE streams and to push subscriptions.
type Event struct {
	// MessageKey is a registry message ("ResourceEvent.ResourceCreated").
	MessageKey string
	Args       []string
	// Origin is the @odata.id of the resource the event is about.
	Origin string
	// Host scopes the event to one host: host principals see only events
	// of their own host; events without a host are for appliance viewers.
	Host *HostID
	// Resolution replaces the registry's resolution with what to do about
	// this event (EventRecord.Resolution), e.g. for lost capacity.
	Resolution string

	ID   int64     // set by Publish
	Time time.Time // set by Publish
}

// Event messages every resource uses.
const (
	MsgResourceCreated = "ResourceEvent.ResourceCreated"
	MsgResourceChanged = "ResourceEvent.ResourceChanged"
	MsgResourceRemoved = "ResourceEvent.ResourceRemoved"
	MsgStateChanged    = "ResourceEvent.ResourceStateChanged"
)

// eventType is the (deprecated but required) EventRecord.EventType.
func eventType(key string) string {
	switch key {
	case MsgResourceCreated:
		return "ResourceAdded"
	case MsgResourceRemoved:
		return "ResourceRemoved"
	case MsgResourceChanged:
		return "ResourceUpdated"
	case MsgStateChanged:
		return "StatusChange"
	}
	if strings.HasPrefix(key, "TaskEvent.") {
		return "StatusChange"
	}
	return "Alert"
}

// bus fans events out to streams and subscriptions.
type bus struct {
	s *Service

	mu      sync.Mutex
	first   int64                 // ids of this run are above first
	next    int64                 // the last id given out
	recent  []Event               // the last replayLen events, oldest first, for Last-Event-ID
	streams map[chan Event]string // SSE streams and their accounts' UIDs
	pushers map[int64]*pusher
}

// adminStreamReserve is how many of Config.MaxStreams only Administrators
// may open, so that other accounts together cannot keep one from watching.
const adminStreamReserve = 8

// errStreamLimit is a refused SSE stream: 429 for an account at its own
// limit, 503 when the service has no room.
func errStreamLimit(status int, resolution string) *Error {
	e := NewError(status, Msg{Key: "Base.EventSubscriptionLimitExceeded", Resolution: resolution})
	if status == http.StatusServiceUnavailable {
		e = e.WithHeader("Retry-After", "60")
	}
	return e
}

// replayLen is how many recent events a reconnecting SSE client can get
// back through Last-Event-ID: enough for a console that lost its
// connection for a minute during a grant storm.
const replayLen = 1024

// newBus numbers events from the start time in microseconds, not from 1,
// so ids keep increasing across daemon restarts (unless the clock goes
// back) and a client's Last-Event-ID from before a restart is not mistaken
// for one of this run's events.
func newBus(s *Service) *bus {
	start := s.now().UnixMicro()
	return &bus{s: s, first: start, next: start, streams: map[chan Event]string{}, pushers: map[int64]*pusher{}}
}

// Publish records ev in the EventLog and delivers it to SSE streams and
// push subscriptions. It never blocks on a slow consumer: a stream that
// cannot keep up loses events, a push queue that is full drops the oldest.
func (s *Service) Publish(ev Event) {
	ev.Time = s.now()
	b := s.bus
	b.mu.Lock()
	b.next++
	ev.ID = b.next
	b.mu.Unlock()
	s.metrics.events.Inc()
	s.appendEvent(ev)
	if s.cfg.OnEvent != nil {
		s.cfg.OnEvent(ev)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	// Publishers race between numbering and this point: keep recent in id
	// order so a replay never skips an event that was merely late.
	i := len(b.recent)
	for i > 0 && b.recent[i-1].ID > ev.ID {
		i--
	}
	b.recent = slices.Insert(b.recent, i, ev)
	if len(b.recent) > replayLen {
		b.recent = slices.Delete(b.recent, 0, len(b.recent)-replayLen)
	}
	for ch := range b.streams {
		select {
		case ch <- ev:
		default:
		}
	}
	for _, p := range b.pushers {
		p.enqueue(ev)
	}
}

// subscribe opens a stream for p. With after >= 0 it also returns the
// recent events with ids above after, taken under the same lock as the
// stream's registration so that nothing falls between the replay and the
// stream; gap reports that events after `after` were already dropped from
// the replay buffer. An account may hold MaxStreamsPerAccount streams and
// the service MaxStreams (the last adminStreamReserve for Administrators):
// past either, err is the Redfish refusal and nothing is opened.
func (b *bus) subscribe(p *Principal, after int64) (ch chan Event, replay []Event, gap bool, cancel func(), err error) {
	cfg := b.s.cfg
	b.mu.Lock()
	own := 0
	for _, uid := range b.streams {
		if uid == p.AccountUID {
			own++
		}
	}
	total := len(b.streams)
	limit := cfg.MaxStreams
	if p.Role != RoleAdministrator {
		limit = max(cfg.MaxStreams-adminStreamReserve, 1)
	}
	switch {
	case own >= cfg.MaxStreamsPerAccount:
		b.mu.Unlock()
		return nil, nil, false, nil, errStreamLimit(http.StatusTooManyRequests, fmt.Sprintf(
			"This account has %d open event streams, the most one account may have: close one first.",
			cfg.MaxStreamsPerAccount))
	case total >= limit:
		b.mu.Unlock()
		return nil, nil, false, nil, errStreamLimit(http.StatusServiceUnavailable, fmt.Sprintf(
			"The service has %d open event streams, the most it serves (the last %d of %d only for "+
				"Administrators): retry later.", total, adminStreamReserve, cfg.MaxStreams))
	}
	ch = make(chan Event, 64)
	b.streams[ch] = p.AccountUID
	if after >= 0 {
		if after < b.first || after > b.next {
			after = b.first // an id of an earlier run: all of this run is new
		}
		i, _ := slices.BinarySearchFunc(b.recent, after+1, func(e Event, id int64) int { return cmp.Compare(e.ID, id) })
		replay = slices.Clone(b.recent[i:])
		gap = i == 0 && len(b.recent) > 0 && b.recent[0].ID > after+1
	}
	b.mu.Unlock()
	return ch, replay, gap, func() {
		b.mu.Lock()
		delete(b.streams, ch)
		b.mu.Unlock()
	}, nil
}

func (b *bus) streamCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.streams)
}

// visible reports whether principal p may see ev.
func visible(p *Principal, ev Event) bool {
	if p.IsHost() {
		return ev.Host != nil && *ev.Host == *p.HostID
	}
	return true
}

// eventBody renders events as one Redfish Event resource.
func (s *Service) eventBody(id string, context string, evs ...Event) Obj {
	recs := make([]Obj, 0, len(evs))
	for i, ev := range evs {
		m := s.reg.Resolve(Msg{Key: ev.MessageKey, Args: ev.Args})
		r := Obj{
			"MemberId":        strconv.Itoa(i),
			"EventId":         strconv.FormatInt(ev.ID, 10),
			"EventType":       eventType(ev.MessageKey),
			"EventTimestamp":  ev.Time.Format(TimeFormat),
			"MessageId":       m.MessageID,
			"Message":         m.Message,
			"MessageArgs":     m.MessageArgs,
			"MessageSeverity": m.MessageSeverity,
		}
		if ev.Origin != "" {
			r["OriginOfCondition"] = Link(ev.Origin)
		}
		if ev.Resolution != "" {
			r["Resolution"] = ev.Resolution
		}
		recs = append(recs, r)
	}
	o := Obj{
		"@odata.type": "#Event.v1_13_0.Event",
		"Id":          id,
		"Name":        "Event",
		"Events":      recs,
	}
	if context != "" {
		o["Context"] = context
	}
	return o
}

// startFeeders starts a pusher for each stored subscription.
func (s *Service) startFeeders() {
	subs, err := s.store.Subscriptions(s.ctx)
	if err != nil {
		s.log.Error("loading event subscriptions", "err", err)
	}
	for _, sub := range subs {
		s.bus.startPusher(sub)
	}
}

// --- EventService resources ---

type subscriptionCreate struct {
	Destination      string   `json:"Destination" rf:"required"`
	Protocol         string   `json:"Protocol" rf:"required" enum:"Redfish"`
	Context          string   `json:"Context"`
	SubscriptionType string   `json:"SubscriptionType" enum:"RedfishEvent"`
	EventFormatType  string   `json:"EventFormatType" enum:"Event"`
	RegistryPrefixes []string `json:"RegistryPrefixes" enum:"Base|ResourceEvent|TaskEvent|Telemetry"`
	MessageIds       []string `json:"MessageIds"`
	ID               string   `json:"Id" rf:"readonly"`
	Name             string   `json:"Name" rf:"readonly"`
}

func subscriptionURI(id int64) string { return subscriptionsURI + "/" + strconv.FormatInt(id, 10) }

func (s *Service) eventRoutes() {
	s.Handle(http.MethodGet, EventServiceURI, PrivLogin, func(c echo.Context) error {
		es := s.eventService()
		if PrincipalOf(c).IsHost() {
			// Push subscriptions are for appliance operators; a host
			// account follows its own events over SSE.
			delete(es, "Subscriptions")
		}
		return s.WriteResource(c, http.StatusOK, es)
	})
	s.Handle(http.MethodGet, sseURI, PrivLogin, s.serveSSE)
	s.Handle(http.MethodGet, subscriptionsURI, PrivApplianceView, func(c echo.Context) error {
		subs, err := s.store.Subscriptions(c.Request().Context())
		if err != nil {
			return ErrInternal(err)
		}
		byURI := map[string]Subscription{}
		var uris []string
		for _, sub := range subs {
			u := subscriptionURI(sub.ID)
			uris = append(uris, u)
			byURI[u] = sub
		}
		return s.WriteCollection(c, Collection{
			ODataID: subscriptionsURI, ODataType: "#EventDestinationCollection.EventDestinationCollection",
			Name: "Event Subscriptions", Members: uris,
			Expand: func(uri string) (any, error) { return s.subscription(byURI[uri]), nil },
		})
	})
	s.Handle(http.MethodPost, subscriptionsURI, PrivConfigureManager|PrivConfigureComponents, s.createSubscription)
	s.Handle(http.MethodGet, subscriptionsURI+"/:id", PrivApplianceView, func(c echo.Context) error {
		sub, err := s.findSubscription(c)
		if err != nil {
			return err
		}
		return s.WriteResource(c, http.StatusOK, s.subscription(sub))
	})
	s.Handle(http.MethodDelete, subscriptionsURI+"/:id", PrivConfigureManager|PrivConfigureComponents, func(c echo.Context) error {
		sub, err := s.findSubscription(c)
		if err != nil {
			return err
		}
		if err := s.IfMatch(c, s.subscription(sub)); err != nil {
			return err
		}
		if _, err := s.store.DeleteSubscription(c.Request().Context(), sub.ID); err != nil {
			return ErrInternal(err)
		}
		s.bus.stopPusher(sub.ID)
		return s.NoContent(c)
	})
}

func (s *Service) eventService() Obj {
	return Obj{
		"@odata.id":                    EventServiceURI,
		"@odata.type":                  "#EventService.v1_12_0.EventService",
		"Id":                           "EventService",
		"Name":                         "Event Service",
		"ServiceEnabled":               true,
		"Status":                       Obj{"State": "Enabled", "Health": "OK"},
		"DeliveryRetryAttempts":        s.cfg.PushRetryAttempts,
		"DeliveryRetryIntervalSeconds": int(s.cfg.PushRetryInterval / time.Second),
		"EventFormatTypes":             []string{"Event"},
		"RegistryPrefixes":             []string{"Base", "ResourceEvent", "TaskEvent", "Telemetry"},
		"ServerSentEventUri":           sseURI,
		"SSEFilterPropertiesSupported": Obj{"EventFormatType": false, "MessageId": false, "MetricReportDefinition": false,
			"OriginResource": false, "RegistryPrefix": false, "ResourceType": false, "SubordinateResources": false},
		"Subscriptions": Link(subscriptionsURI),
	}
}

func (s *Service) subscription(sub Subscription) Obj {
	return Obj{
		"@odata.id":        subscriptionURI(sub.ID),
		"@odata.type":      "#EventDestination.v1_16_0.EventDestination",
		"Id":               strconv.FormatInt(sub.ID, 10),
		"Name":             "Event Subscription " + strconv.FormatInt(sub.ID, 10),
		"Destination":      sub.Destination,
		"Protocol":         sub.Protocol,
		"Context":          sub.Context,
		"SubscriptionType": "RedfishEvent",
		"EventFormatType":  "Event",
		"RegistryPrefixes": NonNil(sub.RegistryPrefixes),
		"MessageIds":       NonNil(sub.MessageIDs),
		"Status":           Obj{"State": "Enabled", "Health": "OK"},
	}
}

func (s *Service) findSubscription(c echo.Context) (Subscription, error) {
	id := c.Param("id")
	subs, err := s.store.Subscriptions(c.Request().Context())
	if err != nil {
		return Subscription{}, ErrInternal(err)
	}
	for _, sub := range subs {
		if strconv.FormatInt(sub.ID, 10) == id {
			return sub, nil
		}
	}
	return Subscription{}, ErrResourceNotFound("EventDestination", id)
}

// maxSubscriptions bounds push subscriptions.
const maxSubscriptions = 32

func (s *Service) createSubscription(c echo.Context) error {
	var req subscriptionCreate
	if err := s.Decode(c, &req); err != nil {
		return err
	}
	u, err := url.Parse(req.Destination)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return ErrPropertyValueFormat(req.Destination, "Destination")
	}
	ctx := c.Request().Context()
	subs, err := s.store.Subscriptions(ctx)
	if err != nil {
		return ErrInternal(err)
	}
	if len(subs) >= maxSubscriptions {
		return NewError(http.StatusConflict, M("Base.EventSubscriptionLimitExceeded"))
	}
	sub, err := s.store.CreateSubscription(ctx, Subscription{
		Destination: req.Destination, Context: req.Context, Protocol: req.Protocol,
		RegistryPrefixes: req.RegistryPrefixes, MessageIDs: req.MessageIds, Owner: PrincipalOf(c).User,
		OwnerUID: PrincipalOf(c).AccountUID,
	})
	if err != nil {
		return ErrInternal(err)
	}
	s.bus.startPusher(sub)
	return s.WriteCreated(c, subscriptionURI(sub.ID), s.subscription(sub))
}

// deleteOwnedSubscriptions removes the push subscriptions of a deleted
// account: they deliver with its authority, which is gone.
func (s *Service) DeleteOwnedSubscriptions(ctx context.Context, uid string) {
	subs, err := s.store.Subscriptions(ctx)
	if err != nil {
		s.log.Error("deleting a removed account's subscriptions", "err", err)
		return
	}
	for _, sub := range subs {
		if sub.OwnerUID != uid {
			continue
		}
		if _, err := s.store.DeleteSubscription(ctx, sub.ID); err != nil {
			s.log.Error("deleting a removed account's subscription", "subscription", sub.ID, "err", err)
			continue
		}
		s.bus.stopPusher(sub.ID)
		s.log.Info("subscription of a deleted account removed", "subscription", sub.ID, "owner", sub.Owner)
		s.Publish(Event{MessageKey: MsgResourceRemoved, Origin: subscriptionURI(sub.ID)})
	}
}

// serveSSE streams events as text/event-stream until the client leaves,
// its principal changes (account deleted, disabled, renamed, given another
// role or host, password changed, session ended: Authenticator.Watch) or
// the service stops. Each message is one Event resource; its SSE id is the
// event id.
//
// A client that reconnects with Last-Event-ID gets the events it missed
// first, as far as the last replayLen events reach; if some were already
// dropped the stream says so in a comment line. An id from before a
// restart (larger than any of this run's) replays everything kept.
func (s *Service) serveSSE(c echo.Context) error {
	p := PrincipalOf(c)
	after := int64(-1)
	if v := c.Request().Header.Get("Last-Event-ID"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return NewError(http.StatusBadRequest, M("Base.HeaderInvalid", "Last-Event-ID: "+v))
		}
		after = n
	}
	ch, replay, gap, cancel, err := s.bus.subscribe(p, after)
	if err != nil {
		return err
	}
	defer cancel()
	alive, stop := s.auth.Watch(c.Request().Context(), p)
	defer stop()
	res := c.Response()
	res.Header().Set("Content-Type", "text/event-stream")
	res.Header().Set("Cache-Control", "no-cache")
	res.WriteHeader(http.StatusOK)
	// A comment line first, so clients see the stream is open.
	if _, err := fmt.Fprint(res, ": cxlpool event stream\n\n"); err != nil {
		return nil
	}
	if gap {
		if _, err := fmt.Fprint(res, ": some events after Last-Event-ID are no longer kept\n\n"); err != nil {
			return nil
		}
	}
	for _, ev := range replay {
		if err := s.writeSSE(res, p, ev); err != nil {
			return nil
		}
	}
	res.Flush()
	keepalive := time.NewTicker(30 * time.Second)
	defer keepalive.Stop()
	send := func(ev Event) bool {
		if len(replay) > 0 && ev.ID <= replay[len(replay)-1].ID {
			return true // already sent in the replay
		}
		if !s.auth.Valid(p) {
			return false // checked again per event: never one after the principal changed
		}
		return s.writeSSE(res, p, ev) == nil
	}
	for {
		select {
		case <-alive.Done():
			if c.Request().Context().Err() == nil {
				// The principal is gone: say so and end the stream.
				_, _ = fmt.Fprint(res, ": the stream's credentials are no longer valid\n\n")
				res.Flush()
			}
			return nil
		case <-s.streams:
			// The service stops: what was published before goes out first
			// (a clean stop's last events reach the client).
			for {
				select {
				case ev := <-ch:
					if !send(ev) {
						return nil
					}
				default:
					res.Flush()
					return nil
				}
			}
		case <-keepalive.C:
			if _, err := fmt.Fprint(res, ": keepalive\n\n"); err != nil {
				return nil
			}
			res.Flush()
		case ev := <-ch:
			if !send(ev) {
				return nil
			}
			res.Flush()
		}
	}
}

// writeSSE writes ev as one SSE message if p may see it.
func (s *Service) writeSSE(w io.Writer, p *Principal, ev Event) error {
	if !visible(p, ev) {
		return nil
	}
	id := strconv.FormatInt(ev.ID, 10)
	b, err := EncodeJSON(s.eventBody(id, "", ev))
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "id: %s\ndata: %s\n\n", id, b)
	return err
}

// --- push delivery ---

// pusher delivers one subscription's events in order, retrying each
// failed POST with a doubling interval up to the attempt limit.
type pusher struct {
	sub  Subscription
	wake chan struct{}
	stop chan struct{}

	mu    sync.Mutex
	queue []Event
}

const maxPushQueue = 256

func (b *bus) startPusher(sub Subscription) {
	p := &pusher{sub: sub, wake: make(chan struct{}, 1), stop: make(chan struct{})}
	b.mu.Lock()
	b.pushers[sub.ID] = p
	b.mu.Unlock()
	b.s.bg.Add(1)
	go func() {
		defer b.s.bg.Done()
		b.s.runPusher(p)
	}()
}

func (b *bus) stopPusher(id int64) {
	b.mu.Lock()
	p := b.pushers[id]
	delete(b.pushers, id)
	b.mu.Unlock()
	if p != nil {
		close(p.stop)
	}
}

func (p *pusher) enqueue(ev Event) {
	if !p.wants(ev) {
		return
	}
	p.mu.Lock()
	if len(p.queue) >= maxPushQueue {
		p.queue = p.queue[1:]
	}
	p.queue = append(p.queue, ev)
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// wants applies the subscription's RegistryPrefixes and MessageIds
// filters (empty means everything).
func (p *pusher) wants(ev Event) bool {
	prefix, name, _ := strings.Cut(ev.MessageKey, ".")
	if len(p.sub.RegistryPrefixes) > 0 && !slices.Contains(p.sub.RegistryPrefixes, prefix) {
		return false
	}
	if len(p.sub.MessageIDs) > 0 && !slices.ContainsFunc(p.sub.MessageIDs, func(id string) bool {
		return id == name || strings.HasPrefix(id, prefix+".") && strings.HasSuffix(id, "."+name)
	}) {
		return false
	}
	return true
}

func (s *Service) runPusher(p *pusher) {
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-p.stop:
			return
		case <-p.wake:
		}
		for {
			p.mu.Lock()
			if len(p.queue) == 0 {
				p.mu.Unlock()
				break
			}
			ev := p.queue[0]
			p.queue = p.queue[1:]
			p.mu.Unlock()
			if !s.deliver(p, ev) {
				return
			}
		}
	}
}

// deliver POSTs one event, retrying; it returns false when the pusher
// must stop.
func (s *Service) deliver(p *pusher, ev Event) bool {
	body, err := EncodeJSON(s.eventBody(strconv.FormatInt(ev.ID, 10), p.sub.Context, ev))
	if err != nil {
		s.log.Error("encoding event", "err", err)
		return true
	}
	wait := s.cfg.PushRetryInterval
	for attempt := 1; ; attempt++ {
		err := s.post(p.sub.Destination, body)
		if err == nil {
			return true
		}
		if attempt >= s.cfg.PushRetryAttempts {
			s.log.Warn("event delivery failed; dropping event", "subscription", p.sub.ID,
				"destination", p.sub.Destination, "event", ev.ID, "err", err)
			return true
		}
		t := time.NewTimer(wait)
		select {
		case <-s.ctx.Done():
			t.Stop()
			return false
		case <-p.stop:
			t.Stop()
			return false
		case <-t.C:
		}
		wait *= 2
	}
}

func (s *Service) post(dest string, body []byte) error {
	req, err := http.NewRequestWithContext(s.ctx, http.MethodPost, dest, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("OData-Version", "4.0")
	resp, err := s.cfg.PushClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		return fmt.Errorf("destination answered %s", resp.Status)
	}
	return nil
}
