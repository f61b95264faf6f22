package router

// descriptorLimit is 0 on Windows: sockets are handles without a per-process limit of the
// Unix kind, and the default budget applies.
func descriptorLimit() int { return 0 }
