package proc

// CachedEntries is the number of PIDs r's cache holds, for the eviction test.
func (r *WindowsResolver) CachedEntries() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.entries)
}
