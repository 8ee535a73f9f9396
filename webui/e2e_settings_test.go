package webui_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"

	"cxlpool/api/apitest"
)

// download runs click, which must make the page download a file, and
// returns the file's contents.
func (b *browser) download(what string, click chromedp.Action[chromedp.Void]) []byte {
	b.t.Helper()
	dir := b.t.TempDir()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	done := make(chan string, 1)
	progress := chromedp.Events(ctx, cdpbrowser.DownloadProgress)
	go func() {
		for ev, err := range progress {
			if err != nil {
				return
			}
			if ev.State == cdpbrowser.DownloadProgressStateCompleted {
				done <- ev.GUID
				return
			}
		}
	}()
	enable := true
	b.do(what, chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		_, err := chromedp.Call(ctx, cdpbrowser.SetDownloadBehavior, cdpbrowser.SetDownloadBehaviorParams{
			Behavior: cdpbrowser.SetDownloadBehaviorBehaviorAllowAndName, DownloadPath: dir, EventsEnabled: &enable,
		})
		return err
	}), click)
	select {
	case guid := <-done:
		data, err := os.ReadFile(filepath.Join(dir, guid))
		if err != nil {
			b.t.Fatalf("%s: %v", what, err)
		}
		return data
	case <-ctx.Done():
		b.shot("failed-" + strings.ReplaceAll(what, " ", "-"))
		b.t.Fatalf("%s: no download finished", what)
		return nil
	}
}

// signCSR issues a server certificate for the CSR from a new test CA,
// valid at now, and returns the certificate followed by the CA's.
func signCSR(t *testing.T, csrPEM string, now time.Time) string {
	t.Helper()
	blk, _ := pem.Decode([]byte(csrPEM))
	if blk == nil || blk.Type != "CERTIFICATE REQUEST" {
		t.Fatalf("not a PEM CSR: %q", csrPEM)
	}
	csr, err := x509.ParseCertificateRequest(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if err := csr.CheckSignature(); err != nil {
		t.Fatalf("CSR signature: %v", err)
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "Browser Test CA"},
		NotBefore: now.Add(-24 * time.Hour), NotAfter: now.AddDate(5, 0, 0), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(4242), Subject: csr.Subject, DNSNames: csr.DNSNames,
		IPAddresses: csr.IPAddresses, NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(1, 0, 0),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, csr.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})) +
		string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}))
}

