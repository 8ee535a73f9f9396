package api_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"cxlpool/api"
	"cxlpool/api/apitest"
	"cxlpool/image/manifest"
	imgupdate "cxlpool/image/update"
)

// fakeUpdater stands in for the box's A/B slots: Apply consumes the
// stream in small chunks, reporting progress, and either refuses after
// refuseAt bytes or marks slot B as the pending trial.
type fakeUpdater struct {
	refuseAt int   // > 0: fail with err once this many bytes were read
	err      error // returned by Apply (after reading everything unless refuseAt)
	hold     chan struct{}

	mu       sync.Mutex
	got      []byte
	progress []int64
	slots    []imgupdate.SlotStatus
}

func newFakeUpdater() *fakeUpdater {
	return &fakeUpdater{slots: []imgupdate.SlotStatus{
		{Slot: imgupdate.SlotA, SlotInfo: imgupdate.SlotInfo{State: imgupdate.StateReady, Version: "1.0.0", SecurityVersion: 3, Size: 4096}, Active: true, Running: true},
		{Slot: imgupdate.SlotB, SlotInfo: imgupdate.SlotInfo{State: imgupdate.StateEmpty}},
	}}
}

func (f *fakeUpdater) Apply(ctx context.Context, r io.Reader, progress func(int64)) (*manifest.Manifest, error) {
	buf := make([]byte, 1000)
	var n int64
	for {
		k, err := r.Read(buf)
		f.mu.Lock()
		f.got = append(f.got, buf[:k]...)
		f.mu.Unlock()
		n += int64(k)
		if k > 0 {
			progress(n)
			f.mu.Lock()
			f.progress = append(f.progress, n)
			f.mu.Unlock()
		}
		if f.refuseAt > 0 && n >= int64(f.refuseAt) {
			return nil, f.err
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("update: reading: %w", err)
		}
	}
	if f.hold != nil {
		<-f.hold
	}
	if f.err != nil {
		return nil, f.err
	}
	f.mu.Lock()
	f.slots[1].SlotInfo = imgupdate.SlotInfo{State: imgupdate.StateReady, Version: "2.0.0", SecurityVersion: 4, Size: n}
	f.slots[1].Trial = true
	f.mu.Unlock()
	return &manifest.Manifest{Version: "2.0.0"}, nil
}

func (f *fakeUpdater) Slots() ([]imgupdate.SlotStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.slots), nil
}

// pushBody is a DMTF multipart push: UpdateParameters then UpdateFile.
func pushBody(t *testing.T, params string, image []byte) ([]byte, string) {
	t.Helper()
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	if params != "" {
		pw, err := w.CreatePart(map[string][]string{"Content-Disposition": {`form-data; name="UpdateParameters"`},
			"Content-Type": {"application/json"}})
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(pw, params)
	}
	if image != nil {
		fw, err := w.CreateFormFile("UpdateFile", "cxlpool-2.0.0.img")
		if err != nil {
			t.Fatal(err)
		}
		fw.Write(image)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes(), w.FormDataContentType()
}

func updateEnv(t *testing.T, f *fakeUpdater, reboot func(context.Context) error) *apitest.Env {
	return apitest.NewServer(t, apitest.Options{Config: func(c *api.Config) {
		c.Update, c.Reboot = f, reboot
		c.MaxImageBytes = 64 << 10
	}})
}

func image(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i * 7)
	}
	return b
}

