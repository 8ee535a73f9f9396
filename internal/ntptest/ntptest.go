// Package ntptest is an NTP server for tests: it answers NTPv4 client
// requests (mode 3) on a UDP socket the test opens, with its clock the
// local one plus a skew, as a stratum-2 server synchronised a moment ago.
// It is only what a client needs to compute an offset; it never serves
// anything but the socket it is given.
package ntptest

import (
	"encoding/binary"
	"net"
	"sync"
	"time"
)

// ntpEpochOffset is the seconds from 1900-01-01 (NTP era 0) to 1970.
const ntpEpochOffset = 2208988800

// Server answers on one socket.
type Server struct {
	conn net.PacketConn
	skew time.Duration
	done chan struct{}

	mu    sync.Mutex
	asked []net.Addr
}

// Serve answers requests on conn until Close, its clock ahead of the
// local one by skew.
func Serve(conn net.PacketConn, skew time.Duration) *Server {
	s := &Server{conn: conn, skew: skew, done: make(chan struct{})}
	go s.loop()
	return s
}

func (s *Server) loop() {
	defer close(s.done)
	buf := make([]byte, 512)
	for {
		n, from, err := s.conn.ReadFrom(buf)
		if err != nil {
			return
		}
		if n < 48 || buf[0]&7 != 3 {
			continue
		}
		recv := time.Now().Add(s.skew)
		reply := make([]byte, 48)
		reply[0] = 0<<6 | 4<<3 | 4 // no leap warning, version 4, server
		reply[1] = 2               // stratum
		reply[2] = buf[2]          // poll
		reply[3] = 0xEC            // precision 2^-20
		copy(reply[12:16], []byte{127, 0, 0, 1})
		put(reply[16:], recv.Add(-time.Minute)) // reference: synchronised a minute ago
		copy(reply[24:32], buf[40:48])          // origin = the request's transmit
		put(reply[32:], recv)
		put(reply[40:], time.Now().Add(s.skew))
		s.mu.Lock()
		s.asked = append(s.asked, from)
		s.mu.Unlock()
		_, _ = s.conn.WriteTo(reply, from)
	}
}

// put encodes t as a 64-bit NTP timestamp.
func put(b []byte, t time.Time) {
	binary.BigEndian.PutUint32(b, uint32(t.Unix()+ntpEpochOffset))
	binary.BigEndian.PutUint32(b[4:], uint32(uint64(t.Nanosecond())<<32/1e9))
}

// Asked returns the addresses of the requests answered so far.
func (s *Server) Asked() []net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]net.Addr(nil), s.asked...)
}

// Close stops the server and closes its socket.
func (s *Server) Close() error {
	err := s.conn.Close()
	<-s.done
	return err
}
