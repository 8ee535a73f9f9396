// Package manifest describes a cxlpool image and proves where it came from:
// a JSON manifest lists every part (name, size, SHA-256) with the image's
// version and security version, and an ed25519 signature covers the exact
// manifest bytes. The same manifest/signature pair travels inside an update
// bundle (see Bundle) and beside a disk image (a detached .sig file), so
// the builder, the flasher and the updater share one check.
//
// Keys are PEM files: "PRIVATE KEY" (PKCS #8) for signing and "PUBLIC KEY"
// (PKIX) for verifying, as written by crypto/x509 and openssl.
package manifest

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// Format is the manifest format this package writes and accepts.
const Format = "cxlpool-image/1"

// Sentinel errors; every check wraps one of them so callers (the flasher,
// the updater, the API) can tell the reasons apart.
var (
	ErrUnsigned    = errors.New("image is not signed")
	ErrBadSig      = errors.New("signature does not verify with any trusted key")
	ErrCorrupt     = errors.New("image content does not match its manifest")
	ErrTruncated   = errors.New("image is truncated")
	ErrFormat      = errors.New("not a cxlpool image")
	ErrRollback    = errors.New("image is older than allowed")
	ErrNoKey       = errors.New("no trusted key")
	ErrKeyFile     = errors.New("bad key file")
	ErrTooLarge    = errors.New("image too large")
	ErrUnknownPart = errors.New("unexpected part")
)

// Part is one file of an image.
type Part struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Manifest describes one build.
type Manifest struct {
	Format  string `json:"format"`
	Product string `json:"product"`
	// Version is the human version ("0.3.1" or a git describe).
	Version string `json:"version"`
	// SecurityVersion is the rollback index: an updater refuses an image
	// whose SecurityVersion is below the running box's minimum.
	SecurityVersion uint64    `json:"security_version"`
	Created         time.Time `json:"created"`
	// Kernel is the kernel release inside ("6.1.0-57-amd64").
	Kernel string `json:"kernel,omitempty"`
	// Toolchain versions, for the record.
	Go    string `json:"go,omitempty"`
	URoot string `json:"u_root,omitempty"`
	// KeyID names the signing key (KeyID of its public key).
	KeyID string `json:"key_id"`
	Parts []Part `json:"parts"`
}

// Part returns the part called name.
func (m *Manifest) Part(name string) (Part, bool) {
	for _, p := range m.Parts {
		if p.Name == name {
			return p, true
		}
	}
	return Part{}, false
}

// Marshal returns the manifest's canonical bytes (indented JSON with a
// trailing newline): the bytes that are signed.
func (m *Manifest) Marshal() ([]byte, error) {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	return append(b, '\n'), nil
}

// Parse decodes manifest bytes and checks their shape (not the signature).
func Parse(b []byte) (*Manifest, error) {
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("manifest: %w: %w", ErrFormat, err)
	}
	if m.Format != Format {
		return nil, fmt.Errorf("manifest: format %q, want %q: %w", m.Format, Format, ErrFormat)
	}
	seen := map[string]bool{}
	for _, p := range m.Parts {
		if p.Name == "" || filepath.Base(p.Name) != p.Name || seen[p.Name] {
			return nil, fmt.Errorf("manifest: part name %q: %w", p.Name, ErrFormat)
		}
		seen[p.Name] = true
		if p.Size < 0 {
			return nil, fmt.Errorf("manifest: part %s: negative size: %w", p.Name, ErrFormat)
		}
		if h, err := hex.DecodeString(p.SHA256); err != nil || len(h) != sha256.Size {
			return nil, fmt.Errorf("manifest: part %s: bad sha256 %q: %w", p.Name, p.SHA256, ErrFormat)
		}
	}
	return &m, nil
}

// Keys is the set of trusted public keys, by KeyID.
type Keys map[string]ed25519.PublicKey

// Add trusts pub.
func (k Keys) Add(pub ed25519.PublicKey) { k[KeyID(pub)] = pub }

// KeyID is the first 8 bytes of SHA-256 of the raw public key, in hex.
func KeyID(pub ed25519.PublicKey) string {
	s := sha256.Sum256(pub)
	return hex.EncodeToString(s[:8])
}

// Sign fills m.KeyID, marshals m and signs the bytes. It returns the
// manifest bytes and the 64-byte signature.
func Sign(m *Manifest, priv ed25519.PrivateKey) (manifest, sig []byte, err error) {
	m.KeyID = KeyID(priv.Public().(ed25519.PublicKey))
	if m.Format == "" {
		m.Format = Format
	}
	b, err := m.Marshal()
	if err != nil {
		return nil, nil, err
	}
	return b, ed25519.Sign(priv, b), nil
}

// Verify checks sig over the manifest bytes with the trusted keys and
// returns the parsed manifest.
func Verify(manifest, sig []byte, keys Keys) (*Manifest, error) {
	if len(keys) == 0 {
		return nil, fmt.Errorf("manifest: %w", ErrNoKey)
	}
	if len(sig) == 0 {
		return nil, fmt.Errorf("manifest: %w", ErrUnsigned)
	}
	if len(sig) != ed25519.SignatureSize {
		return nil, fmt.Errorf("manifest: signature is %d bytes, want %d: %w", len(sig), ed25519.SignatureSize, ErrBadSig)
	}
	m, err := Parse(manifest)
	if err != nil {
		return nil, err
	}
	// Try the named key first, then every key: a renamed key file must not
	// lock an owner out, and an unknown KeyID is no reason to accept.
	if pub, ok := keys[m.KeyID]; ok && ed25519.Verify(pub, manifest, sig) {
		return m, nil
	}
	for _, pub := range keys {
		if ed25519.Verify(pub, manifest, sig) {
			return m, nil
		}
	}
	return nil, fmt.Errorf("manifest: key %s: %w", m.KeyID, ErrBadSig)
}

