package dcd

import "fmt"

// regionRefusal is the allocation rule for a region's clearing: a region
// whose Sanitize on Release is off gets no new chunks. The FM asks for
// sanitize in every release it sends, but capacity a host gives back on its
// own is cleared only by the region's setting, so with it off the next host
// given those blocks could read the previous one's data. Discovery turns
// the setting on wherever the device lets it (fabric/fm), so a region still
// off here is one the device would not change: fixed off, or holding
// capacity when it was asked. Chunks already in the region keep working.
func regionRefusal(r Region) error {
	if r.SanitizeOnRelease {
		return nil
	}
	return unsanitizedRegion(r.Index)
}

// AllocationRefusal says why Reserve refuses new chunks in r (nil: it
// does not), for views that show it beside the region.
func AllocationRefusal(r Region) error { return regionRefusal(r) }

// unsanitizedRegion is regionRefusal's error: the rule as its text, and
// ErrInvalid (the request cannot be served as asked, whatever the load).
type unsanitizedRegion int

func (e unsanitizedRegion) Error() string {
	return fmt.Sprintf("region %d does not sanitize capacity a host releases itself "+
		"(Sanitize on Release is off and the device does not let it be changed): allocation refused", int(e))
}

func (unsanitizedRegion) Unwrap() error { return ErrInvalid }
