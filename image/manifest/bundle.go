package manifest

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// A bundle is the unit of update and the content of a boot slot: a ustar
// archive whose first member is the manifest ("manifest.json"), whose
// second is its signature ("manifest.sig", 64 raw bytes), followed by the
// parts in manifest order. Putting the signed manifest first lets a reader
// refuse an unsigned or foreign image before it has consumed (or written)
// anything else, and check every part while it streams.
const (
	ManifestName  = "manifest.json"
	SignatureName = "manifest.sig"
)

// maxManifest bounds the manifest and signature members.
const maxManifest = 1 << 20

// BundlePart is one part's content for WriteBundle.
type BundlePart struct {
	Name string
	Path string // read from this file
}

// WriteBundle writes a signed bundle to w. The parts must match the
// manifest's list (the manifest is usually built from HashFile of the
// same files). Headers are deterministic: the manifest's Created time,
// owner 0, mode 0644.
func WriteBundle(w io.Writer, manifest, sig []byte, m *Manifest, files []BundlePart) error {
	if len(files) != len(m.Parts) {
		return fmt.Errorf("manifest: bundle has %d files, manifest lists %d parts", len(files), len(m.Parts))
	}
	tw := tar.NewWriter(w)
	mod := m.Created.UTC().Truncate(time.Second)
	add := func(name string, size int64, r io.Reader) error {
		hdr := &tar.Header{Name: name, Mode: 0o644, Size: size, ModTime: mod, Typeflag: tar.TypeReg, Format: tar.FormatUSTAR}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("manifest: bundle %s: %w", name, err)
		}
		if _, err := io.Copy(tw, r); err != nil {
			return fmt.Errorf("manifest: bundle %s: %w", name, err)
		}
		return nil
	}
	if err := add(ManifestName, int64(len(manifest)), bytes.NewReader(manifest)); err != nil {
		return err
	}
	if err := add(SignatureName, int64(len(sig)), bytes.NewReader(sig)); err != nil {
		return err
	}
	for i, f := range files {
		p := m.Parts[i]
		if f.Name != p.Name {
			return fmt.Errorf("manifest: bundle file %d is %s, manifest lists %s", i, f.Name, p.Name)
		}
		fh, err := os.Open(f.Path)
		if err != nil {
			return fmt.Errorf("manifest: bundle: %w", err)
		}
		err = add(p.Name, p.Size, io.LimitReader(fh, p.Size))
		fh.Close()
		if err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("manifest: bundle: %w", err)
	}
	return nil
}

// VerifyOptions tunes ReadBundle.
type VerifyOptions struct {
	// MinSecurityVersion refuses images below it (ErrRollback).
	MinSecurityVersion uint64
	// OnManifest is called once the signature verified, before any part
	// is read; an error stops the read (e.g. "does not fit the slot").
	OnManifest func(*Manifest) error
	// OnPart receives each part's content as it streams. The content is
	// unverified until ReadBundle returns nil; OnPart may stop early (the
	// rest is drained and hashed).
	OnPart func(p Part, r io.Reader) error
}

// ReadBundle reads a bundle from r, verifying the signature first and then
// every part's size and SHA-256 as it streams. It returns the verified
// manifest. Errors wrap ErrUnsigned, ErrBadSig, ErrRollback, ErrCorrupt,
// ErrTruncated, ErrUnknownPart or ErrFormat.
func ReadBundle(r io.Reader, keys Keys, opt VerifyOptions) (*Manifest, error) {
	tr := tar.NewReader(r)
	next := func(want string) (*tar.Header, error) {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			if want == "" {
				return nil, fmt.Errorf("manifest: bundle ends before its first member: %w", ErrTruncated)
			}
			return nil, fmt.Errorf("manifest: bundle ends before %s: %w", want, ErrTruncated)
		}
		if err != nil {
			return nil, fmt.Errorf("manifest: bundle: %w: %w", ErrFormat, err)
		}
		if hdr.Typeflag != tar.TypeReg {
			return nil, fmt.Errorf("manifest: bundle member %s is not a regular file: %w", hdr.Name, ErrFormat)
		}
		return hdr, nil
	}
	readSmall := func(hdr *tar.Header) ([]byte, error) {
		if hdr.Size > maxManifest {
			return nil, fmt.Errorf("manifest: bundle member %s is %d bytes: %w", hdr.Name, hdr.Size, ErrFormat)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, fmt.Errorf("manifest: bundle member %s: %w: %w", hdr.Name, ErrTruncated, err)
		}
		return b, nil
	}
	hdr, err := next(ManifestName)
	if err != nil {
		return nil, err
	}
	if hdr.Name != ManifestName {
		return nil, fmt.Errorf("manifest: bundle starts with %q, want %s: %w", hdr.Name, ManifestName, ErrFormat)
	}
	mb, err := readSmall(hdr)
	if err != nil {
		return nil, err
	}
	hdr, err = next(SignatureName)
	if err != nil {
		return nil, err
	}
	if hdr.Name != SignatureName {
		return nil, fmt.Errorf("manifest: bundle has no %s: %w", SignatureName, ErrUnsigned)
	}
	sig, err := readSmall(hdr)
	if err != nil {
		return nil, err
	}
	m, err := Verify(mb, sig, keys)
	if err != nil {
		return nil, err
	}
	if m.SecurityVersion < opt.MinSecurityVersion {
		return nil, fmt.Errorf("manifest: version %s has security version %d, the box requires at least %d: %w",
			m.Version, m.SecurityVersion, opt.MinSecurityVersion, ErrRollback)
	}
	if opt.OnManifest != nil {
		if err := opt.OnManifest(m); err != nil {
			return nil, err
		}
	}
	for _, p := range m.Parts {
		hdr, err := next(p.Name)
		if err != nil {
			return nil, err
		}
		if hdr.Name != p.Name {
			return nil, fmt.Errorf("manifest: bundle member %q, want %s: %w", hdr.Name, p.Name, ErrUnknownPart)
		}
		if hdr.Size != p.Size {
			return nil, fmt.Errorf("manifest: part %s is %d bytes, manifest says %d: %w", p.Name, hdr.Size, p.Size, ErrCorrupt)
		}
		h := sha256.New()
		body := io.TeeReader(tr, h)
		if opt.OnPart != nil {
			if err := opt.OnPart(p, body); err != nil {
				return nil, err
			}
		}
		if _, err := io.Copy(io.Discard, body); err != nil {
			return nil, fmt.Errorf("manifest: part %s: %w: %w", p.Name, ErrTruncated, err)
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != p.SHA256 {
			return nil, fmt.Errorf("manifest: part %s: sha256 %s, manifest says %s: %w", p.Name, got, p.SHA256, ErrCorrupt)
		}
	}
	if hdr, err := tr.Next(); err == nil {
		return nil, fmt.Errorf("manifest: bundle member %q after the last part: %w", hdr.Name, ErrUnknownPart)
	} else if !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("manifest: bundle end: %w: %w", ErrTruncated, err)
	}
	return m, nil
}