// HashReader reads r to the end and returns its size and SHA-256 in hex.
func HashReader(r io.Reader) (int64, string, error) {
	h := sha256.New()
	n, err := io.Copy(h, r)
	if err != nil {
		return n, "", err
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

// HashFile returns the Part describing the file at path, named name.
func HashFile(name, path string) (Part, error) {
	f, err := os.Open(path)
	if err != nil {
		return Part{}, fmt.Errorf("manifest: %w", err)
	}
	defer f.Close()
	n, sum, err := HashReader(f)
	if err != nil {
		return Part{}, fmt.Errorf("manifest: hash %s: %w", path, err)
	}
	return Part{Name: name, Size: n, SHA256: sum}, nil
}

// GenerateKey returns a new ed25519 key pair.
func GenerateKey() (ed25519.PublicKey, ed25519.PrivateKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("manifest: generate key: %w", err)
	}
	return pub, priv, nil
}

// MarshalPrivateKey returns priv as a PKCS #8 PEM block.
func MarshalPrivateKey(priv ed25519.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// MarshalPublicKey returns pub as a PKIX PEM block.
func MarshalPublicKey(pub ed25519.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// ParsePrivateKey reads a PKCS #8 PEM ed25519 private key.
func ParsePrivateKey(b []byte) (ed25519.PrivateKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("manifest: want a PEM \"PRIVATE KEY\" block: %w", ErrKeyFile)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("manifest: %w: %w", ErrKeyFile, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("manifest: private key is %T, want ed25519: %w", k, ErrKeyFile)
	}
	return priv, nil
}

// ParsePublicKeys reads every PKIX PEM ed25519 public key in b.
func ParsePublicKeys(b []byte) (Keys, error) {
	keys := Keys{}
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "PUBLIC KEY" {
			continue
		}
		k, err := x509.ParsePKIXPublicKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("manifest: %w: %w", ErrKeyFile, err)
		}
		pub, ok := k.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("manifest: public key is %T, want ed25519: %w", k, ErrKeyFile)
		}
		keys.Add(pub)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("manifest: no PEM \"PUBLIC KEY\" block: %w", ErrKeyFile)
	}
	return keys, nil
}

// LoadPublicKeys reads the trusted keys from a PEM file, or from every
// *.pub/*.pem file when path is a directory.
func LoadPublicKeys(path string) (Keys, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("manifest: trusted keys: %w", err)
	}
	files := []string{path}
	if fi.IsDir() {
		files = nil
		for _, pat := range []string{"*.pub", "*.pem"} {
			m, _ := filepath.Glob(filepath.Join(path, pat))
			files = append(files, m...)
		}
	}
	keys := Keys{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("manifest: trusted keys: %w", err)
		}
		ks, err := ParsePublicKeys(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		for id, k := range ks {
			keys[id] = k
		}
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("manifest: no keys in %s: %w", path, ErrNoKey)
	}
	return keys, nil
}

// KeySource says where a signing key came from, for the build's report.
type KeySource struct {
	Path      string
	Generated bool // a development key was created just now
	FromEnv   bool // named by the environment (IMAGE_SIGNING_KEY)
}

// LoadOrCreateSigningKey reads the private key at envPath when it is set;
// otherwise it uses (and on first use creates, 0600) the development key
// at devPath.
func LoadOrCreateSigningKey(envPath, devPath string) (ed25519.PrivateKey, KeySource, error) {
	if envPath != "" {
		b, err := os.ReadFile(envPath)
		if err != nil {
			return nil, KeySource{}, fmt.Errorf("manifest: signing key: %w", err)
		}
		k, err := ParsePrivateKey(b)
		if err != nil {
			return nil, KeySource{}, fmt.Errorf("%s: %w", envPath, err)
		}
		return k, KeySource{Path: envPath, FromEnv: true}, nil
	}
	if b, err := os.ReadFile(devPath); err == nil {
		k, err := ParsePrivateKey(b)
		if err != nil {
			return nil, KeySource{}, fmt.Errorf("%s: %w", devPath, err)
		}
		return k, KeySource{Path: devPath}, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, KeySource{}, fmt.Errorf("manifest: signing key: %w", err)
	}
	_, priv, err := GenerateKey()
	if err != nil {
		return nil, KeySource{}, err
	}
	b, err := MarshalPrivateKey(priv)
	if err != nil {
		return nil, KeySource{}, err
	}
	if err := os.MkdirAll(filepath.Dir(devPath), 0o700); err != nil {
		return nil, KeySource{}, fmt.Errorf("manifest: signing key: %w", err)
	}
	if err := os.WriteFile(devPath, b, 0o600); err != nil {
		return nil, KeySource{}, fmt.Errorf("manifest: signing key: %w", err)
	}
	return priv, KeySource{Path: devPath, Generated: true}, nil
}