// TestUpdatePush: the image is streamed into Apply with progress shown
// as the task's PercentComplete; the task ends Completed with the
// written slot, which FirmwareInventory then shows as the pending trial;
// OnReset does not reboot.
func TestUpdatePush(t *testing.T) {
	f := newFakeUpdater()
	f.hold = make(chan struct{})
	reboots := make(chan struct{}, 1)
	env := updateEnv(t, f, func(context.Context) error { reboots <- struct{}{}; return nil })

	us := env.Admin.GetOK(api.UpdateServiceURI)
	if us["MultipartHttpPushUri"] != api.UpdateUploadURI {
		t.Errorf("MultipartHttpPushUri = %v, want %s", us["MultipartHttpPushUri"], api.UpdateUploadURI)
	}
	sup := us["MultipartHttpPushUri@Redfish.OperationApplyTimeSupport"].(map[string]any)["SupportedValues"]
	if diff := cmp.Diff([]any{"Immediate", "OnReset"}, sup); diff != "" {
		t.Errorf("apply times (-want +got):\n%s", diff)
	}

	img := image(20000)
	body, ct := pushBody(t, `{"Targets":[],"@Redfish.OperationApplyTime":"OnReset"}`, img)
	r := env.Admin.Do(http.MethodPost, api.UpdateUploadURI, body, "Content-Type", ct)
	if r.Status != http.StatusAccepted {
		t.Fatalf("push: got %s, want 202", r)
	}
	apitest.Validate(t, r.Body)
	task := env.Admin.GetOK(r.JSON(t)["@odata.id"].(string))
	if task["TaskState"] != "Running" {
		t.Errorf("task state while applying = %v, want Running", task["TaskState"])
	}
	if p := task["PercentComplete"].(float64); p < 80 || p > 90 {
		t.Errorf("PercentComplete after the whole file was written = %v, want 80..90", p)
	}
	close(f.hold)
	final := waitTask(t, env.Admin, r.Header.Get("Location"))
	if final.Status != http.StatusOK {
		t.Fatalf("monitor: got %s, want 200", final)
	}
	done := taskOf(t, env.Admin, final)
	if done["TaskState"] != "Completed" || done["PercentComplete"] != float64(100) {
		t.Errorf("task = %v %v, want Completed 100", done["TaskState"], done["PercentComplete"])
	}
	var ids []string
	for _, m := range done["Messages"].([]any) {
		ids = append(ids, m.(map[string]any)["MessageId"].(string))
	}
	if !slices.Contains(ids, "Update.1.3.UpdateSuccessful") || !slices.Contains(ids, "Update.1.3.AwaitToActivate") {
		t.Errorf("task messages %v, want UpdateSuccessful and AwaitToActivate", ids)
	}
	f.mu.Lock()
	if !bytes.Equal(f.got, img) {
		t.Errorf("Apply read %d bytes, want the %d of the image", len(f.got), len(img))
	}
	if len(f.progress) < 2 || f.progress[len(f.progress)-1] != int64(len(img)) {
		t.Errorf("progress calls %v, want several ending at %d", f.progress, len(img))
	}
	f.mu.Unlock()

	b := env.ReadOnly.GetOK(api.FirmwareInventoryURI + "/Image-B")
	oem := b["Oem"].(map[string]any)["CxlPool"].(map[string]any)
	if b["Version"] != "2.0.0" || oem["Trial"] != true || oem["State"] != "ready" || oem["SecurityVersion"] != float64(4) {
		t.Errorf("Image-B = %v, want version 2.0.0 on trial", b)
	}
	a := env.ReadOnly.GetOK(api.FirmwareInventoryURI + "/Image-A")
	if a["Active"] != true || a["Updateable"] != false {
		t.Errorf("Image-A Active %v Updateable %v, want the running, not updateable slot", a["Active"], a["Updateable"])
	}
	inv := env.ReadOnly.GetOK(api.FirmwareInventoryURI + "?$expand=.")
	if n := inv["Members@odata.count"]; n != float64(4) {
		t.Errorf("firmware inventory has %v members, want FM, DCD, Image-A, Image-B", n)
	}
	select {
	case <-reboots:
		t.Error("OnReset rebooted the box")
	default:
	}
}

// TestUpdatePushImmediate: Immediate reboots through the hook once the
// task has completed, and only then.
func TestUpdatePushImmediate(t *testing.T) {
	f := newFakeUpdater()
	reboots := make(chan struct{}, 1)
	env := updateEnv(t, f, func(context.Context) error { reboots <- struct{}{}; return nil })
	body, ct := pushBody(t, `{"@Redfish.OperationApplyTime":"Immediate"}`, image(3000))
	r := env.Admin.Do(http.MethodPost, api.UpdateUploadURI, body, "Content-Type", ct)
	if r.Status != http.StatusAccepted {
		t.Fatalf("push: got %s, want 202", r)
	}
	if final := waitTask(t, env.Admin, r.Header.Get("Location")); final.Status != http.StatusOK {
		t.Fatalf("monitor: got %s, want 200", final)
	}
	<-reboots // the test would time out if the hook were never called
}

