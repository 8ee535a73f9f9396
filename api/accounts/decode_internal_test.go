package accounts

import (
	"errors"
	"testing"

	"cxlpool/api/redfish"
)

// FuzzDecode: the strict decoder never panics, and refuses only with a
// 4xx registry error.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"UserName": "a", "Password": "pw", "RoleId": "Operator"}`,
		`{"Oem": {"CxlPool": {"SystemId": "Host0"}}}`,
		`{"Enabled": true, "Locked": false, "AccountTypes": ["Redfish"]}`,
		`{"Id": "1"}`, `{"Links": {}}`, `[]`, `null`, `{"UserName": 1}`, `{"a@odata.type": 1}`,
		`{"SessionTimeout": 1e400}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, dst := range []any{&accountPatch{}, &accountCreate{}} {
			err := redfish.DecodeJSON(b, dst)
			if err == nil {
				continue
			}
			var e *redfish.Error
			if !errors.As(err, &e) || e.Status < 400 || e.Status >= 500 {
				t.Fatalf("decode %q into %T: %v", b, dst, err)
			}
		}
	})
}
