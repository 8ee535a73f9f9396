package stream

import (
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// BenchmarkFanOutLag publishes 4 KiB heatmap frames (a 1 TiB pool at
// 256 MiB cells) at 10 frames/s to 100 WebSocket clients over loopback and
// reports the publish→receive lag percentiles over every delivery. One op
// is one frame (100 ms), so -benchtime=1x takes a tenth of a second.
func BenchmarkFanOutLag(b *testing.B) {
	const clients, rate = 100, 10
	hub := NewHub(16)
	srv := httptest.NewServer(NewHandler(hub, HandlerConfig{}))
	defer srv.Close()

	var mu sync.Mutex
	var lags []time.Duration
	var wg sync.WaitGroup
	conns := make([]*websocket.Conn, clients)
	for i := range conns {
		c, _, err := websocket.DefaultDialer.Dial(wsURL(srv), nil)
		if err != nil {
			b.Fatal(err)
		}
		conns[i] = c
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for {
				_, msg, err := c.ReadMessage()
				if err != nil {
					break
				}
				now := time.Now()
				if hd, err := DecodeHeader(msg); err == nil {
					mine = append(mine, now.Sub(hd.Time))
				}
			}
			mu.Lock()
			lags = append(lags, mine...)
			mu.Unlock()
		}()
	}
	for hub.Stats().Clients < clients {
		time.Sleep(time.Millisecond)
	}
	cells := make([]uint8, 4096)
	tick := time.NewTicker(time.Second / rate)
	defer tick.Stop()
	frames := 0
	for b.Loop() {
		<-tick.C
		frames++
		hub.Publish(AppendHeatmap(nil, Heatmap{Header: Header{Seq: uint32(frames), Time: time.Now()}, CellShift: 28, Cells: cells}))
	}
	// Let the last frame arrive, then hang up and collect.
	time.Sleep(100 * time.Millisecond)
	for _, c := range conns {
		c.Close()
	}
	wg.Wait()
	if len(lags) == 0 {
		b.Fatal("no frames received")
	}
	slices.Sort(lags)
	pct := func(p float64) float64 { return float64(lags[int(p*float64(len(lags)-1))].Microseconds()) }
	b.ReportMetric(pct(0.50), "p50-lag-µs")
	b.ReportMetric(pct(0.99), "p99-lag-µs")
	b.ReportMetric(float64(lags[len(lags)-1].Microseconds()), "max-lag-µs")
	b.ReportMetric(float64(len(lags))/float64(frames*clients), "delivered-fraction")
	b.ReportMetric(float64(hub.Stats().Dropped), "dropped")
}
