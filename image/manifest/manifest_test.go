package manifest

import (
	"archive/tar"
	"bytes"
	"crypto/ed25519"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// fixedKey is a deterministic key so fuzz seeds stay valid across runs.
func fixedKey() ed25519.PrivateKey {
	return ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))
}

// makeBundle builds a signed bundle of two parts with security version sv.
func makeBundle(t testing.TB, priv ed25519.PrivateKey, sv uint64) []byte {
	t.Helper()
	dir := t.TempDir()
	files := []BundlePart{{Name: "vmlinux.gz", Path: filepath.Join(dir, "k")}, {Name: "initramfs.cpio.gz", Path: filepath.Join(dir, "i")}}
	m := &Manifest{Product: "cxlpool", Version: "1.2.3", SecurityVersion: sv, Created: time.Unix(1700000000, 0).UTC()}
	for i, f := range files {
		if err := os.WriteFile(f.Path, bytes.Repeat([]byte{byte('a' + i)}, 3000+i*700), 0o644); err != nil {
			t.Fatal(err)
		}
		p, err := HashFile(f.Name, f.Path)
		if err != nil {
			t.Fatal(err)
		}
		m.Parts = append(m.Parts, p)
	}
	mb, sig, err := Sign(m, priv)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteBundle(&buf, mb, sig, m, files); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func keysOf(priv ed25519.PrivateKey) Keys {
	k := Keys{}
	k.Add(priv.Public().(ed25519.PublicKey))
	return k
}

// rewrite rebuilds a bundle's tar stream through edit, which may change or
// drop members.
func rewrite(t *testing.T, b []byte, edit func(h *tar.Header, body []byte) (*tar.Header, []byte)) []byte {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(b))
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		h, body = edit(h, body)
		if h == nil {
			continue
		}
		h.Size = int64(len(body))
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write(body)
	}
	tw.Close()
	return out.Bytes()
}

func TestReadBundle(t *testing.T) {
	priv := fixedKey()
	good := makeBundle(t, priv, 5)
	_, other, _ := GenerateKey()
	tests := []struct {
		name  string
		b     []byte
		keys  Keys
		minSV uint64
		want  error
	}{
		{"good", good, keysOf(priv), 5, nil},
		{"rollback", good, keysOf(priv), 6, ErrRollback},
		{"foreign key", good, keysOf(other), 0, ErrBadSig},
		{"no keys", good, Keys{}, 0, ErrNoKey},
		{"empty", nil, keysOf(priv), 0, ErrTruncated},
		{"truncated in part", good[:len(good)/2], keysOf(priv), 0, ErrTruncated},
		{"truncated after manifest", good[:1024], keysOf(priv), 0, ErrTruncated},
		{"truncated before last part", good[:len(good)-3072], keysOf(priv), 0, ErrTruncated},
		{"unsigned", rewrite(t, good, func(h *tar.Header, b []byte) (*tar.Header, []byte) {
			if h.Name == SignatureName {
				return nil, nil
			}
			return h, b
		}), keysOf(priv), 0, ErrUnsigned},
		{"corrupt part", rewrite(t, good, func(h *tar.Header, b []byte) (*tar.Header, []byte) {
			if h.Name == "vmlinux.gz" {
				b[100] ^= 1
			}
			return h, b
		}), keysOf(priv), 0, ErrCorrupt},
		{"resized part", rewrite(t, good, func(h *tar.Header, b []byte) (*tar.Header, []byte) {
			if h.Name == "initramfs.cpio.gz" {
				b = b[:10]
			}
			return h, b
		}), keysOf(priv), 0, ErrCorrupt},
		{"tampered manifest", rewrite(t, good, func(h *tar.Header, b []byte) (*tar.Header, []byte) {
			if h.Name == ManifestName {
				b = bytes.Replace(b, []byte(`"security_version": 5`), []byte(`"security_version": 9`), 1)
			}
			return h, b
		}), keysOf(priv), 0, ErrBadSig},
		{"extra member", rewrite(t, good, func(h *tar.Header, b []byte) (*tar.Header, []byte) {
			if h.Name == "initramfs.cpio.gz" {
				h.Name = "evil"
			}
			return h, b
		}), keysOf(priv), 0, ErrUnknownPart},
		{"not a tar", bytes.Repeat([]byte("x"), 2048), keysOf(priv), 0, ErrFormat},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var parts []string
			m, err := ReadBundle(bytes.NewReader(tt.b), tt.keys, VerifyOptions{MinSecurityVersion: tt.minSV,
				OnPart: func(p Part, r io.Reader) error { parts = append(parts, p.Name); return nil }})
			if !errors.Is(err, tt.want) {
				t.Fatalf("got error %v, want %v", err, tt.want)
			}
			if tt.want != nil {
				return
			}
			if diff := cmp.Diff([]string{"vmlinux.gz", "initramfs.cpio.gz"}, parts); diff != "" {
				t.Errorf("parts (-want +got):\n%s", diff)
			}
			if m.Version != "1.2.3" || m.KeyID != KeyID(priv.Public().(ed25519.PublicKey)) {
				t.Errorf("got version %q key %q, want 1.2.3 and the signer's", m.Version, m.KeyID)
			}
		})
	}
}

func TestKeyFiles(t *testing.T) {
	dir := t.TempDir()
	dev := filepath.Join(dir, "keys", "dev.key")
	priv, src, err := LoadOrCreateSigningKey("", dev)
	if err != nil || !src.Generated {
		t.Fatalf("got %v generated=%v, want a new key", err, src.Generated)
	}
	if fi, err := os.Stat(dev); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("dev key mode: %v %v, want 0600", fi.Mode(), err)
	}
	again, src, err := LoadOrCreateSigningKey("", dev)
	if err != nil || src.Generated || !again.Equal(priv) {
		t.Fatalf("second load: generated=%v err=%v, want the same key", src.Generated, err)
	}
	fromEnv, src, err := LoadOrCreateSigningKey(dev, filepath.Join(dir, "unused"))
	if err != nil || !src.FromEnv || !fromEnv.Equal(priv) {
		t.Fatalf("env load: %v %+v", err, src)
	}
	if _, _, err := LoadOrCreateSigningKey(filepath.Join(dir, "missing"), dev); err == nil {
		t.Fatal("got nil error for a missing IMAGE_SIGNING_KEY file, want an error")
	}
	pub, err := MarshalPublicKey(priv.Public().(ed25519.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	kd := filepath.Join(dir, "trusted")
	os.MkdirAll(kd, 0o755)
	os.WriteFile(filepath.Join(kd, "a.pub"), pub, 0o644)
	keys, err := LoadPublicKeys(kd)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(keysOf(priv), keys); diff != "" {
		t.Errorf("keys (-want +got):\n%s", diff)
	}
	if _, err := ParsePublicKeys([]byte("garbage")); !errors.Is(err, ErrKeyFile) {
		t.Errorf("got %v, want ErrKeyFile", err)
	}
}

func FuzzReadBundle(f *testing.F) {
	priv := fixedKey()
	good := makeBundle(f, priv, 1)
	f.Add(good)
	f.Add(good[:700])
	f.Add([]byte{})
	keys := keysOf(priv)
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ReadBundle(bytes.NewReader(b), keys, VerifyOptions{})
		if err == nil && m == nil {
			t.Fatal("nil manifest without error")
		}
	})
}