// TestUpdatePushRefused: the image's faults end the task Exception with
// 400 VerificationFailed, a pending trial with 409, and the box's own
// failures with 500; nothing reboots.
func TestUpdatePushRefused(t *testing.T) {
	tests := []struct {
		name     string
		refuseAt int
		err      error
		status   int
		msg      string
	}{
		{"unsigned, refused at the header", 1000, fmt.Errorf("update: %w", manifest.ErrUnsigned), http.StatusBadRequest, "Update.1.3.VerificationFailed"},
		{"corrupt, refused at the end", 0, fmt.Errorf("update: part: %w", manifest.ErrCorrupt), http.StatusBadRequest, "Update.1.3.VerificationFailed"},
		{"older than allowed", 0, fmt.Errorf("update: %w", manifest.ErrRollback), http.StatusBadRequest, "Update.1.3.VerificationFailed"},
		{"trial pending", 1000, imgupdate.ErrTrialPending, http.StatusConflict, "Update.1.3.ApplyFailed"},
		{"disk failure", 0, errors.New("update: write: input/output error"), http.StatusInternalServerError, "Update.1.3.ApplyFailed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeUpdater()
			f.refuseAt, f.err = tt.refuseAt, tt.err
			reboots := make(chan struct{}, 1)
			env := updateEnv(t, f, func(context.Context) error { reboots <- struct{}{}; return nil })
			body, ct := pushBody(t, `{"@Redfish.OperationApplyTime":"Immediate"}`, image(30000))
			r := env.Admin.Do(http.MethodPost, api.UpdateUploadURI, body, "Content-Type", ct)
			if r.Status != http.StatusAccepted {
				t.Fatalf("push: got %s, want 202", r)
			}
			final := waitTask(t, env.Admin, r.Header.Get("Location"))
			if final.Status != tt.status || !slices.Contains(final.MessageIDs(), tt.msg) {
				t.Errorf("monitor: got %s, want %d %s", final, tt.status, tt.msg)
			}
			if task := taskOf(t, env.Admin, final); task["TaskState"] != "Exception" {
				t.Errorf("task state %v, want Exception", task["TaskState"])
			}
			if b := env.Admin.GetOK(api.FirmwareInventoryURI + "/Image-B"); b["Oem"].(map[string]any)["CxlPool"].(map[string]any)["State"] != "empty" {
				t.Errorf("Image-B after a refusal: %v", b)
			}
			select {
			case <-reboots:
				t.Error("a failed update rebooted the box")
			default:
			}
			// A refusal frees the service for the next push.
			f.mu.Lock()
			f.refuseAt, f.err = 0, nil
			f.mu.Unlock()
			body, ct = pushBody(t, `{}`, image(10))
			r = env.Admin.Do(http.MethodPost, api.UpdateUploadURI, body, "Content-Type", ct)
			if r.Status != http.StatusAccepted {
				t.Fatalf("push after the refusal: got %s, want 202", r)
			}
			if final := waitTask(t, env.Admin, r.Header.Get("Location")); final.Status != http.StatusOK {
				t.Errorf("push after the refusal: monitor got %s, want 200", final)
			}
		})
	}
}

