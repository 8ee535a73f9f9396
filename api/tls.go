package api

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// TLS files inside DataDir/tls. An operator may replace them with a
// certificate of their own; the service uses whatever pair is there.
const (
	tlsDir   = "tls"
	certFile = "cert.pem"
	keyFile  = "key.pem"
)

// Serve serves the API on addr until ctx ends, then shuts down gracefully
// (in-flight requests finish, event streams end). It serves TLS with the
// certificate in DataDir/tls, generating a self-signed ECDSA one on first
// start, unless plainHTTP is set (development and tests).
func (s *Server) Serve(ctx context.Context, addr string, plainHTTP bool) error {
	srv := &http.Server{
		Handler:           s.echo,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          nil,
	}
	if !plainHTTP {
		cert, err := s.loadOrCreateCert()
		if err != nil {
			return err
		}
		srv.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("api: listen: %w", err)
	}
	srv.RegisterOnShutdown(s.stopStreams)
	errc := make(chan error, 1)
	go func() {
		if plainHTTP {
			errc <- srv.Serve(ln)
		} else {
			errc <- srv.ServeTLS(ln, "", "")
		}
	}()
	select {
	case err := <-errc:
		return fmt.Errorf("api: serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err = srv.Shutdown(sctx)
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	if err != nil {
		return fmt.Errorf("api: shutdown: %w", err)
	}
	return nil
}

// CertPath is where the TLS certificate is (or will be) kept.
func (s *Server) CertPath() string { return filepath.Join(s.cfg.DataDir, tlsDir, certFile) }

func (s *Server) loadOrCreateCert() (tls.Certificate, error) {
	dir := filepath.Join(s.cfg.DataDir, tlsDir)
	cp, kp := filepath.Join(dir, certFile), filepath.Join(dir, keyFile)
	if _, err := os.Stat(cp); err == nil {
		cert, err := tls.LoadX509KeyPair(cp, kp)
		if err != nil {
			return cert, fmt.Errorf("api: tls certificate in %s: %w", dir, err)
		}
		return cert, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return tls.Certificate{}, fmt.Errorf("api: tls: %w", err)
	}
	certPEM, keyPEM, err := selfSigned(s.now())
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("api: tls: %w", err)
	}
	if err := os.WriteFile(kp, keyPEM, 0o600); err != nil {
		return tls.Certificate{}, fmt.Errorf("api: tls: %w", err)
	}
	if err := os.WriteFile(cp, certPEM, 0o644); err != nil {
		return tls.Certificate{}, fmt.Errorf("api: tls: %w", err)
	}
	s.log.Info("generated a self-signed TLS certificate", "path", cp)
	return tls.X509KeyPair(certPEM, keyPEM)
}

// selfSigned makes a P-256 certificate for localhost and the host name,
// valid for ten years (the box has no one to renew it).
func selfSigned(now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		return nil, nil, err
	}
	names := []string{"localhost"}
	if h, err := os.Hostname(); err == nil && h != "" && h != "localhost" {
		names = append(names, h)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: names[len(names)-1], Organization: []string{"cxlpool"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		DNSNames:              names,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}
