package redfish

import (
	"testing"

	"golang.org/x/crypto/bcrypt"
)

// The fixed unknown-user hash must cost what a real one costs, or a
// failed login would tell whether the user exists.
func TestDummyHashCost(t *testing.T) {
	got, err := bcrypt.Cost([]byte(dummyHashDefaultCost))
	if err != nil || got != bcrypt.DefaultCost {
		t.Errorf("dummy hash cost: got %d (%v), want %d", got, err, bcrypt.DefaultCost)
	}
}