// TestSettingsInBrowser: an administrator sees the box's certificate,
// makes a CSR in the console and downloads it, installs the certificate a
// CA issued for it from a file and sees the new subject; collects a
// support bundle, watches the task and downloads a gzip'd tar. A
// read-only user sees the certificate and the bundles but no button.
func TestSettingsInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Skipf("no Chromium at %s (apt-get install chromium): %v", chromiumPath, err)
	}
	env := apitest.NewServer(t)
	b := newBrowser(t, env.HTTP.URL)
	b.login("admin", apitest.AdminPassword)
	b.page("settings", "Settings")
	b.wait("the certificate", `(document.querySelector('#cert-subject') || {}).textContent?.includes('cxlpool')`)
	b.wait("the bundle card", `document.querySelector('#bundle-collect') && document.querySelector('#bundle-none')`)
	b.shot("settings-01-certificate")

	// A CSR: the form, the request, its download.
	b.do("open the CSR form", chromedp.Click(chromedp.CSS("#cert-csr")))
	b.wait("CSR form", `document.querySelector('dialog[open] #csr-cn')`)
	if got := eval[string](b, `document.querySelector('#csr-cn').value`); got != "127.0.0.1" {
		t.Errorf("common name offered: got %q, want the console's host 127.0.0.1", got)
	}
	// Clear the offered name (chromedp's SetValue cannot set "").
	eval[bool](b, `(document.querySelector('#csr-cn').value = '', true)`)
	b.do("fill in the CSR",
		chromedp.SendKeys(chromedp.CSS("#csr-cn"), "box.example.com"),
		chromedp.SendKeys(chromedp.CSS("#csr-alt"), "10.0.0.5"),
		chromedp.SendKeys(chromedp.CSS("#csr-o"), "Example"),
		chromedp.SendKeys(chromedp.CSS("#csr-c"), "DE"),
	)
	b.shot("settings-02-csr-form")
	b.do("generate", chromedp.Click(chromedp.CSS("#csr-generate")))
	b.wait("the CSR", `(document.querySelector('#csr-pem') || {}).value?.includes('BEGIN CERTIFICATE REQUEST')`)
	b.shot("settings-03-csr")
	csrPEM := eval[string](b, `document.querySelector('#csr-pem').value`)
	if got := b.download("download the CSR", chromedp.Click(chromedp.CSS("#csr-download"))); string(got) != csrPEM {
		t.Errorf("downloaded CSR differs from the one shown:\n%s\nwant\n%s", got, csrPEM)
	}
	b.do("close the CSR dialog", chromedp.Click(chromedp.CSS(`dialog[open] button[aria-label="Close dialog"]`)))
	b.wait("dialog closed", `!document.querySelector('dialog[open]')`)

	// The CA's certificate for the CSR, installed from a file.
	chain := signCSR(t, csrPEM, env.Clock.Now())
	certFile := filepath.Join(t.TempDir(), "box.pem")
	if err := os.WriteFile(certFile, []byte(chain), 0o644); err != nil {
		t.Fatal(err)
	}
	b.do("open the replace form", chromedp.Click(chromedp.CSS("#cert-replace")))
	b.wait("replace form", `document.querySelector('dialog[open] #cert-pem')`)
	b.do("choose the certificate file", chromedp.SetUploadFiles(chromedp.CSS("#cert-file"), []string{certFile}))
	b.wait("the file read", `document.querySelector('#cert-pem').value.includes('BEGIN CERTIFICATE') && !document.querySelector('#cert-install').disabled`)
	b.shot("settings-04-replace")
	b.do("replace", chromedp.Click(chromedp.CSS("#cert-install")))
	b.wait("the new subject", `document.querySelector('#cert-ok') && document.querySelector('#cert-subject').textContent.includes('box.example.com')`)
	if got := eval[string](b, `document.querySelector('#cert-issuer').textContent`); !strings.Contains(got, "Browser Test CA") {
		t.Errorf("issuer shown: got %q, want Browser Test CA", got)
	}
	b.shot("settings-05-replaced")
	cert := env.Admin.GetOK("/redfish/v1/Managers/FM/NetworkProtocol/HTTPS/Certificates/1")
	if got := cert["Subject"].(map[string]any)["CommonName"]; got != "box.example.com" {
		t.Errorf("the API's certificate after the replacement: CommonName %v", got)
	}

	// A support bundle: collect, watch the task, download.
	b.do("collect a support bundle", chromedp.Click(chromedp.CSS("#bundle-collect")))
	b.wait("the bundle ready", `document.querySelector('#bundle-ready #bundle-download') && document.querySelectorAll('#bundles tbody tr').length === 1`)
	if got := eval[string](b, `[...document.querySelectorAll('#bundle-body .task .badge')].map(x => x.textContent).join()`); got != "Completed" {
		t.Errorf("collection task shown as %q, want Completed", got)
	}
	b.shot("settings-06-bundle")
	data := b.download("download the bundle", chromedp.Click(chromedp.CSS("#bundle-download")))
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("the downloaded bundle is not gzip: %v", err)
	}
	tr := tar.NewReader(zr)
	var names []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the downloaded bundle's tar: %v", err)
		}
		names = append(names, h.Name)
	}
	if len(names) == 0 || names[len(names)-1] != "manifest.json" {
		t.Errorf("bundle members: got %v, want manifest.json last", names)
	}

	// A read-only user sees the certificate and the bundle, and no button.
	b.logout()
	b.login(apitest.UserReadOnly, apitest.UserPassword)
	b.page("settings", "Settings")
	b.wait("the certificate for the reader", `(document.querySelector('#cert-subject') || {}).textContent?.includes('box.example.com')`)
	b.wait("the bundle list for the reader", `document.querySelectorAll('#bundles tbody tr').length === 1`)
	if n := eval[int](b, `document.querySelectorAll('#cert-body dd, #bundle-body td').length`); n < 8 {
		t.Errorf("certificate details and bundle rows shown to a read-only user: got %d cells, want at least 8", n)
	}
	if n := eval[int](b, `document.querySelectorAll('#cert-body button, #bundle-body button').length`); n != 0 {
		t.Errorf("certificate and bundle buttons for a read-only user: got %d, want 0", n)
	}
	b.shot("settings-07-readonly")
	// The box refuses the reader the bundle itself, whatever the page.
	r := env.ReadOnly.Get("/redfish/v1/Managers/FM/LogServices/Diagnostic/Entries/1/attachment")
	if r.Status != http.StatusForbidden {
		t.Errorf("a reader downloading the bundle: got %d, want 403", r.Status)
	}
	if errs := b.errors(); len(errs) > 0 {
		t.Errorf("browser console errors:\n%s", strings.Join(errs, "\n"))
	}
}
