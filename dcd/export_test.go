package dcd

// SetHookAfterSnapshot lets the package's external tests run f between
// Reconcile's device and ledger reads, where a flow finishing makes the
// snapshot stale.
func SetHookAfterSnapshot(m *Manager, f func()) {
	m.mu.Lock()
	m.hookAfterSnapshot = f
	m.mu.Unlock()
}
