package redfish

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestResolve(t *testing.T) {
	reg, err := LoadRegistries()
	if err != nil {
		t.Fatal(err)
	}
	got := reg.Resolve(M("Base.PropertyValueNotInList", "Root", "RoleId").WithRelated("RoleId"))
	want := Message{
		ODataType: messageODataType, MessageID: "Base.1.22.PropertyValueNotInList",
		Message:     "The value 'Root' for the property RoleId is not in the list of acceptable values.",
		MessageArgs: []string{"Root", "RoleId"}, Severity: "Warning", MessageSeverity: "Warning",
		Resolution:        "Choose a value from the enumeration list that the implementation can support and resubmit the request if the operation failed.",
		RelatedProperties: []string{"#/RoleId"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Resolve (-want +got):\n%s", diff)
	}
	if got := reg.Resolve(M("Base.NoSuchMessage")); got.MessageID != "Base.1.22.GeneralError" {
		t.Errorf("unknown key resolves to %s, want GeneralError", got.MessageID)
	}
	if got := reg.Resolve(M("TaskEvent.TaskCompletedOK", 12)); got.Message != "The task with Id '12' has completed." {
		t.Errorf("TaskCompletedOK: %q", got.Message)
	}
}

// FuzzDecode: the strict decoder never panics, and refuses only with a
// 4xx registry error (the resources' bodies: api's FuzzDecode).
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"SessionTimeout": 1e400}`, `{"Destination": "https://a", "Protocol": "Redfish"}`,
		`{"Id": "1"}`, `{"Links": {}}`, `[]`, `null`, `{"a@odata.type": 1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, dst := range []any{&sessionServicePatch{}, &subscriptionCreate{}} {
			err := DecodeJSON(b, dst)
			if err == nil {
				continue
			}
			var e *Error
			if !errors.As(err, &e) || e.Status < 400 || e.Status >= 500 {
				t.Fatalf("decode %q into %T: %v", b, dst, err)
			}
		}
	})
}