// TestUpdatePushBadRequests: malformed or incomplete multipart bodies,
// wrong parameters and oversize images are 4xx, never 5xx, and Apply
// never sees them; only administrators may push.
func TestUpdatePushBadRequests(t *testing.T) {
	f := newFakeUpdater()
	env := updateEnv(t, f, nil)
	good, ct := pushBody(t, `{}`, image(100))
	noParams, ctNoParams := pushBody(t, "", image(100))
	noFile, ctNoFile := pushBody(t, `{}`, nil)
	badJSON, ctBadJSON := pushBody(t, `{"Targets":`, image(100))
	unknown, ctUnknown := pushBody(t, `{"Bogus":1}`, image(100))
	badTarget, ctBadTarget := pushBody(t, `{"Targets":["/redfish/v1/Systems/Host0"]}`, image(100))
	immediate, ctImmediate := pushBody(t, `{"@Redfish.OperationApplyTime":"Immediate"}`, image(100))
	huge, ctHuge := pushBody(t, `{}`, image(2<<20))
	truncated := good[:len(good)/2]
	tests := []struct {
		name   string
		c      *apitest.Client
		body   []byte
		ct     string
		status int
	}{
		{"anonymous", env.Anon, good, ct, http.StatusUnauthorized},
		{"Operator", env.Operator, good, ct, http.StatusForbidden},
		{"ReadOnly", env.ReadOnly, good, ct, http.StatusForbidden},
		{"HostUser", env.Host0, good, ct, http.StatusForbidden},
		{"JSON body", env.Admin, []byte(`{}`), "application/json", http.StatusUnsupportedMediaType},
		{"no boundary", env.Admin, good, "multipart/form-data", http.StatusUnsupportedMediaType},
		{"wrong boundary", env.Admin, good, "multipart/form-data; boundary=nope", http.StatusBadRequest},
		{"garbage", env.Admin, []byte("\x00\x01garbage"), ct, http.StatusBadRequest},
		{"empty", env.Admin, nil, ct, http.StatusBadRequest},
		{"no UpdateParameters", env.Admin, noParams, ctNoParams, http.StatusBadRequest},
		{"no UpdateFile", env.Admin, noFile, ctNoFile, http.StatusBadRequest},
		{"malformed parameters", env.Admin, badJSON, ctBadJSON, http.StatusBadRequest},
		{"unknown parameter", env.Admin, unknown, ctUnknown, http.StatusBadRequest},
		{"foreign target", env.Admin, badTarget, ctBadTarget, http.StatusBadRequest},
		{"Immediate without a reboot hook", env.Admin, immediate, ctImmediate, http.StatusBadRequest},
		{"truncated in the parameters", env.Admin, truncated[:80], ct, http.StatusBadRequest},
		{"too large", env.Admin, huge, ctHuge, http.StatusRequestEntityTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.c.Do(http.MethodPost, api.UpdateUploadURI, tt.body, "Content-Type", tt.ct)
			if r.Status != tt.status {
				t.Errorf("got %s, want %d", r, tt.status)
			}
		})
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.got) != 0 {
		t.Errorf("Apply read %d bytes of refused requests", len(f.got))
	}
}

// TestUpdatePushTruncatedFile: an upload that ends inside the file part
// reaches Apply as a failed read; the task ends Exception (4xx).
func TestUpdatePushTruncatedFile(t *testing.T) {
	f := newFakeUpdater()
	env := updateEnv(t, f, nil)
	body, ct := pushBody(t, `{}`, image(20000))
	r := env.Admin.Do(http.MethodPost, api.UpdateUploadURI, body[:len(body)-5000], "Content-Type", ct)
	if r.Status != http.StatusAccepted {
		t.Fatalf("push: got %s, want 202", r)
	}
	final := waitTask(t, env.Admin, r.Header.Get("Location"))
	if final.Status != http.StatusBadRequest || !slices.Contains(final.MessageIDs(), "Update.1.3.TransferFailed") {
		t.Errorf("monitor: got %s, want 400 TransferFailed", final)
	}
}

// TestUpdateServiceWithoutImage: off the image there is no push URI and
// no slot in the inventory.
func TestUpdateServiceWithoutImage(t *testing.T) {
	env := apitest.NewServer(t)
	us := env.Admin.GetOK(api.UpdateServiceURI)
	if _, ok := us["MultipartHttpPushUri"]; ok {
		t.Errorf("MultipartHttpPushUri advertised without an image: %v", us)
	}
	body, ct := pushBody(t, `{}`, image(10))
	if r := env.Admin.Do(http.MethodPost, api.UpdateUploadURI, body, "Content-Type", ct); r.Status != http.StatusNotFound {
		t.Errorf("push without an image: got %s, want 404", r)
	}
	inv := env.Admin.GetOK(api.FirmwareInventoryURI)
	for _, m := range inv["Members"].([]any) {
		if strings.Contains(m.(map[string]any)["@odata.id"].(string), "Image-") {
			t.Errorf("slot %v listed without an image", m)
		}
	}
}
