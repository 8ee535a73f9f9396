package dcd

// SetHookAfterSnapshot lets the package's external tests run f between
// Reconcile's device and ledger reads, where a flow finishing makes the
// snapshot stale.
func SetHookAfterSnapshot(m *Manager, f func()) {
	m.mu.Lock()
	m.hookAfterSnapshot = f
	m.mu.Unlock()
}

// HoldFlowLocks takes chunk c's and host h's locks as a running flow holds
// them, until the returned function is called.
func HoldFlowLocks(m *Manager, c ChunkID, h HostID) func() {
	unlockC := m.lockChunk(c)
	unlockH := m.lockHost(h)
	return func() { unlockH(); unlockC() }
}
