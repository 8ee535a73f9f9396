package stream

import (
	"net/http/httptest"
	"testing"

	"github.com/gorilla/websocket"
)

// TestHubCloseEndsSubscribersAndHandlers: Close ends every subscription
// (a connected client sees the connection close), later subscriptions
// start closed, and publishing afterwards reaches nobody.
func TestHubCloseEndsSubscribersAndHandlers(t *testing.T) {
	hub := NewHub(4)
	srv := httptest.NewServer(NewHandler(hub, HandlerConfig{}))
	defer srv.Close()
	c, _, err := websocket.DefaultDialer.Dial(wsURL(srv), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hub.Publish(AppendTopK(nil, TopK{Header: Header{Seq: 1}}))
	if _, _, err := c.ReadMessage(); err != nil { // subscribed and served
		t.Fatal(err)
	}
	direct := hub.Subscribe()
	hub.Close()
	n := 0
	for range direct.C() { // the retained frame, then the end
		n++
	}
	if n != 1 {
		t.Errorf("frames before the end: got %d, want 1 (the retained one)", n)
	}
	if _, _, err := c.ReadMessage(); err == nil {
		t.Error("client still connected after Close")
	}
	late := hub.Subscribe()
	if _, ok := <-late.C(); ok {
		t.Error("subscription made after Close is open")
	}
	late.Close() // idempotent on a closed hub
	hub.Publish(AppendTopK(nil, TopK{Header: Header{Seq: 2}}))
	if st := hub.Stats(); st.Clients != 0 {
		t.Errorf("clients after Close: got %d, want 0", st.Clients)
	}
}
